// automerge-repo's Node server on the adapter, with automerge-repo's JS clients: what they
// edit is in the tables, the row equal to the document, and found again after a restart;
// a row inserted in SQL is a document; the README's example runs.

import assert from "node:assert/strict"
import { spawn } from "node:child_process"
import { once } from "node:events"
import { readFile } from "node:fs/promises"
import { createInterface } from "node:readline"
import { test } from "node:test"
import { fileURLToPath } from "node:url"

import * as A from "@automerge/automerge"
import { generateAutomergeUrl, parseAutomergeUrl } from "@automerge/automerge-repo"

import { chunksOf, client, database, find, plain, rowBecomes, startJsServer } from "./helpers.js"

test("a JS server stores its clients' documents, merged in their rows, and finds them after a restart", async t => {
  const db = await database(t)
  let server = await startJsServer(t)
  const writer = client(t, server.url)
  const editor = client(t, server.url)
  const handle = writer.repo.create({ title: "Launch plan", tasks: [] })
  handle.change(doc => {
    doc.tasks.push({ title: "Write the docs", done: false })
  })
  // The server announces nothing (sharePolicy false), so the editor, which asked for the
  // document once the server stored it, holds both clients' edits.
  await rowBecomes(db, handle.documentId, handle.doc())
  const edited = await find(editor, handle.url)
  edited.change(doc => {
    doc.tasks.push({ title: "Ship it", done: false, points: 3 })
    doc.owner = "ana"
  })
  await rowBecomes(db, handle.documentId, edited.doc())
  const chunks = await chunksOf(db, handle.documentId)
  assert.ok(chunks.length > 0, "the document has chunks")
  assert.deepEqual(
    chunks.filter(chunk => chunk.pending),
    [],
    "every chunk is merged",
  )
  const expected = edited.doc()
  await Promise.all([writer.shutdown(), editor.shutdown()])

  await server.stop()
  server = await startJsServer(t)
  const reader = client(t, server.url)
  const found = await find(reader, handle.url)
  assert.deepEqual(plain(found.doc()), plain(expected))
  found.change(doc => {
    doc.tasks[0].done = true
  })
  await rowBecomes(db, handle.documentId, found.doc())
})

test("a document inserted in SQL is found through the JS server", async t => {
  const db = await database(t)
  const url = generateAutomergeUrl()
  const { documentId } = parseAutomergeUrl(url)
  const doc = A.from({ title: "From SQL" })
  await db.query("INSERT INTO documents (id, doc) VALUES ($1, $2::bytea::automerge)", [
    documentId,
    A.save(doc),
  ])
  const server = await startJsServer(t)
  const found = await find(client(t, server.url), url)
  assert.equal(found.doc().title, "From SQL")
})

test("the README's usage example is a sync server that stores in Postgres", async t => {
  const readme = await readFile(new URL("../README.md", import.meta.url), "utf8")
  const example = readme.split("```js\n")[1].split("\n```")[0]
  const server = spawn(process.execPath, ["--input-type=module", "--eval", example], {
    cwd: fileURLToPath(new URL("..", import.meta.url)),
    env: { ...process.env, PORT: "0" },
    stdio: ["ignore", "pipe", "inherit"],
  })
  const exited = new Promise(resolve => server.once("exit", code => resolve(code)))
  t.after(() => server.kill("SIGKILL"))
  const [line] = await once(createInterface({ input: server.stdout }), "line")
  const db = await database(t)
  const writer = client(t, line.replace("listening on ", ""))
  const handle = writer.repo.create({ title: "Through the README's server" })
  await rowBecomes(db, handle.documentId, handle.doc())
  await writer.shutdown()
  server.kill("SIGTERM")
  assert.equal(await exited, 0, "the example exits cleanly on SIGTERM")
})
