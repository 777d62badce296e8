// automerge-repo clients against the pg_automerge sync server: the checks that
// `cargo xtask test --only sync` runs, one per invocation, each exiting non-zero with the
// reason when it fails.
//
//   node driver.mjs <check> --server ws://… [--server ws://…] --pg postgresql://… [--state FILE]
//
// checks: concurrent, sql-write, restart-write, restart-read, two-servers
//
// "Converged" means what the issue asks: every client's view of a document is the same,
// and equals `doc::jsonb` of its row in Postgres.

import { readFileSync, writeFileSync } from "node:fs"
import { parseArgs } from "node:util"

import * as A from "@automerge/automerge"
import { Repo, generateAutomergeUrl, parseAutomergeUrl } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import pg from "pg"

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    server: { type: "string", multiple: true },
    pg: { type: "string" },
    state: { type: "string" },
  },
})
const [check] = positionals
const servers = values.server ?? []

// How long convergence may take before a check fails (a loaded 2-core machine).
const CONVERGE_MS = 30_000

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/// A JSON text with sorted keys, so that equal documents compare equal.
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`
  if (value && typeof value === "object") {
    const keys = Object.keys(value).sort()
    return `{${keys.map(k => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`
  }
  return JSON.stringify(value)
}

/// A client: a repo with no storage of its own, connected to `url`; it reconnects every
/// quarter second when the server goes away.
function client(url) {
  const adapter = new WebSocketClientAdapter(url, 250)
  const repo = new Repo({ network: [adapter] })
  return { repo, adapter, url }
}

/// Drops the client's connection: edits made now stay local until `reconnect`.
function disconnect(c) {
  c.repo.networkSubsystem.removeNetworkAdapter(c.adapter)
}

function reconnect(c) {
  c.adapter = new WebSocketClientAdapter(c.url, 250)
  c.repo.networkSubsystem.addNetworkAdapter(c.adapter)
}

async function eventually(what, probe, ms = CONVERGE_MS) {
  const deadline = Date.now() + ms
  let last
  for (;;) {
    try {
      last = await probe()
      if (last === true) return
    } catch (error) {
      last = error.message
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${last})`)
    await sleep(50)
  }
}

/// `repo.find` once the server has the document (it may still be on its way there).
async function find(c, url) {
  let handle
  await eventually(`${url} found through ${c.url}`, async () => {
    handle = await c.repo.find(url, { signal: AbortSignal.timeout(5000) })
    return true
  })
  return handle
}

async function database() {
  const db = new pg.Client(values.pg)
  await db.connect()
  return db
}

async function rowJson(db, documentId) {
  const { rows } = await db.query("SELECT doc::jsonb AS json FROM documents WHERE id = $1", [
    documentId,
  ])
  return rows.length ? canonical(rows[0].json) : "(no row)"
}

/// Waits until every handle's view is the same and equals the document's row.
async function converged(db, handles, what) {
  const documentId = handles[0].documentId
  await eventually(`${what}: clients and Postgres agree on ${documentId}`, async () => {
    const views = handles.map(h => canonical(h.doc()))
    const row = await rowJson(db, documentId)
    if (views.every(v => v === row)) return true
    return `clients ${views.map(v => v.length).join("/")} chars, row ${row.length}: ${row.slice(0, 200)}`
  })
}

/// One client's share of the concurrent edits: text, a nested field, list inserts and
/// deletes, with pauses so that the clients' edits interleave.
async function edit(handle, name, rounds) {
  for (let round = 0; round < rounds; round++) {
    handle.change(d => {
      A.splice(d, ["title"], Math.floor(Math.random() * (d.title.length + 1)), 0, name)
      d.meta[name] = { round, tags: [name, `r${round}`] }
      d.items.push(`${name}-${round}`)
      if (round % 3 === 2 && d.items.length > 1) d.items.deleteAt(0)
    })
    await sleep(Math.random() * 20)
  }
}

const checks = {
  // Three clients create documents and edit them at once; one disconnects, edits
  // offline, and reconnects.
  async concurrent() {
    const db = await database()
    const clients = [client(servers[0]), client(servers[0]), client(servers[0])]
    for (const [creator, c] of clients.slice(0, 2).entries()) {
      const created = c.repo.create({ title: "", items: [], meta: {} })
      const handles = await Promise.all(
        clients.map(other => (other === c ? created : find(other, created.url))),
      )
      await Promise.all(handles.map((h, i) => edit(h, `c${i}`, 8)))
      await converged(db, handles, `document ${creator}, concurrent edits`)

      const offline = clients[2]
      disconnect(offline)
      await Promise.all([edit(handles[2], "offline", 4), edit(handles[0], "online", 4)])
      reconnect(offline)
      await converged(db, handles, `document ${creator}, after a reconnect`)
      console.log(`ok: ${created.documentId} converged (${canonical(created.doc()).length} chars)`)
    }
    await shutdown(clients, db)
  },

  // SQL writes (changes, a merged save, a new row) reach every connected client.
  async "sql-write"() {
    const db = await database()
    const clients = [client(servers[0]), client(servers[0]), client(servers[0])]
    const created = clients[0].repo.create({ title: "Before", n: 1 })
    const handles = [created, ...(await Promise.all(clients.slice(1).map(c => find(c, created.url))))]
    await converged(db, handles, "before the SQL writes")

    const fork = A.change(A.clone(created.doc()), d => {
      d.fromSql = "written in SQL"
    })
    await db.query("UPDATE documents SET doc = doc || $1::bytea WHERE id = $2", [
      A.getLastLocalChange(fork),
      created.documentId,
    ])
    await eventually("the SQL change reaches every client", () =>
      handles.every(h => h.doc().fromSql === "written in SQL"),
    )
    const save = A.save(A.change(A.clone(created.doc()), d => (d.mergedSave = true)))
    await db.query("UPDATE documents SET doc = doc || $1::bytea WHERE id = $2", [
      save,
      created.documentId,
    ])
    await eventually("the merged save reaches every client", () =>
      handles.every(h => h.doc().mergedSave === true),
    )
    await converged(db, handles, "after the SQL writes")

    const url = generateAutomergeUrl()
    const { documentId } = parseAutomergeUrl(url)
    await db.query("INSERT INTO documents (id, doc) VALUES ($1, $2::bytea::automerge)", [
      documentId,
      A.save(A.from({ title: "made in SQL" })),
    ])
    const found = await find(clients[1], url)
    await converged(db, [found], "a document inserted in SQL")
    console.log(`ok: SQL writes reached ${handles.length} clients; ${documentId} made in SQL`)
    await shutdown(clients, db)
  },

  // Before a restart: documents whose every edit is in Postgres, written to --state.
  async "restart-write"() {
    const db = await database()
    const c = client(servers[0])
    const documents = []
    for (let i = 0; i < 3; i++) {
      const handle = c.repo.create({ title: "", items: [], meta: {} })
      await edit(handle, `doc${i}`, 5)
      await converged(db, [handle], "before the restart")
      documents.push({ url: handle.url, view: canonical(handle.doc()) })
    }
    writeFileSync(values.state, JSON.stringify(documents))
    console.log(`ok: ${documents.length} documents stored before the restart`)
    await shutdown([c], db)
  },

  // After a restart: a new client finds each document as it was, and edits still sync.
  async "restart-read"() {
    const db = await database()
    const c = client(servers[0])
    const documents = JSON.parse(readFileSync(values.state, "utf8"))
    for (const { url, view } of documents) {
      const handle = await find(c, url)
      if (canonical(handle.doc()) !== view) throw new Error(`${url} changed across the restart`)
      await edit(handle, "after", 2)
      await converged(db, [handle], "after the restart")
    }
    console.log(`ok: ${documents.length} documents as they were after the restart`)
    await shutdown([c], db)
  },

  // Two servers on one database: a client of each edits one document at once.
  async "two-servers"() {
    const db = await database()
    const [a, b] = [client(servers[0]), client(servers[1])]
    const created = a.repo.create({ title: "", items: [], meta: {} })
    // A server answers "unavailable" for a document no server has stored yet, and keeps
    // that answer (docs/sync-server.md): ask the second server once the first stored it.
    await converged(db, [created], "stored through the first server")
    const handles = [created, await find(b, created.url)]
    await Promise.all(handles.map((h, i) => edit(h, `server${i}`, 8)))
    await converged(db, handles, "clients of two servers")
    const fork = A.change(A.clone(created.doc()), d => (d.fromSql = true))
    await db.query("UPDATE documents SET doc = doc || $1::bytea WHERE id = $2", [
      A.getLastLocalChange(fork),
      created.documentId,
    ])
    await eventually("a SQL write reaches the clients of both servers", () =>
      handles.every(h => h.doc().fromSql === true),
    )
    console.log(`ok: ${created.documentId} consistent through two servers`)
    await shutdown([a, b], db)
  },
}

async function shutdown(clients, db) {
  await Promise.all(clients.map(c => c.repo.shutdown()))
  await db.end()
}

if (!checks[check]) {
  console.error(`unknown check \`${check}\`; one of: ${Object.keys(checks).join(", ")}`)
  process.exit(2)
}
try {
  await checks[check]()
  process.exit(0)
} catch (error) {
  console.error(`FAILED ${check}: ${error.stack ?? error}`)
  process.exit(1)
}
