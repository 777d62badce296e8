//! What the benchmarks share: which fixtures a run uses, criterion's settings, the small
//! changes writes apply, and the files where peak heap, loads and storage measurements are
//! written; and what judges a run beside them: what it measured (`measurements`), the
//! performance goals it meets or misses (`goals`), and how their figures read (`figures`),
//! which `cargo xtask bench` reports; and the phases of a load that `load_breakdown`
//! measures (`load_phases`).
//!
//! `cargo xtask bench` sets the environment variables read here; run by hand, the benches
//! default to the Operations-scale fixtures under `target/fixtures`.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use automerge::marks::{ExpandMark, Mark};
use automerge::transaction::{CommitOptions, Transactable};
use automerge::{ActorId, AutoCommit, ObjType, ReadDoc, ScalarValue, ROOT};
use criterion::{Criterion, SamplingMode};
use fixtures::generated::{cached, Kind, Scale, Spec};
use pg_automerge_core::memory;

pub mod figures;
pub mod goals;
pub mod load_phases;
pub mod measurements;
pub mod operations;
pub mod sql_edits;

/// The variant measured: ours, or one of the baselines measured beside it in the same run.
pub const OURS: &str = "pg_automerge";
pub const AUTOMERGE: &str = "automerge";
pub const JSONB: &str = "jsonb";
/// The JS client, whose loads `client_loads` times beside the automerge crate's.
pub const JS_CLIENT: &str = "@automerge/automerge";
/// pg_automerge on the path it replaces: values stored without their JSON
/// (`pg_automerge.keep_jsonb = off`), writes that load, apply and save
/// (`pg_automerge.append_limit = 0`).
pub const NAIVE: &str = "naive (always loads)";
/// The root key of the counter that [`ClientWrite::CounterIncrement`] increments.
const COUNTER: &str = "count";

/// Which fixture scale the run uses: `PG_AUTOMERGE_BENCH_SCALE` = small, medium or
/// operations (the default).
pub fn scale() -> Scale {
    match std::env::var("PG_AUTOMERGE_BENCH_SCALE").as_deref() {
        Ok("small") => Scale::Small,
        Ok("medium") => Scale::Medium,
        Ok("operations") | Err(_) => Scale::Operations,
        Ok(other) => panic!("PG_AUTOMERGE_BENCH_SCALE={other}: choose small, medium or operations"),
    }
}

/// Whether this is a quick run (a smoke check that every bench runs, not a measurement).
pub fn quick() -> bool {
    scale() == Scale::Small
}

/// One fixture, read from (or generated into) the fixtures directory.
#[derive(Clone)]
pub struct Fixture {
    pub spec: Spec,
    /// Made by `@automerge/automerge` (see [`js_fixtures`]) rather than our generators.
    pub made_by_js: bool,
    pub save: Vec<u8>,
}

impl Fixture {
    pub fn name(&self) -> String {
        match self.made_by_js {
            true => format!("js-{}", self.spec.name()),
            false => self.spec.name(),
        }
    }
}

/// The fixtures of this run's scale: each kind with its history, and, when `compacted`,
/// each kind compacted to one change as well.
pub fn fixtures(compacted: bool) -> Vec<Fixture> {
    let dir = std::env::var_os("PG_AUTOMERGE_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/fixtures"));
    let mut fixtures = Vec::new();
    for kind in Kind::ALL {
        for compacted in [false, true].into_iter().filter(|c| !c || compacted) {
            let spec = Spec { kind, scale: scale(), compacted };
            let save = cached(&dir, spec).expect("the fixtures directory is writable");
            fixtures.push(Fixture { spec, made_by_js: false, save });
        }
    }
    fixtures
}

/// The same three kinds of document made by `@automerge/automerge` 3 the way an app's
/// editing makes them (`examples/node-client/estimate-fixtures.mjs`: strings are text
/// objects, edits are splices, marks and block splits by three authors), cached under
/// `target/js-fixtures-<scale>`. An Operations-scale run takes them at the medium scale (a
/// tenth of the edits): the JavaScript client takes 7 minutes on two cores to make those,
/// and over an hour for the full scale. Empty, with a note, where Node.js or the example's
/// npm packages are missing (`cargo xtask test` installs them).
pub fn js_fixtures() -> Vec<Fixture> {
    let (scale, divisor) = match scale() {
        Scale::Small => (Scale::Small, "1000"),
        Scale::Medium | Scale::Operations => (Scale::Medium, "10"),
    };
    let dir = workspace_root().join(format!("target/js-fixtures-{}", scale.name()));
    let example = workspace_root().join("examples/node-client");
    let file = |kind: Kind| dir.join(format!("js-{}.automerge", kind.name()));
    if !Kind::ALL.into_iter().all(|kind| file(kind).exists()) {
        let made = std::process::Command::new("node")
            .arg(example.join("estimate-fixtures.mjs"))
            .arg(&dir)
            .arg(divisor)
            .current_dir(&example)
            .status();
        if !made.as_ref().is_ok_and(|status| status.success()) {
            eprintln!(
                "note: no fixtures made by @automerge/automerge ({made:?}): install Node.js and \
                 run `npm ci` in examples/node-client"
            );
            return Vec::new();
        }
    }
    Kind::ALL
        .into_iter()
        .map(|kind| Fixture {
            spec: Spec { kind, scale, compacted: false },
            made_by_js: true,
            save: std::fs::read(file(kind)).expect("node wrote the fixture"),
        })
        .collect()
}

/// Criterion's settings: few samples of equal size, since one iteration on the larger
/// fixtures takes seconds; a quick run only checks that each bench runs.
pub fn criterion() -> Criterion {
    let criterion = Criterion::default().sample_size(10).configure_from_args();
    if quick() {
        criterion
            .warm_up_time(Duration::from_millis(20))
            .measurement_time(Duration::from_millis(50))
    } else {
        criterion.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5))
    }
}

/// Settings every group shares.
pub fn configure(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group.sampling_mode(SamplingMode::Flat);
}

/// An author editing one document, so that a benchmark can apply a new change on every
/// iteration: each change depends on the one before.
pub struct Author {
    doc: AutoCommit,
    count: u64,
}

impl Author {
    pub fn new(save: &[u8]) -> Author {
        let doc =
            AutoCommit::load(save).expect("fixtures load").with_actor(ActorId::from([0xe5; 16]));
        Author { doc, count: 0 }
    }

    /// Retitles the document: the next title and the change bytes that set it.
    pub fn retitle(&mut self) -> (String, Vec<u8>) {
        self.count += 1;
        let title = format!("Retitled {}", self.count);
        self.doc.put(ROOT, "title", title.as_str()).unwrap();
        (title, self.commit())
    }

    /// Types a few words into the middle of the `content` text: a change to a long text
    /// object, where a retitle changes one root field. Returns the change bytes.
    pub fn type_into_content(&mut self) -> Vec<u8> {
        self.count += 1;
        let text = self.content_id();
        let middle = self.doc.length(&text) / 2;
        let words = format!(" typed {}", self.count);
        self.doc.splice_text(&text, middle, 0, &words).unwrap();
        self.commit()
    }

    /// Makes one of the writes a JS client sends (see [`ClientWrite`]) and returns its
    /// change bytes.
    pub fn client_write(&mut self, write: ClientWrite) -> Vec<u8> {
        self.count += 1;
        let n = self.count;
        let doc = &mut self.doc;
        match write {
            ClientWrite::TitleAsText => {
                let title = doc.put_object(ROOT, "title", ObjType::Text).unwrap();
                doc.splice_text(&title, 0, 0, &format!("Title {n}")).unwrap();
            }
            ClientWrite::Splice => {
                let text = doc.get(ROOT, "content").unwrap().expect("a text fixture").1;
                let middle = doc.length(&text) / 2;
                doc.splice_text(&text, middle, 3, &format!(" typed {n}")).unwrap();
            }
            ClientWrite::Mark => {
                let text = doc.get(ROOT, "content").unwrap().expect("a text fixture").1;
                let middle = doc.length(&text) / 2;
                let mark = Mark::new("bold".into(), n.is_multiple_of(2), middle, middle + 5);
                doc.mark(&text, mark, ExpandMark::After).unwrap();
            }
            ClientWrite::BlockSplit => {
                let text = doc.get(ROOT, "content").unwrap().expect("a text fixture").1;
                let middle = doc.length(&text) / 2;
                let block = doc.split_block(&text, middle).unwrap();
                doc.put(&block, "type", "paragraph").unwrap();
                doc.put_object(&block, "parents", ObjType::List).unwrap();
                doc.put_object(&block, "attrs", ObjType::Map).unwrap();
            }
            ClientWrite::NestedField => {
                let items = doc.get(ROOT, "items").unwrap().expect("a list fixture").1;
                let item = doc.get(&items, doc.length(&items) / 2).unwrap().unwrap().1;
                doc.put(&item, "done", format!("done {n}")).unwrap();
            }
            ClientWrite::ListInsert => {
                let items = doc.get(ROOT, "items").unwrap().expect("a list fixture").1;
                let at = doc.length(&items) / 2;
                let item = doc.insert_object(&items, at, ObjType::Map).unwrap();
                let text = doc.put_object(&item, "text", ObjType::Text).unwrap();
                doc.splice_text(&text, 0, 0, &format!("item {n}")).unwrap();
                doc.put(&item, "done", false).unwrap();
            }
            ClientWrite::ListDelete => {
                let items = doc.get(ROOT, "items").unwrap().expect("a list fixture").1;
                // A quick run on the small fixtures deletes more items than the list holds:
                // the last one is kept for the moves, and its field set instead.
                match doc.length(&items) {
                    len if len > 1 => doc.delete(&items, len / 2).unwrap(),
                    _ => {
                        let item = doc.get(&items, 0).unwrap().expect("an item is kept").1;
                        doc.put(&item, "done", format!("kept {n}")).unwrap();
                    }
                }
            }
            ClientWrite::ListMove => {
                let items = doc.get(ROOT, "items").unwrap().expect("a list fixture").1;
                let len = doc.length(&items);
                fixtures::js_edits::move_item(doc, &items, len / 2, len / 4).unwrap();
            }
            ClientWrite::CounterIncrement => match doc.get(ROOT, COUNTER).unwrap() {
                Some(_) => doc.increment(ROOT, COUNTER, 1).unwrap(),
                None => doc.put(ROOT, COUNTER, ScalarValue::counter(0)).unwrap(),
            },
        }
        self.commit()
    }

    /// The document's JSON, as the `jsonb` cast shows it.
    pub fn json(&mut self) -> serde_json::Value {
        pg_automerge_core::json::document(self.doc.document(), None).unwrap()
    }

    fn commit(&mut self) -> Vec<u8> {
        self.doc.commit_with(CommitOptions::default().with_time(fixtures::COMMIT_TIME_MS));
        let change = self.doc.get_last_local_change().expect("a change was just committed");
        change.raw_bytes().to_vec()
    }

    /// The whole document as it stands, saved.
    pub fn save(&mut self) -> Vec<u8> {
        self.doc.save()
    }

    /// The document's title now.
    pub fn title(&self) -> String {
        self.doc
            .get(ROOT, "title")
            .unwrap()
            .and_then(|(value, _)| value.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// The `content` text now.
    pub fn content(&self) -> String {
        self.doc.text(self.content_id()).unwrap()
    }

    fn content_id(&self) -> automerge::ObjId {
        self.doc.get(ROOT, "content").unwrap().expect("a text fixture has a content text").1
    }
}

/// The writes a JS client sends that the benches time against their `jsonb` counterparts:
/// a string set the JS way (a new text object), a splice (insert and delete) into the
/// middle of the content, a mark over a few of its characters, a block split there, a field
/// of the middle list item, a list item (a map with a text) inserted there, one deleted,
/// the middle item moved to a quarter of the list (deleted and a copy inserted, as the JS
/// client moves), and a root counter incremented (the first such write creates the
/// counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientWrite {
    TitleAsText,
    Splice,
    Mark,
    BlockSplit,
    NestedField,
    ListInsert,
    ListDelete,
    ListMove,
    CounterIncrement,
}

impl ClientWrite {
    pub const ALL: [ClientWrite; 9] = [
        ClientWrite::TitleAsText,
        ClientWrite::Splice,
        ClientWrite::Mark,
        ClientWrite::BlockSplit,
        ClientWrite::NestedField,
        ClientWrite::ListInsert,
        ClientWrite::ListDelete,
        ClientWrite::ListMove,
        ClientWrite::CounterIncrement,
    ];

    /// The operation the report and the goals name it by (its group is `sql/<operation>`,
    /// as every SQL bench's).
    pub fn operation(self) -> &'static str {
        match self {
            ClientWrite::TitleAsText => "client write: string as text",
            ClientWrite::Splice => "client write: splice",
            ClientWrite::Mark => "client write: mark",
            ClientWrite::BlockSplit => "client write: block split",
            ClientWrite::NestedField => "client write: nested field",
            ClientWrite::ListInsert => "client write: list insert",
            ClientWrite::ListDelete => "client write: list delete",
            ClientWrite::ListMove => "client write: list move",
            ClientWrite::CounterIncrement => "client write: counter increment",
        }
    }

    /// Whether a fixture of `kind` has what the write edits.
    pub fn applies_to(self, kind: Kind) -> bool {
        match self {
            ClientWrite::TitleAsText | ClientWrite::CounterIncrement => true,
            ClientWrite::Splice | ClientWrite::Mark => kind != Kind::MapList,
            ClientWrite::BlockSplit => kind == Kind::RichText,
            ClientWrite::NestedField
            | ClientWrite::ListInsert
            | ClientWrite::ListDelete
            | ClientWrite::ListMove => kind == Kind::MapList,
        }
    }
}

/// Two forks of `save`, each with one small change the other lacks.
pub fn forks(save: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let fork = |actor: u8| {
        let mut doc = AutoCommit::load(save).unwrap().with_actor(ActorId::from([actor; 16]));
        doc.put(ROOT, "title", format!("Fork {actor}")).unwrap();
        doc.commit_with(CommitOptions::default().with_time(fixtures::COMMIT_TIME_MS));
        doc.save()
    };
    (fork(0xf1), fork(0xf2))
}

/// What one run of an operation took from the heap: its peak above what was allocated
/// before, and how many documents the extension loaded.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub peak_bytes: u64,
    pub loads: Option<u64>,
}

/// Runs `work` once and records its peak heap, in the peaks file that `cargo xtask bench`
/// reads next to criterion's estimates. Loads are left out: the extension counts its own,
/// not the automerge crate's that the baseline makes.
pub fn record_peak<T>(group: &str, variant: &str, fixture: &str, work: impl FnOnce() -> T) {
    let before = memory::usage().allocated_bytes;
    memory::reset();
    let result = work();
    let peak_bytes = memory::usage().peak_allocated_bytes.saturating_sub(before) as u64;
    drop(result);
    record_memory(group, variant, fixture, Memory { peak_bytes, loads: None });
}

/// Records memory measured elsewhere (by the server, for SQL benches):
/// `group,variant,fixture,peak_bytes,loads`, loads empty when not counted.
pub fn record_memory(group: &str, variant: &str, fixture: &str, memory: Memory) {
    let loads = memory.loads.map(|l| l.to_string()).unwrap_or_default();
    let line = format!("{group},{variant},{fixture},{},{loads}", memory.peak_bytes);
    append_line("PG_AUTOMERGE_BENCH_PEAKS", "peaks.csv", &line);
}

/// Records a time measured outside criterion (the JS client's, timed in Node) in the file
/// `cargo xtask bench` reads beside criterion's estimates:
/// `group,variant,fixture,median_ns,spread_ns`.
pub fn record_time(group: &str, variant: &str, fixture: &str, median_ns: f64, spread_ns: f64) {
    let line = format!("{group},{variant},{fixture},{median_ns},{spread_ns}");
    append_line("PG_AUTOMERGE_BENCH_TIMES", "times.csv", &line);
}

/// Records a measurement that is not a time (a stored size, the WAL of a write) in the
/// storage file, `fixture,variant,measure,value`; `None` is written as an empty value.
pub fn record_storage(fixture: &str, variant: &str, measure: &str, value: Option<i64>) {
    let value = value.map(|v| v.to_string()).unwrap_or_default();
    append_line(
        "PG_AUTOMERGE_BENCH_STORAGE",
        "storage.csv",
        &format!("{fixture},{variant},{measure},{value}"),
    );
}

/// Appends `line` to the file named by `variable`, by default `file` beside criterion's output.
fn append_line(variable: &str, file: &str, line: &str) {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/criterion").join(file));
    std::fs::create_dir_all(path.parent().expect("a file has a directory")).unwrap();
    let mut file = OpenOptions::new().create(true).append(true).open(&path).unwrap();
    // One write of the whole line: `core` and `sql` run side by side and append to the same
    // files, and `writeln!` on a file writes each formatted piece separately, so their
    // pieces interleaved.
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// Whether the run's filter (`PG_AUTOMERGE_BENCH_FILTER`, the regular expression `cargo
/// xtask bench --filter` also hands criterion) selects the benchmark `id`
/// (`group/variant/fixture`), so that the benches skip their untimed work (peaks, storage)
/// for what criterion skips. Run by hand without the variable, everything is selected.
pub fn selected(id: &str) -> bool {
    match std::env::var("PG_AUTOMERGE_BENCH_FILTER") {
        Ok(filter) => regex::Regex::new(&filter)
            .unwrap_or_else(|e| panic!("PG_AUTOMERGE_BENCH_FILTER={filter}: {e}"))
            .is_match(id),
        Err(_) => true,
    }
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("benches is in the workspace")
        .to_path_buf()
}

/// The baseline of the allocator benches: the same load with the system allocator.
pub const SYSTEM_ALLOCATOR: &str = "system allocator";

/// Loads each fixture's history; the allocator benches run it in two binaries, one with
/// the extension's counting allocator (`OURS`) and one with the system allocator.
pub fn allocator_bench(c: &mut Criterion, variant: &str) {
    let mut group = c.benchmark_group("core/load, by allocator");
    configure(&mut group);
    for fixture in fixtures(false) {
        group.bench_with_input(
            criterion::BenchmarkId::new(variant, fixture.name()),
            &fixture.save,
            |b, save| b.iter(|| automerge::Automerge::load(save).unwrap()),
        );
    }
    group.finish();
}
