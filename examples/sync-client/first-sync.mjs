// The JS first sync of `cargo xtask bench --sync`: automerge-repo 2.5 clients against a
// sync server (ours or automerge-repo's own, node-server.mjs) holding many stored
// documents, as a user's app opening its documents after the server restarted.
//
//   node first-sync.mjs --server ws://… --seed N --ids FILE
//     Clients create N documents, SEED_PER_CLIENT each, and a second client finds each of
//     theirs (so the server has it), FIND_CONCURRENCY at a time; the ids go to FILE, one
//     per line.
//   node first-sync.mjs --server ws://… --find FILE
//     A fresh client finds every document of FILE, FIND_CONCURRENCY at a time.
//
// Each prints one JSON line: how many documents, how many finds did not succeed within
// FIND_WITHIN_MS (`failed`), and the seconds it took.

import { readFile, writeFile } from "node:fs/promises"
import { performance } from "node:perf_hooks"
import { parseArgs } from "node:util"

import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"

const { values } = parseArgs({
  options: {
    server: { type: "string" },
    seed: { type: "string" },
    ids: { type: "string" },
    find: { type: "string" },
  },
})
const usage = "usage: node first-sync.mjs --server ws://… (--seed N --ids FILE | --find FILE)"
if (!values.server || !(values.find || (Number(values.seed) > 0 && values.ids))) {
  throw new Error(usage)
}

/// Documents asked for at once, as the samod client of the same bench does.
const FIND_CONCURRENCY = 50
/// Documents each seeding client creates: a client holding thousands of documents slows
/// down (automerge-repo's own cost), and the seed is only the set-up.
const SEED_PER_CLIENT = 500
/// A find that has not succeeded by then has failed.
const FIND_WITHIN_MS = 30_000

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const client = () => new Repo({ network: [new WebSocketClientAdapter(values.server)] })

/// Whether `repo` finds `url` within FIND_WITHIN_MS, retrying: a new document may still
/// be on its way to the server.
async function finds(repo, url) {
  const started = performance.now()
  for (;;) {
    const left = FIND_WITHIN_MS - (performance.now() - started)
    if (left <= 0) return false
    try {
      await repo.find(url, { signal: AbortSignal.timeout(Math.ceil(left)) })
      return true
    } catch {
      await sleep(50)
    }
  }
}

/// How many of `items` fail `work`, FIND_CONCURRENCY at a time.
async function failures(items, work) {
  let failed = 0
  for (let at = 0; at < items.length; at += FIND_CONCURRENCY) {
    const batch = await Promise.all(items.slice(at, at + FIND_CONCURRENCY).map(work))
    failed += batch.filter(ok => !ok).length
  }
  return failed
}

const started = performance.now()
let documents
let failed
if (values.find) {
  const urls = (await readFile(values.find, "utf8")).split("\n").filter(Boolean)
  const reader = client()
  documents = urls.length
  failed = await failures(urls, url => finds(reader, url))
} else {
  documents = Number(values.seed)
  const urls = []
  failed = 0
  for (let at = 0; at < documents; at += SEED_PER_CLIENT) {
    const [writer, checker] = [client(), client()]
    const numbers = [...Array(Math.min(SEED_PER_CLIENT, documents - at)).keys()]
    failed += await failures(numbers, n => {
      const handle = writer.create({ n: at + n, title: `document ${at + n}` })
      urls.push(handle.url)
      return finds(checker, handle.url)
    })
    await Promise.all([writer.shutdown(), checker.shutdown()])
  }
  await writeFile(values.ids, urls.join("\n") + "\n")
}
const seconds = (performance.now() - started) / 1000
console.log(JSON.stringify({ documents, failed, seconds: Math.round(seconds * 1000) / 1000 }))
process.exit(0)
