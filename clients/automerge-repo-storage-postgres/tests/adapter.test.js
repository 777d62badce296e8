// The adapter on its own: refused chunks kept pending, removal, the documents row in a
// load of snapshots, key and name checks, retries while Postgres is unreachable, and the
// refusal of a server without pg_automerge.

import assert from "node:assert/strict"
import { test } from "node:test"

import * as A from "@automerge/automerge"
import { generateAutomergeUrl, parseAutomergeUrl } from "@automerge/automerge-repo"
import pg from "pg"

import { PostgresStorageAdapter, ROW_SNAPSHOT } from "../src/index.js"
import {
  DATABASE_URL,
  chunksOf,
  database,
  databaseUrlThrough,
  proxyToPostgres,
  rowJson,
} from "./helpers.js"

const newDocumentId = () => parseAutomergeUrl(generateAutomergeUrl()).documentId
const quiet = () => {}

test("a chunk whose dependency is missing stays pending with a refusal, and merges when it arrives", async t => {
  const db = await database(t)
  const storage = new PostgresStorageAdapter({ connectionString: DATABASE_URL, onRetry: quiet })
  t.after(() => storage.close())
  const id = newDocumentId()
  const first = A.from({ title: "first" })
  const second = A.change(first, doc => {
    doc.status = "second"
  })
  const firstBytes = A.save(first)
  const secondBytes = A.saveSince(second, A.getHeads(first))

  await storage.save([id, "incremental", "second"], secondBytes)
  let chunks = await chunksOf(db, id)
  assert.equal(chunks.length, 1)
  assert.equal(chunks[0].pending, true)
  assert.ok(chunks[0].refusal, "the refusal says why")
  assert.equal(await rowJson(db, id), undefined, "no row holds a change without its dependency")
  assert.deepEqual(
    await storage.load([id, "incremental", "second"]),
    secondBytes,
    "the bytes are kept as put",
  )

  await storage.save([id, "snapshot", "first"], firstBytes)
  chunks = await chunksOf(db, id)
  assert.deepEqual(
    chunks.map(chunk => [chunk.pending, chunk.refusal]),
    [
      [false, null],
      [false, null],
    ],
  )
  assert.deepEqual(await rowJson(db, id), { title: "first", status: "second" })

  // Bytes that are no document stay pending for good, the row as it was.
  await storage.save([id, "incremental", "garbage"], new Uint8Array([1, 2, 3]))
  const garbage = (await chunksOf(db, id)).find(chunk => chunk.key.endsWith("/garbage"))
  assert.equal(garbage.pending, true)
  assert.match(garbage.refusal, /^[0-9A-Z]{5}: /, "the refusal starts with the SQLSTATE")
  assert.deepEqual(await rowJson(db, id), { title: "first", status: "second" })
})

test("remove, removeRange and a load of snapshots with the documents row", async t => {
  const db = await database(t)
  const tables = {
    documents: "adapter_documents",
    chunks: "adapter_chunks",
    channel: "adapter_documents_changed",
  }
  const storage = new PostgresStorageAdapter({
    connectionString: DATABASE_URL,
    tables,
    onRetry: quiet,
  })
  t.after(() => storage.close())
  await storage.ready()
  const id = newDocumentId()
  const snapshot = A.save(A.from({ title: "kept" }))
  await storage.save([id, "snapshot", "s1"], snapshot)
  await storage.save([id, "sync-state", "peer-a"], new Uint8Array([1]))
  await storage.save([id, "sync-state", "peer-b"], new Uint8Array([2]))
  await storage.save(["storage-adapter-id"], new TextEncoder().encode("an id"))

  const snapshots = await storage.loadRange([id, "snapshot"])
  assert.deepEqual(snapshots.map(chunk => chunk.key).sort(), [
    [id, "snapshot", ROW_SNAPSHOT],
    [id, "snapshot", "s1"],
  ])
  assert.deepEqual(
    (await storage.loadRange([id])).length,
    3,
    "only a load of snapshots adds the row",
  )
  assert.deepEqual(
    (await storage.loadRange([id, "sync-state"])).map(chunk => chunk.key[2]).sort(),
    ["peer-a", "peer-b"],
  )

  await storage.remove([id, "sync-state", "peer-a"])
  assert.equal(await storage.load([id, "sync-state", "peer-a"]), undefined)
  await storage.remove([id, "snapshot", ROW_SNAPSHOT])
  await storage.removeRange([id, "sync-state"])
  assert.deepEqual(
    (await storage.loadRange([id])).map(chunk => chunk.key[1]),
    ["snapshot"],
  )
  await storage.removeRange([id])
  assert.deepEqual(await storage.loadRange([id]), [])
  assert.deepEqual(
    await rowJson(db, id, "adapter_documents"),
    { title: "kept" },
    "removal leaves the row",
  )
  assert.deepEqual(
    (await storage.loadRange([id, "snapshot"])).map(chunk => chunk.key),
    [[id, "snapshot", ROW_SNAPSHOT]],
    "the row is still the document",
  )
  assert.equal(new TextDecoder().decode(await storage.load(["storage-adapter-id"])), "an id")

  await assert.rejects(storage.save([id, "a/b"], snapshot), TypeError)
  await assert.rejects(storage.load([id, ""]), TypeError)
  assert.throws(
    () =>
      new PostgresStorageAdapter({ connectionString: DATABASE_URL, tables: { chunks: "Chunks;" } }),
    TypeError,
  )
})

test("a save waits, retrying with a growing backoff, until Postgres can be reached", async t => {
  const { proxy } = proxyToPostgres()
  // A free port that nothing listens on until the proxy starts there.
  await new Promise(resolve => proxy.listen(0, "127.0.0.1", resolve))
  const { port } = proxy.address()
  await new Promise(resolve => proxy.close(resolve))
  const url = databaseUrlThrough(port)
  const waits = []
  const storage = new PostgresStorageAdapter({
    connectionString: url,
    onRetry: (_error, { retryInMs }) => waits.push(retryInMs),
  })
  t.after(() => storage.close())
  const id = newDocumentId()
  const saved = storage.save([id, "snapshot", "s1"], A.save(A.from({ title: "waited" })))
  while (waits.length < 4) await new Promise(resolve => setTimeout(resolve, 20))
  assert.deepEqual(waits.slice(0, 4), [50, 100, 200, 400])
  await new Promise(resolve => proxy.listen(port, "127.0.0.1", resolve))
  await saved
  const db = await database(t)
  assert.deepEqual(await rowJson(db, id), { title: "waited" })
  await storage.close()
  await new Promise(resolve => proxy.close(resolve))

  // A closed adapter stops waiting: what was still retrying rejects.
  const closed = new PostgresStorageAdapter({ connectionString: url, onRetry: quiet })
  t.after(() => closed.close())
  const never = closed.load([id, "snapshot", "s1"])
  await new Promise(resolve => setTimeout(resolve, 100))
  await closed.close()
  await assert.rejects(never, /closed/)
})

test("without pg_automerge on the server, ready() and every operation refuse, saying so", async () => {
  // A pool whose server has no pg_automerge: CREATE EXTENSION fails as Postgres fails it.
  const missing = new pg.DatabaseError('extension "pg_automerge" is not available', 0, "error")
  missing.code = "58P01"
  const connection = {
    async query(sql) {
      if (sql.includes("CREATE EXTENSION")) throw missing
      return { rows: [], rowCount: 0 }
    },
    release() {},
    on() {},
    off() {},
  }
  const retries = []
  const storage = new PostgresStorageAdapter({
    pool: { connect: async () => connection },
    onRetry: error => retries.push(error),
  })
  await assert.rejects(storage.ready(), /pg_automerge is not installed on this PostgreSQL server/)
  await assert.rejects(storage.save(["a", "snapshot", "b"], new Uint8Array([1])), /not installed/)
  assert.deepEqual(retries, [], "a refusal is not retried")
  await storage.close()
})
