// A JS server on the adapter and pg_automerge's Rust sync server sharing one database:
// each one's clients read what the other's wrote, concurrent writes through both merge
// into one row, and with both listening, changes reach the other's clients live.

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

    // A restarted JS server loads both writes from the tables.
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

test(
  "a change through the Rust server, and a SQL write, reach a JS server's client live",
  { skip },
  async t => {
    const db = await database(t)
    const server = await startJsServer(t)
    const created = client(t, server.url).repo.create({ title: "Live", count: 0 })
    await rowBecomes(db, created.documentId, created.doc())
    const jsReader = await find(client(t, server.url), created.url)
    const rustWriter = await find(client(t, SYNC_SERVER_URL), created.url)

    rustWriter.change(doc => {
      doc.fromRust = "live"
    })
    await eventually("the Rust client's change reaches the JS client", () => {
      return jsReader.doc().fromRust === "live" || JSON.stringify(jsReader.doc())
    })
    await db.query(
      `UPDATE documents SET doc = automerge_set(doc, '{status}', '"done"') WHERE id = $1`,
      [created.documentId],
    )
    await eventually("the SQL write reaches the JS client", () => {
      return jsReader.doc().status === "done" || JSON.stringify(jsReader.doc())
    })
    jsReader.change(doc => {
      doc.fromJs = "live"
    })
    await eventually("the JS client's change reaches the Rust client", () => {
      return rustWriter.doc().fromJs === "live" || JSON.stringify(rustWriter.doc())
    })
    await rowBecomes(db, created.documentId, jsReader.doc())
  },
)
