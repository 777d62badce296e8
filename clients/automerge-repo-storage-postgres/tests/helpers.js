// What the tests share: a JS sync server on the adapter, clients, and the database, all
// given by the environment (`cargo xtask test --only node` sets it, see the README).
// Each closes after its test, passed or failed, so that a failure does not keep the
// test's process from exiting.

import { connect, createServer } from "node:net"
import { isDeepStrictEqual } from "node:util"

import { Repo } from "@automerge/automerge-repo"
import {
  NodeWSServerAdapter,
  WebSocketClientAdapter,
} from "@automerge/automerge-repo-network-websocket"
import pg from "pg"
import { WebSocketServer } from "ws"

import { PostgresStorageAdapter } from "../src/index.js"

/** A database with pg_automerge installed. */
export const DATABASE_URL = process.env.DATABASE_URL
if (!DATABASE_URL)
  throw new Error("the tests need DATABASE_URL: a database where pg_automerge is installed")

/** pg_automerge's Rust sync server on the same database, when one runs. */
export const SYNC_SERVER_URL = process.env.SYNC_SERVER_URL

// How long convergence may take before a test fails (a loaded 2-core machine).
const CONVERGE_MS = 30_000

/** `close` once, however often it is called: a test's own call and its after hook. */
function once(close) {
  let closed
  return () => (closed ??= close())
}

/** Resolves once `probe` returns true, retrying what it throws or returns otherwise. */
export async function eventually(what, probe, ms = CONVERGE_MS) {
  const deadline = Date.now() + ms
  for (;;) {
    let last
    try {
      last = await probe()
      if (last === true) return
    } catch (error) {
      last = error.message
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${last})`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

/**
 * automerge-repo's Node sync server as an app keeps it, storing with the adapter and
 * listening for the table's writes: a Repo with a NodeWSServerAdapter on a free loopback
 * port, announcing nothing to peers.
 */
export async function startJsServer(t, options = {}) {
  const sockets = new WebSocketServer({ host: "127.0.0.1", port: 0 })
  await new Promise(resolve => sockets.once("listening", resolve))
  const storage = new PostgresStorageAdapter({ connectionString: DATABASE_URL, ...options })
  await storage.ready()
  const repo = new Repo({
    network: [new NodeWSServerAdapter(sockets)],
    storage,
    peerId: `js-server-${process.pid}-${Date.now()}`,
    sharePolicy: async () => false,
  })
  const stopListening = storage.listen(repo)
  const stop = once(async () => {
    await stopListening()
    await repo.shutdown()
    await storage.close()
    await new Promise(resolve => sockets.close(resolve))
  })
  t.after(stop)
  return { url: `ws://127.0.0.1:${sockets.address().port}`, repo, storage, stop }
}

/** A client with no storage of its own, reconnecting every quarter second. */
export function client(t, url) {
  const repo = new Repo({ network: [new WebSocketClientAdapter(url, 250)] })
  const shutdown = once(() => repo.shutdown())
  t.after(shutdown)
  return { repo, shutdown }
}

/**
 * `repo.find` once the client is connected (a repo that asks before it is caches the
 * answer "unavailable" for a while) and the server has the document.
 */
export async function find({ repo }, url) {
  await eventually("the client connects", () => repo.peers.length > 0)
  let handle
  await eventually(`${url} found`, async () => {
    handle = await repo.find(url, { signal: AbortSignal.timeout(5000) })
    return true
  })
  return handle
}

export async function database(t) {
  const db = new pg.Client(DATABASE_URL)
  await db.connect()
  t.after(once(() => db.end()))
  return db
}

/** The document's row as JSON (`doc::jsonb`), or undefined without a row. */
export async function rowJson(db, documentId, table = "documents") {
  const { rows } = await db.query(`SELECT doc::jsonb AS json FROM ${table} WHERE id = $1`, [
    documentId,
  ])
  return rows[0]?.json
}

/** A document as plain JSON values, as `doc::jsonb` reads it. */
export function plain(doc) {
  return JSON.parse(JSON.stringify(doc))
}

/** Waits until the document's row is `expected` (a document). */
export async function rowBecomes(db, documentId, expected) {
  await eventually(`the row of ${documentId}`, async () => {
    const row = await rowJson(db, documentId)
    return isDeepStrictEqual(row, plain(expected)) || JSON.stringify(row)
  })
}

/** The document's chunks: key, pending, refusal, by key. */
export async function chunksOf(db, documentId, table = "automerge_repo_chunks") {
  const { rows } = await db.query(
    `SELECT key, pending, refusal FROM ${table} WHERE document_id = $1 ORDER BY key`,
    [documentId],
  )
  return rows
}

/**
 * A TCP proxy to the tests' Postgres, not listening yet: `proxy.listen(…)` starts it, and
 * `cut()` drops every connection through it, as a network failure would.
 */
export function proxyToPostgres() {
  const target = new URL(DATABASE_URL)
  const sockets = new Set()
  const proxy = createServer(socket => {
    const upstream = connect(Number(target.port), target.hostname)
    for (const end of [socket, upstream]) {
      sockets.add(end)
      end.on("close", () => sockets.delete(end))
    }
    socket.pipe(upstream).pipe(socket)
    socket.on("error", () => upstream.destroy())
    upstream.on("error", () => socket.destroy())
  })
  const cut = () => {
    for (const socket of sockets) socket.destroy()
  }
  return { proxy, cut }
}

/** DATABASE_URL with its host and port replaced by the loopback port `port`. */
export function databaseUrlThrough(port) {
  const url = new URL(DATABASE_URL)
  url.hostname = "127.0.0.1"
  url.port = String(port)
  return url.toString()
}
