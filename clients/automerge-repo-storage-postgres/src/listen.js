// The documents table's writes reach a JS server's clients, as the Rust server's
// sync_server/src/listen.rs makes them reach its own: LISTEN on the table's
// `automerge_notify` channel, and for each INSERT or UPDATE of a row whose document the
// repo holds, hand the row to the repo unless it has the notified heads. So a SQL write,
// or a change merged by the Rust server or another JS server, syncs to every client of
// this one. The repo's own merges notify too; their heads are in the repo already and
// cost a lookup, not a load. A row the repo does not hold is loaded when a client asks.

import { setTimeout as sleep } from "node:timers/promises"

import { hasHeads, loadIncremental } from "@automerge/automerge"
import { isValidDocumentId } from "@automerge/automerge-repo"

/** How long to wait before listening again after the connection dropped: the Rust server's. */
const RECONNECT_MS = 1000

/**
 * Listens until `signal` aborts, connecting again after a second whenever the connection
 * is lost (notifications sent meanwhile are not replayed). Resolves once it stopped and
 * no notification is being handed to the repo any more.
 * @param {object} options
 * @param {() => Promise<import("pg").PoolClient>} options.connect a connection of its own
 * @param {string} options.channel the documents table's NOTIFY channel
 * @param {(documentId: string) => Promise<Uint8Array | undefined>} options.loadRow the row's
 *   document
 * @param {(error: Error, retryInMs: number) => void} options.onLost called when the connection
 *   is lost
 * @param {AbortSignal} options.signal
 * @param {import("@automerge/automerge-repo").Repo} repo
 */
export async function listenForWrites({ connect, channel, loadRow, onLost, signal }, repo) {
  const handing = new Set()
  const notified = payload => {
    const handed = handToRepo(payload, repo, loadRow, signal).catch(() => {})
    handing.add(handed)
    handed.finally(() => handing.delete(handed))
  }
  while (!signal.aborted) {
    try {
      await listenOnce({ connect, channel, notified, signal })
    } catch (error) {
      if (signal.aborted) break
      onLost(error, RECONNECT_MS)
      await sleep(RECONNECT_MS, undefined, { signal }).catch(() => {})
    }
  }
  await Promise.all(handing)
}

/** One connection's LISTEN, until it is lost (rejects) or `signal` aborts (resolves). */
async function listenOnce({ connect, channel, notified, signal }) {
  const client = await connect()
  try {
    await new Promise((resolve, reject) => {
      signal.addEventListener("abort", resolve, { once: true })
      client.on("error", reject)
      client.on("end", () => reject(new Error("the LISTEN connection ended")))
      client.on("notification", ({ payload }) => notified(payload))
      client.query(`LISTEN ${channel}`).catch(reject)
    })
  } finally {
    // A connection that LISTENed does not go back to the pool.
    client.release(true)
  }
}

/**
 * One notification: the written row's document into the repo, unless the repo has it, or
 * listening stopped meanwhile (the app may be shutting the repo down).
 */
async function handToRepo(payload, repo, loadRow, signal) {
  const { operation, key, heads } = JSON.parse(payload)
  // A row deleted in SQL keeps its chunks; a payload truncated without its key names no
  // row; a row whose id is no document id is left to SQL.
  if (operation === "DELETE" || typeof key?.id !== "string" || !isValidDocumentId(key.id)) return
  const handle = repo.handles[key.id]
  if (!handle?.isReady()) return
  if (heads && hasHeads(handle.doc(), heads)) return
  const row = await loadRow(key.id)
  if (row && !signal.aborted) handle.update(doc => loadIncremental(doc, row))
}
