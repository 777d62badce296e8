// Changes as @automerge/automerge 3 makes them, for the tests of pg_automerge's writes
// that append without a load (extension/core/tests/structure_writes.rs): each session is
// a document's save, then the changes its clients made after it, in the order a server
// receives them.
//
//   node edit-fixtures.mjs > ../../fixtures/js/edits.json
//
// Deterministic (fixed actors and times). Strings are text objects, as the JS client
// makes them; every kind of edit an editor sends is here.

import * as A from "@automerge/automerge";

const TIME = { time: 1_767_225_600 };
const actor = (byte) => ({ actor: byte.repeat(16) });
const hex = (bytes) => Buffer.from(bytes).toString("hex");
const sessions = [];

function start(initial, options) {
  return A.change(A.init(options), TIME, (d) => Object.assign(d, initial));
}

// The changes `doc` has beyond `heads`, one chunk each.
function changesSince(doc, heads) {
  return A.getChanges(A.view(doc, heads), doc).map(hex);
}

// One client on the stored heads: every write of it must append.
{
  let doc = start(
    {
      title: "Launch plan",
      content: "Agenda: ship the beta",
      meta: { owner: "ana", done: false },
      items: [{ text: "bread", done: true }, { text: "milk", done: false }],
      tags: ["q1"],
      views: new A.Counter(0),
    },
    actor("a1"),
  );
  const save = hex(A.save(doc));
  const heads = A.getHeads(doc);
  const edits = [
    (d) => (d.title = "Launch 🚀 plan"),
    (d) => A.splice(d, ["content"], 8, 4, "release"),
    (d) => A.splice(d, ["content"], 0, 0, "✅ "),
    (d) => A.mark(d, ["content"], { start: 0, end: 6, expand: "both" }, "bold", true),
    (d) => A.unmark(d, ["content"], { start: 2, end: 4, expand: "none" }, "bold"),
    (d) => A.splitBlock(d, ["content"], 9, { type: new A.ImmutableString("paragraph"), parents: [], attrs: {} }),
    (d) => (d.meta.owner = "bo"),
    (d) => (d.meta.reviewers = ["cy", "di"]),
    (d) => d.items.push({ text: "apples", done: false }),
    (d) => A.splice(d, ["items", 1, "text"], 4, 0, " and honey"),
    (d) => (d.items[0].done = false),
    (d) => d.items.deleteAt(0),
    (d) => {
      // A move: JS has none, so an editor deletes the item and inserts it again.
      const item = { text: d.items[1].text.toString(), done: d.items[1].done };
      d.items.deleteAt(1);
      d.items.insertAt(0, item);
    },
    (d) => d.tags.insertAt(0, "urgent", "web"),
    (d) => d.views.increment(3),
    (d) => delete d.meta.done,
    (d) => (d.note = new A.ImmutableString("kept as a string")),
  ];
  for (const edit of edits) doc = A.change(doc, TIME, edit);
  sessions.push({ name: "one client", save, changes: changesSince(doc, heads) });
}

// Two clients typing at once: their changes are concurrent; the server takes them in turn.
{
  const base = start({ content: "shared text" }, actor("b1"));
  const save = hex(A.save(base));
  let a = A.clone(base, actor("b2"));
  let b = A.clone(base, actor("b3"));
  const changes = [];
  for (let round = 0; round < 4; round++) {
    a = A.change(a, TIME, (d) => A.splice(d, ["content"], 0, 0, `a${round} `));
    b = A.change(b, TIME, (d) => A.splice(d, ["content"], d.content.length, 0, ` b${round}`));
    changes.push(hex(A.getLastLocalChange(a)), hex(A.getLastLocalChange(b)));
    if (round % 2 == 1) {
      a = A.merge(a, b);
      b = A.merge(b, a);
    }
  }
  sessions.push({ name: "two clients", save, changes });
}

console.log(JSON.stringify(sessions, null, 1));
