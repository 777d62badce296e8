// automerge-repo clients against the pg_automerge sync server: the checks that
// `cargo xtask test --only sync` runs, one per invocation, each exiting non-zero with the
// reason when it fails.
//
//   node driver.mjs <check> --server ws://… [--server ws://…] --pg postgresql://… [--state FILE]
//                   [--secret FILE --audience AUD]
//
// checks: concurrent, sql-write, restart-write, restart-read, two-servers, and access
// (two servers checking tokens signed with the secret, on a database set up with the
// "Access control" example of docs/sync-server.md)
//
// "Converged" means what the issue asks: every client's view of a document is the same,
// and equals `doc::jsonb` of its row in Postgres.

import { createHmac } from "node:crypto"
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
    secret: { type: "string" },
    audience: { type: "string" },
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

/// An HS256 JWT, as docs/sync-server.md mints one.
function mintToken(secret, claims) {
  const base64url = value => Buffer.from(JSON.stringify(value)).toString("base64url")
  const body = `${base64url({ alg: "HS256", typ: "JWT" })}.${base64url(claims)}`
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`
}

function secret() {
  return readFileSync(values.secret, "utf8").replace(/\n$/, "")
}

/// A user's claims, valid for ten minutes.
function claims(sub) {
  return { sub, role: "app_user", aud: values.audience, exp: Math.floor(Date.now() / 1000) + 600 }
}

/// A user's client: its token in the URL, its `sub` as its peer id (or `peerId`).
function user(url, sub, { token = mintToken(secret(), claims(sub)), peerId = sub } = {}) {
  const adapter = new WebSocketClientAdapter(`${url}/?token=${token}`, 250)
  const repo = new Repo({ peerId, network: [adapter] })
  return { repo, adapter, url }
}

/// Resolves once the client's connection is refused with a 401, as Node's WebSocket
/// client reports it: an uncaught `Unexpected server response: 401` from the adapter.
async function refusedAtUpgrade(url, what) {
  let refusal
  const catcher = error => (refusal = error)
  process.on("uncaughtException", catcher)
  const adapter = new WebSocketClientAdapter(url, 60_000)
  const repo = new Repo({ peerId: "someone", network: [adapter] })
  try {
    await eventually(`${what}: refused`, () => refusal !== undefined, 10_000)
    if (!String(refusal.message).includes("Unexpected server response: 401")) {
      throw new Error(`${what}: ${refusal.stack}`)
    }
  } finally {
    process.off("uncaughtException", catcher)
    disconnect({ repo, adapter })
    await repo.shutdown()
  }
}

/// Every change hash in the document's chunks (each loaded on its own) and row.
async function storedHashes(db, documentId) {
  const hashes = new Set()
  const { rows } = await db.query(
    "SELECT data FROM automerge_repo_chunks WHERE document_id = $1 " +
      "UNION ALL SELECT doc::bytea FROM documents WHERE id = $1",
    [documentId],
  )
  for (const { data } of rows) {
    for (const change of A.getAllChanges(A.loadIncremental(A.init(), data))) {
      hashes.add(A.decodeChange(change).hash)
    }
  }
  return hashes
}

/// The hash of the change `edit` makes on the handle's document.
function changeOf(handle, edit) {
  handle.change(edit)
  return A.decodeChange(A.getLastLocalChange(handle.doc())).hash
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

  // SQL writes (changes, a merged save, edits from SQL, a new row) reach every connected client.
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
    // Edits from SQL are changes by the database's own actor: they reach every client too.
    await db.query(
      `UPDATE documents
       SET doc = automerge_splice(automerge_set(doc, '{status}', '"edited in SQL"', message => 'from SQL'),
                                  '{title}', 6, 0, ' and after')
       WHERE id = $1`,
      [created.documentId],
    )
    await eventually("the SQL edits reach every client", () =>
      handles.every(h => h.doc().status === "edited in SQL" && h.doc().title === "Before and after"),
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

  // Access control with JS clients on two servers: refusals at the upgrade, an owner, a
  // reader whose changes are stored nowhere, a writer, a stranger, an impostor, and
  // revocations by a policy change and by a share's deletion.
  async access() {
    const db = await database()
    const [a, b] = servers
    const expired = { ...claims("ana"), exp: Math.floor(Date.now() / 1000) - 10 }
    for (const server of servers) {
      await refusedAtUpgrade(server, "no token")
      await refusedAtUpgrade(`${server}/?token=${mintToken(secret(), expired)}`, "an expired token")
      await refusedAtUpgrade(
        `${server}/?token=${mintToken("another secret of some length", claims("ana"))}`,
        "a bad signature",
      )
      await refusedAtUpgrade(
        `${server}/?token=${mintToken(secret(), { ...claims("ana"), aud: "another-service" })}`,
        "the wrong audience",
      )
    }
    console.log("ok: no token, an expired token, a bad signature, the wrong audience: 401")

    const ana = user(a, "ana")
    const created = ana.repo.create({ title: "Plans", items: [] })
    await eventually("the document's row, owned by ana", async () => {
      const { rows } = await db.query("SELECT owner FROM documents WHERE id = $1", [
        created.documentId,
      ])
      return rows[0]?.owner === "ana" || `owner ${rows[0]?.owner}`
    })
    await db.query(
      "INSERT INTO document_shares (document_id, user_id, can_write) VALUES ($1, 'ben', false), ($1, 'cleo', true)",
      [created.documentId],
    )
    const [ben, cleo, dan] = [user(b, "ben"), user(b, "cleo"), user(b, "dan")]
    const read = await find(ben, created.url)
    const write = await find(cleo, created.url)
    created.change(d => d.items.push("from ana"))
    await eventually("ana's change reaches the reader and the writer", () =>
      [read, write].every(h => h.doc().items.includes("from ana")),
    )
    write.change(d => d.items.push("from cleo"))
    await eventually("the writer's change reaches ana and the row", async () =>
      created.doc().items.includes("from cleo") &&
      (await rowJson(db, created.documentId)).includes("from cleo"),
    )

    const fromBen = changeOf(read, d => (d.fromBen = true))
    created.change(d => d.items.push("after ben"))
    await eventually("ana's next change reaches the reader", () =>
      read.doc().items.includes("after ben"),
    )
    await sleep(1000)
    if ((await storedHashes(db, created.documentId)).has(fromBen))
      throw new Error("the reader's change was stored")
    for (const [who, handle] of [["ana", created], ["cleo", write]]) {
      if (handle.doc().fromBen !== undefined) throw new Error(`the reader's change reached ${who}`)
    }
    if ((await rowJson(db, created.documentId)).includes("fromBen"))
      throw new Error("the reader's change is in the row")
    console.log("ok: the reader receives every change; its own is stored nowhere, seen by no one")

    // A stranger: `find` ends unavailable, and nothing of the document reaches it.
    const received = []
    dan.adapter.on("message", message => received.push(message))
    const refusal = await dan.repo
      .find(created.url, { signal: AbortSignal.timeout(20_000) })
      .then(() => null, error => error)
    if (!refusal || !/unavailable/.test(refusal.message))
      throw new Error(`the stranger's find: ${refusal?.message ?? "found"}`)
    const about = received.filter(m => m.documentId === created.documentId)
    if (about.some(m => m.type !== "doc-unavailable"))
      throw new Error(`the stranger received ${about.map(m => m.type).join(", ")}`)
    console.log(`ok: the stranger's find ends unavailable (${about.length} doc-unavailable, nothing else)`)

    // An impostor: ben's token, ana's peer id.
    const impostor = user(a, "ben", { peerId: "ana" })
    const lookedUp = await impostor.repo
      .find(created.url, { signal: AbortSignal.timeout(5_000) })
      .then(() => null, error => error)
    if (!lookedUp) throw new Error("a client announcing another's peer id found the document")
    console.log(`ok: a client announcing another's peer id syncs nothing (${lookedUp.message})`)

    // A policy change mid-session: the writer becomes a reader within a second.
    await db.query("ALTER POLICY shared_write ON documents USING (false)")
    try {
      await sleep(1000)
      const late = changeOf(write, d => (d.lateCleo = true))
      created.change(d => d.items.push("policy changed"))
      await eventually("ana's change still reaches cleo", () =>
        write.doc().items.includes("policy changed"),
      )
      await sleep(1000)
      if ((await storedHashes(db, created.documentId)).has(late) || created.doc().lateCleo)
        throw new Error("a write after the policy change was stored or reached ana")
    } finally {
      await db.query(
        "ALTER POLICY shared_write ON documents USING (EXISTS (SELECT FROM document_shares s " +
          "WHERE s.document_id = id AND s.user_id = current_user_id() AND s.can_write))",
      )
    }
    console.log("ok: a policy change revoked a connected writer within a second")

    // A share deleted mid-session: the reader receives nothing more.
    await db.query("DELETE FROM document_shares WHERE document_id = $1 AND user_id = 'ben'", [
      created.documentId,
    ])
    await sleep(1000)
    created.change(d => d.items.push("after revocation"))
    await eventually("the row has ana's change", async () =>
      (await rowJson(db, created.documentId)).includes("after revocation"),
    )
    await sleep(3000)
    if (read.doc().items.includes("after revocation"))
      throw new Error("a revoked reader received a change")
    console.log("ok: a deleted share revoked a connected reader within a second")
    await shutdown([ana, ben, cleo, dan, impostor], db)
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
