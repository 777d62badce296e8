//! A mutation fuzzer over every byte input of `pg_automerge_core`, on stable Rust: it
//! starts from real saves and changes (`seeds`), mutates them behind valid checksums
//! (`mutate`, `chunks`), runs each mutant through every core function that takes bytes
//! (`targets`) and checks the oracles: no panic escapes, no load far above its estimate,
//! no input slower than a bound. An input that reaches outcomes no earlier input reached
//! joins the corpus. A failing input is written out, to become a regression input in
//! `fuzz/regressions/` once fixed; `tests/regressions.rs` replays them all.
//!
//! The binary must install `pg_automerge_core::memory::CountingAllocator` as its global
//! allocator, or the memory oracle sees nothing.

/// Chunk framing lives in `fixtures`, which the wrong-change generator shares.
pub use fixtures::chunks;
pub mod altered_writes;
pub mod mutate;
pub mod seeds;
pub mod targets;
pub mod wrong_writes;

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;

use crate::mutate::Rng;
use crate::targets::Failure;

/// The corpus stops growing here, so that a long run keeps its memory bounded.
const MAX_CORPUS: usize = 20_000;

/// What an execution runs its input through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Every byte input of the core, and the same bytes as a stream of honest and wrong
    /// writes.
    All,
    /// One honest change altered at random, written through one entry point (issue 35):
    /// cheap enough to run millions of times.
    AlteredWrites,
}

/// What a campaign runs for and where it writes failing inputs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub target: Target,
    /// Stop after this long (checked between inputs)...
    pub time: Duration,
    /// ...or after this many executions, whichever comes first.
    pub executions: Option<u64>,
    pub seed: u64,
    /// One input taking longer than this is a failure.
    pub slow: Duration,
    /// One input taking longer than this is a hang: the input is written out and the
    /// process exits, since a running call cannot be stopped.
    pub hang: Duration,
    pub failures_dir: PathBuf,
}

/// What a campaign did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub executions: u64,
    pub seeds: usize,
    pub corpus: usize,
    /// Distinct failures, each with where its input was written.
    pub failures: Vec<(Failure, PathBuf)>,
    /// Executions whose input got past the estimate to Automerge's load, and those that
    /// loaded as a document.
    pub reached_load: u64,
    pub loaded: u64,
    /// Distinct panics inside Automerge that the core turned into errors, each with where
    /// its first input was written.
    pub caught: Vec<(String, PathBuf)>,
    pub elapsed: Duration,
    pub slowest: Duration,
}

/// The stored sample documents that inputs are applied to, merged with and put under.
pub fn bases() -> Vec<Vec<u8>> {
    fixtures::samples()
        .iter()
        .map(|s| {
            stored_from_client_bytes(&s.doc.save(), WriteSettings::UNLIMITED)
                .expect("a valid sample")
        })
        .collect()
}

/// Runs one input against every base, as a regression input is checked: its failures,
/// and how long the slowest run took. The wrong-change target is not in it (see
/// [`replay_wrong_writes`]): today's core breaks its invariant (issue 14).
pub fn replay(input: &[u8]) -> (Vec<Failure>, Duration) {
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    let printing_hook = targets::record_panics();
    for base in bases() {
        let started = Instant::now();
        failures.extend(targets::run(input, &base).failures);
        slowest = slowest.max(started.elapsed());
    }
    std::panic::set_hook(printing_hook);
    (failures, slowest)
}

/// Runs one input through the wrong-change target, as a regression input it found is
/// checked: its failure, if any. `tests/regressions.rs` runs it on the inputs named
/// `wrong_changes-*`.
pub fn replay_wrong_writes(input: &[u8]) -> Option<Failure> {
    let printing_hook = targets::record_panics();
    let (failure, _) = wrong_writes::run(input);
    std::panic::set_hook(printing_hook);
    failure
}

/// Runs every seed, then mutants, until the budget is spent. `progress` is called about
/// every ten seconds.
pub fn campaign(settings: &Settings, mut progress: impl FnMut(&Summary)) -> Summary {
    let started = Instant::now();
    let (seeds, bases, altered) = match settings.target {
        Target::All => (seeds::all(), bases(), Vec::new()),
        // Choice streams: short inputs, every byte a choice.
        Target::AlteredWrites => {
            let streams = (0u32..64).map(|n| seeds::Seed {
                name: format!("stream {n}"),
                bytes: n.wrapping_mul(2_654_435_761).to_le_bytes().to_vec(),
            });
            (streams.collect(), vec![Vec::new()], altered_writes::bases())
        }
    };
    let mut corpus: Vec<Vec<u8>> = seeds.iter().map(|s| s.bytes.clone()).collect();
    let mut summary = Summary { seeds: seeds.len(), ..Summary::default() };
    let mut signatures = HashSet::new();
    let mut failure_kinds = HashSet::new();
    let mut caught_kinds = HashSet::new();
    let mut rng = Rng::new(settings.seed);
    let current = watchdog(settings);
    let printing_hook = targets::record_panics();
    let mut last_progress = Instant::now();

    let budget_left = |summary: &Summary| {
        started.elapsed() < settings.time
            && settings.executions.is_none_or(|limit| summary.executions < limit)
    };
    while budget_left(&summary) {
        let index = summary.executions as usize;
        let input = if index < seeds.len() {
            seeds[index].bytes.clone()
        } else {
            // Recent additions are the likeliest to lead somewhere new.
            let pick = if rng.chance(30) {
                corpus.len() - 1 - rng.below(corpus.len().min(64))
            } else {
                rng.below(corpus.len())
            };
            let other = rng.pick(&corpus).clone();
            mutate::mutate(&mut rng, &corpus[pick], &other)
        };
        let base = &bases[index % bases.len()];

        *current.lock().unwrap() = Some((Instant::now(), input.clone()));
        let exec_started = Instant::now();
        let mut report = match settings.target {
            Target::All => {
                let mut report = targets::run(&input, base);
                // The same bytes as a choice stream for the wrong-change target.
                let (wrong, outcomes) = wrong_writes::run(&input);
                report.failures.extend(wrong);
                report.signature.extend(outcomes);
                report
            }
            Target::AlteredWrites => {
                let (failure, outcome, accepted) = altered_writes::run(&input, &altered);
                targets::Report {
                    loaded: accepted && failure.is_none(),
                    failures: failure.into_iter().collect(),
                    signature: vec![outcome],
                    reached_load: accepted,
                    caught: Vec::new(),
                }
            }
        };
        let took = exec_started.elapsed();
        *current.lock().unwrap() = None;
        summary.executions += 1;
        summary.reached_load += u64::from(report.reached_load);
        summary.loaded += u64::from(report.loaded);
        summary.slowest = summary.slowest.max(took);
        if took > settings.slow {
            report.failures.push(Failure {
                target: "any",
                what: format!("took {:.1}s, more than {:?}", took.as_secs_f64(), settings.slow),
            });
        }

        for failure in report.failures {
            let kind = (
                failure.target,
                failure.what.chars().filter(|c| !c.is_ascii_digit()).collect::<String>(),
            );
            if failure_kinds.insert(kind) {
                let path = write_input(&settings.failures_dir, failure.target, &input);
                summary.failures.push((failure, path));
            }
        }
        for message in report.caught {
            if caught_kinds.insert(message.clone()) {
                let path = write_input(&settings.failures_dir, "caught", &input);
                summary.caught.push((message, path));
            }
        }
        let mut hasher = DefaultHasher::new();
        report.signature.hash(&mut hasher);
        // Only inputs that reach Automerge are worth mutating further.
        let new = signatures.insert(hasher.finish());
        if new && report.reached_load && index >= seeds.len() && corpus.len() < MAX_CORPUS {
            corpus.push(input);
        }
        summary.corpus = corpus.len();
        summary.elapsed = started.elapsed();
        if last_progress.elapsed() > Duration::from_secs(10) {
            progress(&summary);
            last_progress = Instant::now();
        }
    }
    std::panic::set_hook(printing_hook);
    summary.elapsed = started.elapsed();
    summary
}

/// The input being run and when it started, shared with the watchdog.
type Running = Arc<Mutex<Option<(Instant, Vec<u8>)>>>;

/// Watches the input being run from another thread: if one runs past the hang bound, it
/// is written out and the process exits with status 3.
fn watchdog(settings: &Settings) -> Running {
    let current: Running = Arc::default();
    let watched = Arc::clone(&current);
    let (hang, dir) = (settings.hang, settings.failures_dir.clone());
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        if let Some((since, input)) = &*watched.lock().unwrap() {
            if since.elapsed() > hang {
                let path = write_input(&dir, "hang", input);
                eprintln!("fuzz: an input ran for more than {hang:?}: {}", path.display());
                std::process::exit(3);
            }
        }
    });
    current
}

/// Writes a failing input as `<target>-<hash>.bin`, named by its content.
fn write_input(dir: &std::path::Path, target: &str, input: &[u8]) -> PathBuf {
    let mut hasher = DefaultHasher::new();
    input.hash(&mut hasher);
    let name = format!("{}-{:016x}.bin", target.replace("::", "-"), hasher.finish());
    std::fs::create_dir_all(dir).expect("creating the failures directory");
    let path = dir.join(name);
    std::fs::write(&path, input).expect("writing a failing input");
    path
}
