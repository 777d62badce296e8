// The JS clients of `cargo xtask bench --sync`: automerge-repo 2.5 writer/reader pairs
// against a sync server (ours or automerge-repo's own, node-server.mjs), as a user would
// try it: every writer and every reader a Repo with its own WebSocket, one document per
// pair, each round every writer changing its document at once, each change timed until
// its reader has it.
//
//   node bench.mjs --server ws://… --pairs N --rounds R [--pg postgresql://…]
//
// Prints one JSON line: every change's round trip (`samples_ms`), the changes that did
// not arrive within a round's time (`missing`), the readers whose `find` did not succeed
// within 10 s of their writer's `create` (`failed_finds`, left out of the rounds), the
// time from `create` to a successful `find` and, with --pg, to the document's row in the
// documents table (`create_to_row_ms`).

import { performance } from "node:perf_hooks"
import { parseArgs } from "node:util"

import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import pg from "pg"

const { values } = parseArgs({
  options: {
    server: { type: "string" },
    pairs: { type: "string" },
    rounds: { type: "string" },
    pg: { type: "string" },
  },
})
const [pairs, rounds] = [Number(values.pairs), Number(values.rounds)]
if (!values.server || !(pairs > 0) || !(rounds > 0)) {
  throw new Error("usage: node bench.mjs --server ws://… --pairs N --rounds R [--pg …]")
}

/// Pairs set up at once: each waits for its document to reach the server.
const SETUP_CONCURRENCY = 20
/// As the trial: a reader whose find has not succeeded by then has failed.
const FIND_WITHIN_MS = 10_000
/// A change not at its reader this long after its writer's commit is missing.
const ROUND_MS = 60_000
/// How long a new document's row may take before it counts as never stored.
const ROW_WITHIN_MS = 30_000

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const repos = []

function repo() {
  const made = new Repo({ network: [new WebSocketClientAdapter(values.server)] })
  repos.push(made)
  return made
}

const db = values.pg ? new pg.Pool({ connectionString: values.pg, max: 4 }) : null

/// Milliseconds from `created` until the documents table has a row for `documentId`.
async function rowAfter(documentId, created) {
  while (performance.now() - created < ROW_WITHIN_MS) {
    const { rowCount } = await db.query("SELECT 1 FROM documents WHERE id = $1", [documentId])
    if (rowCount > 0) return performance.now() - created
    await sleep(10)
  }
  return null
}

/// A writer with a new document and a reader that finds it, retrying as the document may
/// still be on its way to the server.
async function pair(n) {
  const writer = repo()
  const created = performance.now()
  const handle = writer.create({ pair: n, round: -1 })
  const row = db ? rowAfter(handle.documentId, created) : Promise.resolve(null)
  const reader = repo()
  let found = null
  for (;;) {
    const left = FIND_WITHIN_MS - (performance.now() - created)
    if (left <= 0) break
    try {
      found = await reader.find(handle.url, { signal: AbortSignal.timeout(Math.ceil(left)) })
      break
    } catch {
      await sleep(50)
    }
  }
  const foundMs = found ? performance.now() - created : null
  return { writer: handle, reader: found, foundMs, rowMs: await row }
}

/// Runs `work` on every item, `limit` at a time, keeping the order.
async function inBatches(items, limit, work) {
  const results = []
  for (let at = 0; at < items.length; at += limit) {
    results.push(...(await Promise.all(items.slice(at, at + limit).map(work))))
  }
  return results
}

/// When `handle`'s document shows `round` (performance.now()), or null after ROUND_MS.
function arrival(handle, round) {
  return new Promise(resolve => {
    const shows = () => handle.doc()?.round === round
    if (shows()) return resolve(performance.now())
    const timer = setTimeout(() => {
      handle.off("change", check)
      resolve(null)
    }, ROUND_MS)
    function check() {
      if (!shows()) return
      clearTimeout(timer)
      handle.off("change", check)
      resolve(performance.now())
    }
    handle.on("change", check)
  })
}

const made = await inBatches([...Array(pairs).keys()], SETUP_CONCURRENCY, pair)
const ready = made.filter(p => p.reader)
const samples = []
let missing = 0
for (let round = 0; round < rounds; round++) {
  const arrivals = ready.map(p => arrival(p.reader, round))
  const sent = ready.map(p => {
    const started = performance.now()
    p.writer.change(d => {
      d.round = round
    })
    return started
  })
  const arrived = await Promise.all(arrivals)
  arrived.forEach((at, i) => (at === null ? missing++ : samples.push(at - sent[i])))
}
const round3 = ms => (ms === null ? null : Math.round(ms * 1000) / 1000)
console.log(
  JSON.stringify({
    pairs,
    rounds,
    samples_ms: samples.map(round3),
    missing,
    failed_finds: made.length - ready.length,
    create_to_found_ms: made.map(p => round3(p.foundMs)).filter(ms => ms !== null),
    create_to_row_ms: db ? made.map(p => round3(p.rowMs)) : [],
  }),
)
process.exit(0)
