// Documents made by @automerge/automerge 3, the way an app's editing makes them, for the
// load estimate's calibration (extension/core/tests/estimate_peaks.rs): a rich text, a
// list of small maps and a plain text, each by three authors taking turns, saved with
// A.save(). JS writes strings as text objects, so the map list's names are texts too.
//
//   node estimate-fixtures.mjs <directory> [commits divisor, default 10: the medium scale]
//
// Writes js-<kind>.automerge into the directory. Deterministic (seeded, fixed actors and
// times), so the same bytes come out each run.

import * as A from "@automerge/automerge";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [dir, divisorArg] = process.argv.slice(2);
if (!dir) throw new Error("usage: node estimate-fixtures.mjs <directory> [divisor]");
const divisor = Number(divisorArg ?? 10);
const TIME_MS = 1_767_225_600_000;
const ACTORS = ["a1".repeat(16), "b2".repeat(16), "c3".repeat(16)];
const SYLLABLES = [
  "ka", "to", "ri", "men", "sa", "lo", "ve", "din", "pa", "nu", "gra", "she", "ti", "mor", "el",
  "an", "be", "cu", "do", "fi", "ga", "hol", "ja", "ker", "lum", "ne", "os", "pre", "qua", "sto",
  "un", "wy",
];

// xorshift64, so that every run makes the same documents.
function rng(seed) {
  let x = BigInt(seed) | 1n;
  const mask = (1n << 64n) - 1n;
  const next = () => {
    x ^= (x << 13n) & mask;
    x ^= x >> 7n;
    x ^= (x << 17n) & mask;
    return x;
  };
  // An integer in [lo, hi).
  return (lo, hi) => lo + Number(next() % BigInt(Math.max(1, hi - lo)));
}

// Three replicas taking turns: a session of 4 to 23 commits each, the next author merging
// the previous one's work before typing on.
function authors(seed, init) {
  const r = rng(seed);
  let docs = ACTORS.map((actor) => A.init({ actor }));
  docs[0] = A.change(docs[0], { time: TIME_MS / 1000 }, init);
  let current = 0;
  let left = r(4, 24);
  let commits = 0;
  return {
    r,
    doc: () => docs[current],
    commits: () => commits,
    change(edit) {
      commits += 1;
      docs[current] = A.change(docs[current], { time: TIME_MS / 1000 + commits }, edit);
      left -= 1;
      if (left === 0) {
        const next = (current + 1) % docs.length;
        docs[next] = A.merge(docs[next], docs[current]);
        current = next;
        left = r(4, 24);
      }
    },
  };
}

function phrase(r, length, syllables) {
  let out = "";
  while (out.length < length) {
    for (let i = r(1, 4); i > 0; i--) out += syllables[r(0, syllables.length)];
    out += " ";
  }
  return out;
}

function richText(commits) {
  const s = authors(1, (d) => {
    d.title = "rich-text fixture";
    d.content = "";
    A.splitBlock(d, ["content"], 0, { type: "heading", parents: [], attrs: { level: 1 } });
  });
  const syl = SYLLABLES.slice(0, 10);
  let cursor = 1;
  while (s.commits() < commits) {
    const r = s.r;
    const len = s.doc().content.length;
    if (r(0, 10) === 0) cursor = r(1, len + 1);
    cursor = Math.min(cursor, len);
    const roll = r(0, 100);
    if (roll <= 72) {
      const p = phrase(r, r(8, 29), syl);
      s.change((d) => A.splice(d, ["content"], cursor, 0, p));
      cursor += p.length;
    } else if (roll <= 80 && len > 10) {
      const at = r(1, len - 6);
      const del = r(1, 6);
      s.change((d) => A.splice(d, ["content"], at, del));
    } else if (roll <= 90 && len > 50) {
      const start = r(1, len - 40);
      const end = start + r(3, 40);
      const names = ["bold", "italic", "code", "link"];
      const name = names[r(0, 4)];
      const value = name === "link" ? `https://example.com/page${start % 50}` : true;
      s.change((d) => A.mark(d, ["content"], { start, end, expand: "after" }, name, value));
    } else if (roll <= 98) {
      const type = r(0, 5) === 0 ? "heading" : "paragraph";
      const attrs = type === "heading" ? { level: r(1, 4) } : {};
      const at = cursor;
      s.change((d) => A.splitBlock(d, ["content"], at, { type, parents: [], attrs }));
      cursor += 1;
    } else {
      const title = phrase(r, 24, syl).trimEnd();
      s.change((d) => A.updateText(d, ["title"], title));
    }
  }
  return s.doc();
}

function mapList(commits) {
  const s = authors(2, (d) => {
    d.title = "map-list fixture";
    d.items = [];
  });
  const additions = Math.floor((commits * 23) / 28);
  while (s.commits() < commits) {
    const r = s.r;
    const len = s.doc().items.length;
    if (len < 10 || (len < additions && r(0, 28) < 23)) {
      const item = {
        name: phrase(r, r(2, 6) * 6, SYLLABLES).trimEnd(),
        done: false,
        priority: r(1, 5),
        created: new Date(TIME_MS + len),
      };
      for (const field of ["owner", "note"]) {
        if (r(0, 2) === 0) item[field] = phrase(r, 14, SYLLABLES).trimEnd();
      }
      s.change((d) => {
        d.items.push(item);
      });
    } else {
      const edits = [];
      for (let i = r(2, 15); i > 0; i--) edits.push([r(0, len), r(0, 2) === 0, r(1, 5)]);
      s.change((d) => {
        for (const [index, done, priority] of edits) {
          d.items[index].done = done;
          d.items[index].priority = priority;
        }
      });
    }
  }
  return s.doc();
}

function plainText(commits) {
  const s = authors(3, (d) => {
    d.title = "plain-text fixture";
    d.content = "";
  });
  let cursor = 0;
  while (s.commits() < commits) {
    const r = s.r;
    const len = s.doc().content.length;
    if (r(0, 8) === 0) cursor = r(0, len + 1);
    cursor = Math.min(cursor, len);
    if (len > 200 && r(0, 4) === 0) {
      const at = r(0, len - 150);
      const del = r(5, 150);
      s.change((d) => A.splice(d, ["content"], at, del));
    } else {
      let p = phrase(r, r(20, 150), SYLLABLES);
      if (r(0, 6) === 0) p += "\n";
      const at = cursor;
      s.change((d) => A.splice(d, ["content"], at, 0, p));
      cursor += p.length;
    }
  }
  return s.doc();
}

mkdirSync(dir, { recursive: true });
for (const [name, make, commits] of [
  ["rich-text", richText, 94_000],
  ["map-list", mapList, 28_000],
  ["plain-text", plainText, 96_000],
]) {
  const started = Date.now();
  const doc = make(Math.floor(commits / divisor));
  const bytes = A.save(doc);
  writeFileSync(join(dir, `js-${name}.automerge`), bytes);
  // The same state in one change by one actor, as a compacting client would save it.
  const compacted = A.save(A.from(A.toJS(doc), { actor: "d4".repeat(16) }));
  writeFileSync(join(dir, `js-${name}-compacted.automerge`), compacted);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`js-${name}: ${bytes.length} bytes, compacted ${compacted.length}, ${seconds} s`);
}
