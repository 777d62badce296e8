// Crafted mark changes, as a user found them (issue 35): a mark that @automerge/automerge
// makes, altered one way each through its own decodeChange/encodeChange, and sent through
// every way a server takes changes. The JS client applies each, and then cannot load its own
// save; pg_automerge must refuse each with 22P03 and a DETAIL naming the rule, the stored
// document unchanged.
//
//   PG_AUTOMERGE_CONNECTION="host=127.0.0.1 port=5432 user=postgres dbname=pg_automerge" node wrong-marks.mjs

import * as A from "@automerge/automerge";
import pg from "pg";

function connectionConfig(conninfo) {
  const fields = Object.fromEntries(conninfo.trim().split(/\s+/).map((kv) => kv.split("=", 2)));
  return { host: fields.host, port: Number(fields.port ?? 5432), user: fields.user, database: fields.dbname };
}

const conninfo = process.env.PG_AUTOMERGE_CONNECTION;
if (!conninfo) throw new Error("set PG_AUTOMERGE_CONNECTION to a libpq connection string");
const client = new pg.Client(connectionConfig(conninfo));
await client.connect();
await client.query("DROP TABLE IF EXISTS js_wrong_marks");
await client.query("CREATE TABLE js_wrong_marks (id int PRIMARY KEY, doc automerge NOT NULL)");

const base = A.from({ title: "Notes", text: "hello world", meta: { owner: "ana" } });
const baseSave = A.save(base);
await client.query("INSERT INTO js_wrong_marks VALUES (1, $1)", [baseSave]);

// Each alteration of the honest change's two operations, markBegin then markEnd.
const alterations = {
  "end without its begin": (ops) => ops.splice(0, 1),
  "end before its begin": (ops) => ops.reverse(),
  "end at the start of the text": (ops) => (ops[1].elemId = "_head"),
  "mark on a map": (ops, mapId) => ops.forEach((op) => (op.obj = mapId)),
};

function crafted(alter) {
  const author = A.clone(base);
  const marked = A.change(author, (d) => {
    A.mark(d, ["text"], { start: 1, end: 4, expand: "both" }, "bold", true);
  });
  const change = A.decodeChange(A.getLastLocalChange(marked));
  delete change.hash;
  alter(change.ops, A.getObjectId(marked.meta));
  return A.encodeChange(change);
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

const writes = {
  "doc || change": ["UPDATE js_wrong_marks SET doc = doc || $1::bytea WHERE id = 1", (c) => [c]],
  "INSERT of a save and the change": [
    "INSERT INTO js_wrong_marks VALUES (2, $1::bytea)",
    (c) => [concat(baseSave, c)],
  ],
  "an upsert that merges": [
    "INSERT INTO js_wrong_marks VALUES (1, $1::bytea) ON CONFLICT (id) DO UPDATE SET doc = js_wrong_marks.doc || excluded.doc",
    (c) => [concat(baseSave, c)],
  ],
  "merge_agg": [
    "SELECT merge_agg(d) FROM (SELECT doc AS d FROM js_wrong_marks UNION ALL SELECT $1::bytea::automerge) s",
    (c) => [concat(baseSave, c)],
  ],
};

let refused = 0;
let jsSavesThatDoNotLoad = 0;
for (const [kind, alter] of Object.entries(alterations)) {
  const change = crafted(alter);
  // What the JS client does with it: applies it, then saves what it cannot load again.
  try {
    const [applied] = A.applyChanges(A.clone(base), [change]);
    A.load(A.save(applied));
  } catch {
    jsSavesThatDoNotLoad += 1;
  }
  for (const [entry, [sql, params]] of Object.entries(writes)) {
    let error = null;
    try {
      await client.query(sql, params(change));
    } catch (e) {
      error = e;
    }
    if (!error) throw new Error(`${kind} via ${entry}: accepted`);
    if (error.code !== "22P03") throw new Error(`${kind} via ${entry}: ${error.code} ${error.message}`);
    if (!/mark order|not inserted into a text/.test(error.detail ?? "")) {
      throw new Error(`${kind} via ${entry}: the DETAIL names no rule: ${error.detail}`);
    }
    refused += 1;
  }
}
const { rows } = await client.query("SELECT id, doc::bytea AS bytes FROM js_wrong_marks");
if (rows.length !== 1 || Buffer.compare(rows[0].bytes, Buffer.from(baseSave)) !== 0) {
  throw new Error("the stored document changed");
}
await client.query("DROP TABLE js_wrong_marks");
await client.end();
console.log(
  `${refused} crafted mark writes refused with 22P03 naming the rule; ` +
    `the JS client's own save did not load after ${jsSavesThatDoNotLoad} of ${Object.keys(alterations).length}`,
);
