//! What a client pays to load what pg_automerge returns as changes are appended: the bytes
//! a read hands out (`doc::bytea`, the last save followed by the changes appended since,
//! as `format::client_bytes` gives them) after 0, 1, 4, 16 and `append_limit` appended
//! writes of the kinds a JS client sends, and once the background compactor has folded the
//! last of those into a new save, loaded by `@automerge/automerge` 3 and by the automerge
//! crate.
//!
//! Criterion times the crate. The JS client is timed in Node
//! (`examples/node-client/client-loads.mjs`, medians of repeats taken in rounds over every
//! file so that the machine's noise falls on all alike), and its figures go to the file that
//! `cargo xtask bench` reads beside criterion's estimates; both are rows of the level
//! `client`.

use std::path::{Path, PathBuf};

use automerge::Automerge;
use benches::measurements::{client_load, CLIENT_LOAD_COMPACTED};
use benches::{
    configure, criterion, fixtures, js_fixtures, quick, record_time, selected, Author, ClientWrite,
    Fixture, AUTOMERGE, JS_CLIENT,
};
use criterion::BenchmarkId;
use pg_automerge_core::compaction::Compacted;
use pg_automerge_core::settings::{WriteSettings, DEFAULT_APPEND_LIMIT};
use pg_automerge_core::{format, writes};

/// How many appended changes each measured value has.
const APPENDED: [u32; 5] = [0, 1, 4, 16, DEFAULT_APPEND_LIMIT];

/// A measured value: after so many appended changes, or `None` once compacted.
type Returned = Option<u32>;

/// Every measured value.
fn returned() -> impl Iterator<Item = Returned> {
    APPENDED.into_iter().map(Some).chain([None])
}

fn main() {
    let group = |returned: Returned| match returned {
        Some(appended) => format!("client/{}", client_load(appended)),
        None => format!("client/{CLIENT_LOAD_COMPACTED}"),
    };
    let wanted = |fixture: &Fixture| {
        returned().any(|n| {
            [JS_CLIENT, AUTOMERGE]
                .iter()
                .any(|client| selected(&format!("{}/{client}/{}", group(n), fixture.name())))
        })
    };
    let all: Vec<Fixture> = fixtures(false).into_iter().chain(js_fixtures()).collect();
    let measured: Vec<&Fixture> = all.iter().filter(|fixture| wanted(fixture)).collect();
    if measured.is_empty() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("client-loads");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for fixture in &measured {
        write_returned_bytes(&dir, fixture);
    }
    let js = js_load_times(&dir, if quick() { 1 } else { 5 });
    for fixture in &measured {
        for returned in returned() {
            let id = format!("{}/{JS_CLIENT}/{}", group(returned), fixture.name());
            if let (true, Some(&(median_ns, spread_ns))) =
                (selected(&id), js.get(&file_name(fixture, returned)))
            {
                record_time(&group(returned), JS_CLIENT, &fixture.name(), median_ns, spread_ns);
            }
        }
    }
    let mut c = criterion();
    for returned in returned() {
        let mut group = c.benchmark_group(group(returned));
        configure(&mut group);
        for fixture in &measured {
            let bytes = std::fs::read(dir.join(file_name(fixture, returned))).unwrap();
            group.bench_with_input(
                BenchmarkId::new(AUTOMERGE, fixture.name()),
                &bytes,
                |b, bytes| b.iter(|| Automerge::load(bytes).expect("what a read returns loads")),
            );
        }
        group.finish();
    }
    c.final_summary();
}

fn file_name(fixture: &Fixture, returned: Returned) -> String {
    match returned {
        Some(appended) => format!("{}-{appended:02}.automerge", fixture.name()),
        None => format!("{}-compacted.automerge", fixture.name()),
    }
}

/// Stores the fixture as the extension does, then appends the writes a JS client sends to
/// a document of its kind, one change each, writing what a read returns at each count of
/// `APPENDED`, and what the background compactor makes of the last. Every write must
/// append: a write that loaded would fold the changes into a new save and measure something
/// else.
fn write_returned_bytes(dir: &Path, fixture: &Fixture) {
    let settings = WriteSettings::UNLIMITED;
    let mut stored = writes::stored_from_client_bytes(&fixture.save, settings).unwrap();
    let mut author = Author::new(&fixture.save);
    let mut writes =
        ClientWrite::ALL.into_iter().filter(|w| w.applies_to(fixture.spec.kind)).cycle();
    for appended in 0..=DEFAULT_APPEND_LIMIT {
        if appended > 0 {
            let change = author.client_write(writes.next().expect("every kind has writes"));
            stored = writes::apply(&stored, &change, settings).unwrap();
        }
        let kept = format::decode(&stored).unwrap().kept.expect("a current value keeps its header");
        assert_eq!(kept.appended_changes, appended, "{}: a write loaded", fixture.name());
        if APPENDED.contains(&appended) {
            let returned = format::client_bytes(&stored).unwrap();
            std::fs::write(dir.join(file_name(fixture, Some(appended))), returned).unwrap();
        }
    }
    let compacted = Compacted::of(&stored, settings).unwrap().expect("changes to compact");
    let compacted = compacted.onto(&stored).unwrap().expect("no write came since");
    let returned = format::client_bytes(&compacted).unwrap();
    std::fs::write(dir.join(file_name(fixture, None)), returned).unwrap();
}

type Times = std::collections::BTreeMap<String, (f64, f64)>;

/// The JS client's load times of every file, by Node (median and median absolute deviation
/// in nanoseconds); none, with a note, where Node.js or the example's npm packages are
/// missing (`cargo xtask test` installs them).
fn js_load_times(dir: &Path, repeats: usize) -> Times {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/node-client");
    let output = std::process::Command::new("node")
        .arg(example.join("client-loads.mjs"))
        .arg(dir)
        .arg(repeats.to_string())
        .current_dir(&example)
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        failed => {
            eprintln!(
                "note: the JS client's loads not measured ({failed:?}): install Node.js and run \
                 `npm ci` in examples/node-client"
            );
            return Times::new();
        }
    };
    let measured: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&output.stdout).expect("client-loads.mjs prints one JSON object");
    measured
        .into_iter()
        .map(|(file, times)| {
            let ns = |field: &str| times[field].as_f64().expect("a number of microseconds") * 1e3;
            (file, (ns("median_us"), ns("spread_us")))
        })
        .collect()
}
