// What @automerge/automerge 3's A.diff returns for documents it made, for the tests of
// pg_automerge's automerge_diff (extension/core/src/diff.rs), which must return the same
// patches from the same saved bytes and heads.
//
//   node diff-fixtures.mjs > ../../fixtures/js/diffs.json
//
// Deterministic (fixed actors and times). Values that JSON cannot hold are written as the
// jsonb view writes them: bytes as base64 (a Date already becomes its ISO string).

import * as A from "@automerge/automerge";

const TIME = { time: 1_767_225_600 };
const actor = (byte) => ({ actor: byte.repeat(16) });
const cases = [];

// A.from would stamp the first change with the clock's time: the fixtures must not change.
function from(initial, options) {
  return A.change(A.init(options), TIME, (d) => Object.assign(d, initial));
}

// The diff is taken on the document loaded from its save, as a client that reads it from
// the database has it: on the handle that made the changes, A.diff may answer from the
// patches it logged while they were made, which come in another (equivalent) order.
function record(name, made, from, to) {
  const save = A.save(made);
  const patches = A.diff(A.load(save), from, to);
  cases.push({
    name,
    save: Buffer.from(save).toString("hex"),
    from,
    to,
    patches: JSON.parse(
      JSON.stringify(patches, (_key, value) =>
        value instanceof Uint8Array ? Buffer.from(value).toString("base64") : value,
      ),
    ),
  });
}

// Maps, lists, counters and scalars of every kind, then nested objects.
{
  let doc = from({ title: "x", n: new A.Counter(1), list: [1, 2], meta: { a: 1 } }, actor("a1"));
  const before = A.getHeads(doc);
  doc = A.change(doc, TIME, (d) => {
    d.title = "y";
    d.n.increment(5);
    d.list.push(3);
    d.list.insertAt(0, { k: "v" });
    d.list.deleteAt(2);
    delete d.meta.a;
    d.meta.b = [1, 2.5, true];
    d.nothing = null;
    d.date = new Date(0);
    d.bytes = new Uint8Array([1, 2, 255]);
  });
  record("maps, lists, counters and scalars", doc, before, A.getHeads(doc));
  record("the same, backwards", doc, A.getHeads(doc), before);
  record("from the empty document", doc, [], A.getHeads(doc));
}

// Text with characters outside the Basic Multilingual Plane, which count two UTF-16 code
// units in JS: every position after them must be counted so.
{
  let doc = from({ text: "héllo 👋 world 🎉!" }, actor("b2"));
  const before = A.getHeads(doc);
  doc = A.change(doc, TIME, (d) => {
    A.splice(d, ["text"], 9, 5, "wörld 🌍🌍");
    A.splice(d, ["text"], 0, 1, "H");
    A.mark(d, ["text"], { start: 6, end: 8, expand: "none" }, "bold", true);
    A.mark(d, ["text"], { start: 9, end: 14, expand: "after" }, "link", "https://example.com");
  });
  const marked = A.getHeads(doc);
  doc = A.change(doc, TIME, (d) => {
    A.splice(d, ["text"], 14, 0, " 🎈more");
    A.splice(d, ["text"], 6, 2, "");
  });
  record("text with emoji: splices, deletes and marks", doc, before, marked);
  record("text with emoji: typing into a mark", doc, marked, A.getHeads(doc));
  record("text with emoji: all of it", doc, [], A.getHeads(doc));
}

// Two authors at once: a conflict on a map key and on a list element, an unmark, a block.
{
  let doc = from({ title: "x", items: ["a"], text: "Hello world" }, actor("c3"));
  doc = A.change(doc, TIME, (d) => {
    A.mark(d, ["text"], { start: 0, end: 11, expand: "both" }, "italic", true);
  });
  const base = A.getHeads(doc);
  let other = A.clone(doc, actor("d4"));
  other = A.change(other, TIME, (d) => {
    d.title = "z";
    d.items[0] = "b";
    A.unmark(d, ["text"], { start: 2, end: 5, expand: "none" }, "italic");
    A.splitBlock(d, ["text"], 0, { type: "heading", parents: [], attrs: { level: 1 } });
  });
  doc = A.change(doc, TIME, (d) => {
    d.title = "w";
    d.items[0] = "c";
  });
  doc = A.merge(doc, other);
  record("concurrent authors: conflicts, an unmark and a block", doc, base, A.getHeads(doc));
  record("concurrent authors: everything", doc, [], A.getHeads(doc));
  record("concurrent authors: one side to the merge", doc, A.getHeads(other), A.getHeads(doc));
}

process.stdout.write(JSON.stringify(cases, null, 1) + "\n");
