// How long @automerge/automerge 3 takes to load what pg_automerge returns for a document
// (`doc::bytea`: the last save followed by the changes appended since), for the bench's
// "client loads" (benches/benches/client_loads.rs), which writes the files.
//
//   node client-loads.mjs <directory> <repeats>
//
// Loads every `*.automerge` file of the directory once untimed, then `repeats` times, one
// file after the other in each round so that the machine's noise falls on all of them alike,
// and prints one JSON object: each file's name and its load time in microseconds, median and
// median absolute deviation.

import * as A from "@automerge/automerge";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [dir, repeatsArg] = process.argv.slice(2);
if (!dir || !repeatsArg) throw new Error("usage: node client-loads.mjs <directory> <repeats>");
const repeats = Number(repeatsArg);
const files = readdirSync(dir).filter((name) => name.endsWith(".automerge")).sort();
const bytes = new Map(files.map((name) => [name, readFileSync(join(dir, name))]));
const times = new Map(files.map((name) => [name, []]));

// One untimed round first: the WebAssembly module compiles and warms up on the first loads.
for (const name of files) A.load(bytes.get(name));
for (let round = 0; round < repeats; round++) {
  for (const name of files) {
    const start = process.hrtime.bigint();
    A.load(bytes.get(name));
    times.get(name).push(Number(process.hrtime.bigint() - start) / 1000);
  }
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};
const measured = files.map((name) => {
  const middle = median(times.get(name));
  const spread = median(times.get(name).map((t) => Math.abs(t - middle)));
  return [name, { median_us: Math.round(middle), spread_us: Math.round(spread) }];
});
console.log(JSON.stringify(Object.fromEntries(measured)));
