// Loads each save in a directory that pg_automerge refuses as "not its changes" (the core
// test extension/core/tests/crafted_saves.rs writes them to target/crafted-saves/, and the
// automerge crate loads every one) with @automerge/automerge: each must be refused, or show
// a document that its own changes do not make. A save that passes both would be one that
// the refusal need not stop.
//
//   node crafted-saves.mjs [directory]   (default: ../../target/crafted-saves)

import { readdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import * as Automerge from "@automerge/automerge";

const here = dirname(fileURLToPath(import.meta.url));
const dir = process.argv[2] ?? join(here, "../../target/crafted-saves");
const files = readdirSync(dir).filter((name) => name.endsWith(".automerge")).sort();
if (files.length === 0) {
  console.error(`no saves in ${dir}: run cargo test -p pg_automerge_core --test crafted_saves`);
  process.exit(1);
}

const sound = [];
for (const name of files) {
  let doc;
  try {
    doc = Automerge.load(new Uint8Array(readFileSync(join(dir, name))));
  } catch (err) {
    console.log(`${name}: refused (${err.message ?? err})`);
    continue;
  }
  const [replayed] = Automerge.applyChanges(Automerge.init(), Automerge.getAllChanges(doc));
  const [shown, made] = [doc, replayed].map((d) => JSON.stringify(Automerge.toJS(d)));
  if (shown !== made) {
    console.log(`${name}: loaded, but its changes make another document`);
  } else {
    sound.push(name);
  }
}
console.log(`crafted saves: ${files.length - sound.length} of ${files.length} refused or not their changes`);
for (const name of sound) console.error(`LOADS AS ITS CHANGES ${name}`);
process.exit(sound.length === 0 ? 0 : 1);
