// The client loop of a Node.js app that keeps Automerge documents in pg_automerge, with
// rich text: create a document with marks and blocks, upsert its full save, send later
// edits as only their new changes, read back what the server has, merge, and check that
// the server's jsonb and automerge_spans agree with this client's own view.
//
//   PG_AUTOMERGE_CONNECTION="host=127.0.0.1 port=5432 user=postgres dbname=pg_automerge" node client.mjs

import * as A from "@automerge/automerge";
import pg from "pg";

function connectionConfig(conninfo) {
  const fields = Object.fromEntries(conninfo.trim().split(/\s+/).map((kv) => kv.split("=", 2)));
  return { host: fields.host, port: Number(fields.port ?? 5432), user: fields.user, database: fields.dbname };
}

function assertSame(what, server, client) {
  const s = JSON.stringify(server);
  const c = JSON.stringify(client);
  if (s !== c) {
    throw new Error(`${what} differ:\n  server: ${s}\n  client: ${c}`);
  }
}

// jsonb orders object keys its own way; compare values, not key order.
function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted(value[k])]));
  }
  return value;
}

const conninfo = process.env.PG_AUTOMERGE_CONNECTION;
if (!conninfo) throw new Error("set PG_AUTOMERGE_CONNECTION to a libpq connection string");
const client = new pg.Client(connectionConfig(conninfo));
await client.connect();
await client.query("CREATE TABLE IF NOT EXISTS node_docs (id int PRIMARY KEY, doc automerge NOT NULL)");
await client.query("DELETE FROM node_docs WHERE id = 1");

// 1. A rich-text note: a heading block, a paragraph block, and a bold mark.
let doc = A.from({ title: "Release notes", content: "" }, { actor: "0123456789abcdef0123456789abcdef" });
doc = A.change(doc, (d) => {
  A.splice(d, ["content"], 0, 0, "Version 1Fixes and speed");
  A.splitBlock(d, ["content"], 0, { type: "heading", parents: [], attrs: { level: 1 } });
  A.splitBlock(d, ["content"], 10, { type: "paragraph", parents: [], attrs: {} });
  A.mark(d, ["content"], { start: 11, end: 16, expand: "after" }, "bold", true);
});
let bytesSent = 0;
const full = A.save(doc);
await client.query(
  "INSERT INTO node_docs (id, doc) VALUES (1, $1::bytea) ON CONFLICT (id) DO UPDATE SET doc = node_docs.doc || EXCLUDED.doc",
  [Buffer.from(full)],
);
bytesSent += full.length;
let synced = A.getHeads(doc);

// 2. Local edits, sent as only their new changes.
for (const word of [" everywhere", "!"]) {
  doc = A.change(doc, (d) => {
    A.splice(d, ["content"], d.content.length, 0, word);
  });
  const changes = A.saveSince(doc, synced);
  await client.query("UPDATE node_docs SET doc = doc || $1::bytea WHERE id = 1", [Buffer.from(changes)]);
  bytesSent += changes.length;
  synced = A.getHeads(doc);
}

// 3. Another replica changes the title concurrently, on the server.
const stored = (await client.query("SELECT doc::bytea AS bytes FROM node_docs WHERE id = 1")).rows[0].bytes;
let other = A.load(new Uint8Array(stored), { actor: "fedcba9876543210fedcba9876543210" });
other = A.change(other, (d) => {
  d.title = "Release notes 1.0";
});
await client.query("UPDATE node_docs SET doc = doc || $1::bytea WHERE id = 1", [
  Buffer.from(A.saveSince(other, synced)),
]);

// 4. Read back and merge; then the server and this client must show the same document.
const back = (await client.query("SELECT doc::bytea AS bytes FROM node_docs WHERE id = 1")).rows[0].bytes;
doc = A.merge(doc, A.load(new Uint8Array(back)));
const { rows } = await client.query(
  "SELECT automerge_heads(doc) AS heads, doc::jsonb AS json, automerge_spans(doc, '{content}') AS spans FROM node_docs WHERE id = 1",
);
const server = rows[0];
assertSame("heads", [...server.heads].sort(), [...A.getHeads(doc)].sort());
assertSame("jsonb", sorted(server.json), sorted(JSON.parse(JSON.stringify(doc))));
assertSame("spans", sorted(server.spans), sorted(A.spans(doc, ["content"])));
await client.end();

const marks = server.spans.filter((s) => s.marks).length;
const blocks = server.spans.filter((s) => s.type === "block").length;
console.log(
  `in sync: ${bytesSent} bytes sent; server jsonb and ${server.spans.length} spans (${blocks} blocks, ${marks} marked) match the client's`,
);
