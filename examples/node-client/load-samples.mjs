// Loads every Automerge payload in a directory with @automerge/automerge, as a JS client
// would, saves it and loads the save: the Node.js half of issue 14's invariant. Where the
// JSON the value keeps is beside it (name.json), the JS client's document must show it. The core
// tests (extension/core/tests/wrong_changes.rs) write a sample of the values they accepted
// to target/accepted-samples/; `cargo xtask test` runs this after installing node_modules.
//
//   node load-samples.mjs [directory]   (default: ../../target/accepted-samples)

import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as Automerge from "@automerge/automerge";

const here = dirname(fileURLToPath(import.meta.url));
const dir = process.argv[2] ?? join(here, "../../target/accepted-samples");
const files = readdirSync(dir).filter((name) => name.endsWith(".automerge")).sort();
if (files.length === 0) {
  console.error(`no samples in ${dir}: run cargo test -p pg_automerge_core --test wrong_changes`);
  process.exit(1);
}
// JSON with its object keys in order, so that two documents compare by content.
function canonical(value) {
  return JSON.stringify(value, (_, v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]))
      : v,
  );
}

const failures = [];
for (const name of files) {
  try {
    const doc = Automerge.load(new Uint8Array(readFileSync(join(dir, name))));
    const again = Automerge.load(Automerge.save(doc));
    const [a, b] = [Automerge.getHeads(doc), Automerge.getHeads(again)];
    if (a.join() !== b.join()) throw new Error(`heads ${a} became ${b} after a save`);
    const shown = canonical(JSON.parse(JSON.stringify(Automerge.toJS(again))));
    const kept = join(dir, name.replace(/\.automerge$/, ".json"));
    if (existsSync(kept)) {
      const expected = canonical(JSON.parse(readFileSync(kept, "utf8")));
      if (shown !== expected) throw new Error(`the JS client shows ${shown}, the value keeps ${expected}`);
    }
  } catch (err) {
    failures.push(`${name}: ${err.message ?? err}`);
  }
}
console.log(`accepted samples: ${files.length - failures.length} of ${files.length} load in @automerge/automerge`);
for (const failure of failures) console.error(`DOES NOT LOAD ${failure}`);
process.exit(failures.length === 0 ? 0 : 1);
