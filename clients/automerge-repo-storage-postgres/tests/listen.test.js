// listen(repo): a SQL write reaches the document a repo holds, and keeps reaching it
// after the LISTEN connection is lost and made again.

import assert from "node:assert/strict"
import { test } from "node:test"

import { Repo } from "@automerge/automerge-repo"

import { PostgresStorageAdapter } from "../src/index.js"
import {
  database,
  databaseUrlThrough,
  eventually,
  plain,
  proxyToPostgres,
  rowBecomes,
} from "./helpers.js"

test("listen hands SQL's writes to the repo, and listens again after losing its connection", async t => {
  const { proxy, cut } = proxyToPostgres()
  await new Promise(resolve => proxy.listen(0, "127.0.0.1", resolve))
  const retried = []
  const storage = new PostgresStorageAdapter({
    connectionString: databaseUrlThrough(proxy.address().port),
    onRetry: (_error, { operation, retryInMs }) => retried.push([operation, retryInMs]),
  })
  const repo = new Repo({ storage, network: [] })
  // In this order: listening stops, the repo saves, then the adapter closes its
  // connections, through the proxy, which waits for them.
  let stop = async () => {}
  t.after(async () => {
    await stop()
    await repo.shutdown()
    await storage.close()
    await new Promise(resolve => proxy.close(resolve))
  })
  const handle = repo.create({ title: "Listened", status: "new" })
  const db = await database(t)
  await rowBecomes(db, handle.documentId, handle.doc())
  stop = storage.listen(repo)

  const setStatus = status =>
    db.query("UPDATE documents SET doc = automerge_set(doc, '{status}', $2::jsonb) WHERE id = $1", [
      handle.documentId,
      JSON.stringify(status),
    ])
  // The LISTEN may not be in place yet: write until the repo has it.
  await eventually("a SQL write reaches the repo", async () => {
    await setStatus("first")
    return handle.doc().status === "first" || JSON.stringify(handle.doc())
  })

  cut()
  await eventually("the lost connection is reported", () => {
    return retried.some(([operation]) => operation === "listen") || JSON.stringify(retried)
  })
  assert.deepEqual(
    retried.find(([operation]) => operation === "listen"),
    ["listen", 1000],
  )
  await eventually("a SQL write after the reconnection reaches the repo", async () => {
    await setStatus("second")
    return handle.doc().status === "second" || JSON.stringify(handle.doc())
  })
  // The repo saved what it received: the row and the repo agree.
  await rowBecomes(db, handle.documentId, plain(handle.doc()))
})
