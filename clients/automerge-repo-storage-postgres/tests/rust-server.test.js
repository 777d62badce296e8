// A JS server on the adapter and pg_automerge's Rust sync server sharing one database:
// each one's clients read what the other's wrote, and concurrent writes through both
// merge into one row.

import assert from "node:assert/strict"
import { test } from "node:test"

import {
  SYNC_SERVER_URL,
  client,
  database,
  eventually,
  find,
  plain,
  rowBecomes,
  rowJson,
  startJsServer,
} from "./helpers.js"

const skip = SYNC_SERVER_URL
  ? false
  : "SYNC_SERVER_URL is not set: no Rust server to share the database with"

test(
  "a document written through the JS server is read by a client of the Rust server, and back",
  { skip },
  async t => {
    const db = await database(t)
    let server = await startJsServer(t)
    const jsWriter = client(t, server.url)
    const handle = jsWriter.repo.create({ title: "Written through the JS server", count: 1 })
    await rowBecomes(db, handle.documentId, handle.doc())

    const rustReader = client(t, SYNC_SERVER_URL)
    const read = await find(rustReader, handle.url)
    assert.deepEqual(plain(read.doc()), { title: "Written through the JS server", count: 1 })

    // Both servers write the document at once: the advisory lock serializes their merges
    // and the row holds both.
    read.change(doc => {
      doc.fromRust = true
    })
    handle.change(doc => {
      doc.fromJs = true
    })
    await eventually("the row merges both servers' writes", async () => {
      const row = await rowJson(db, handle.documentId)
      return (row?.fromRust === true && row?.fromJs === true) || JSON.stringify(row)
    })
    await Promise.all([jsWriter.shutdown(), rustReader.shutdown()])

    // The JS server's repo holds the document as it loaded it: a restart loads the Rust
    // server's write from the tables.
    await server.stop()
    server = await startJsServer(t)
    const jsReader = client(t, server.url)
    const again = await find(jsReader, handle.url)
    assert.equal(again.doc().fromRust, true)
    assert.equal(again.doc().fromJs, true)

    const created = client(t, SYNC_SERVER_URL).repo.create({
      title: "Written through the Rust server",
    })
    await rowBecomes(db, created.documentId, created.doc())
    const fromRust = await find(jsReader, created.url)
    assert.deepEqual(plain(fromRust.doc()), { title: "Written through the Rust server" })
  },
)
