//! `cargo xtask bench --sync`: the sync server on Postgres, on Postgres with access control
//! (tokens, and each document's sharing decided by Postgres), and on samod's own
//! file-system storage, measured in the same run: documents per second for a
//! first sync of N stored documents (a fresh client finds them all from a server that
//! just started), and the round trip of a change from a writer client through the server
//! and its storage to a reader client, with 1, 10 and 100 writer/reader pairs at once;
//! then automerge-repo's JS clients against it and against automerge-repo's own Node
//! server (sync_js.rs) at 10, 100 and 500 pairs, and their first sync of 10,000 stored
//! documents.
//! Medians over repeats, the two storages alternating, each repeat on fresh storage; the
//! report goes to `results/sync-bench-<date>-<commit>/README.md`
//! (`target/bench-quick-sync/` for --quick).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use report_table::{Align, Table};
use xshell::{cmd, Shell};

use crate::cluster::{clusters_dir, Cluster};
use crate::install::PgInstall;
use crate::postgres::PgMajor;
use crate::project_root;
use crate::provenance::Provenance;
use crate::run::{start_with_samples, Fresh, DATABASE};
use crate::sync::{anonymous, build_server, ServerStorage, SyncServer};

use super::sync_js::{self, JsServer};
use crate::util::{median, note, npm_dependencies, step};

/// How much a run measures: the full run, or --quick's smoke check.
struct Sizes {
    documents: usize,
    /// Writer/reader pairs, and the rounds each makes.
    latency: &'static [(usize, usize)],
    /// The same for the JS clients against ours and the Node server.
    js: &'static [(usize, usize)],
    /// The stored documents of the JS clients' first sync.
    js_documents: usize,
}

const FULL: Sizes = Sizes {
    documents: 200,
    latency: &[(1, 20), (10, 10), (100, 5)],
    js: sync_js::FULL,
    js_documents: sync_js::FIRST_SYNC_FULL,
};
const QUICK: Sizes = Sizes {
    documents: 30,
    latency: &[(1, 3), (10, 2)],
    js: sync_js::QUICK,
    js_documents: sync_js::FIRST_SYNC_QUICK,
};

/// How many documents the client's first sync asks for at once (sync_bench.rs).
const FIND_CONCURRENCY: usize = 50;

/// A phase of the client may take this long before the run fails with its output.
const PHASE_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Postgres,
    /// Postgres, with the server checking tokens and asking Postgres about each
    /// (document, peer) under [`ACCESS_SETUP`]'s policy.
    PostgresAccess,
    Filesystem,
    /// Postgres, all documents in one samod repo (`--shards 1`): the server as it was
    /// before it shared documents among repos.
    PostgresOneRepo,
}

impl Backend {
    const ALL: [Backend; 4] =
        [Backend::Postgres, Backend::PostgresAccess, Backend::Filesystem, Backend::PostgresOneRepo];

    fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "Postgres (pg_automerge)",
            Backend::PostgresAccess => "Postgres with access control",
            Backend::Filesystem => "file system (samod)",
            Backend::PostgresOneRepo => "Postgres, one samod repo (--shards 1)",
        }
    }
}

/// The documents table of the access-control runs, made before the server starts: every
/// `bench_user` may read and write every document, so that the runs measure what the
/// checks cost (a token per connection, a transaction per (document, peer) and per write
/// of a row), not a policy's own predicates.
const ACCESS_SETUP: &str = "
DO $$ BEGIN CREATE ROLE bench_user NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
CREATE TABLE documents (
    id text PRIMARY KEY,
    doc automerge NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE ON documents TO bench_user;
ALTER TABLE documents ENABLE ROW LEVEL SECURITY;
CREATE POLICY every_bench_user ON documents TO bench_user USING (true) WITH CHECK (true);
";

/// What one backend measured over the repeats.
struct Measured {
    documents_per_second: Vec<f64>,
    /// Per pair count (in the order of `Sizes::latency`): every change's round trip in
    /// milliseconds, the median of each repeat that finished, and why the others did not.
    latency: Vec<LatencyRuns>,
}

#[derive(Default)]
pub(super) struct LatencyRuns {
    pub(super) samples_ms: Vec<f64>,
    pub(super) repeat_medians_ms: Vec<f64>,
    pub(super) failures: Vec<String>,
}

impl LatencyRuns {
    /// A report's three cells for these runs: the median over every change, the range of
    /// the repeats' medians, the 90th percentile.
    pub(super) fn cells(&self) -> [String; 3] {
        let (min, max) = range(&self.repeat_medians_ms);
        [
            format!("{:.1}", median(&self.samples_ms)),
            format!("{min:.1}–{max:.1}"),
            format!("{:.1}", percentile(&self.samples_ms, 0.9)),
        ]
    }
}

pub fn run(sh: &Shell, major: PgMajor, quick: bool, repeats: usize, profile: bool) -> Result<()> {
    let sizes = if quick { QUICK } else { FULL };
    step(&format!("{major}: install the extension (release)"), || {
        PgInstall::shared(major).install_extension(sh, true)
    })?;
    step("build the sync server and the benchmark's clients (release)", || {
        build_server(true)?;
        cargo(&["build", "--release", "-p", "sync_server", "--example", "sync_bench"])
    })?;
    if !npm_dependencies(sh, "examples/sync-client")? {
        bail!("the sync benchmark needs Node.js for its automerge-repo clients and baseline");
    }
    let cluster = start_with_samples(Cluster::new(sh, major, "bench-sync")?, Fresh::Yes)?;
    let server_version = cluster.server_description(DATABASE)?;
    let command = format!(
        "cargo xtask bench --sync --pg {}{} --repeats {repeats}{}",
        major.number(),
        if quick { " --quick" } else { "" },
        if profile { " --profile" } else { "" }
    );
    let provenance = Provenance::collect(
        sh,
        &command,
        &[
            ("PostgreSQL", server_version),
            ("samod", crate::provenance::locked_version(sh, "samod")?),
            ("@automerge/automerge-repo", "2.5.6 (examples/sync-client)".to_string()),
            ("Node.js", cmd!(sh, "node --version").quiet().read()?),
        ],
    )?;
    let work = clusters_dir(sh)?.join("bench-sync");
    let mut measured = Backend::ALL.map(|_| Measured {
        documents_per_second: Vec::new(),
        latency: sizes.latency.iter().map(|_| LatencyRuns::default()).collect(),
    });
    let mut js = sync_js::new_measured(sizes.js);
    for repeat in 0..repeats {
        // Rotating which storage goes first, so that none always runs on a machine that
        // another has just warmed (or loaded).
        let mut order = Backend::ALL;
        order.rotate_left(repeat % Backend::ALL.len());
        for backend in order {
            step(&format!("repeat {} of {repeats}: {}", repeat + 1, backend.name()), || {
                measure(sh, backend, &cluster, &work, &sizes, &mut measured[backend as usize])
            })?;
        }
        let mut order = JsServer::ALL;
        order.rotate_left(repeat % JsServer::ALL.len());
        for server in order {
            let name = format!("repeat {} of {repeats}: JS clients, {}", repeat + 1, server.name());
            step(&name, || {
                let runs = &mut js[server as usize];
                let sizes = (sizes.js, sizes.js_documents);
                sync_js::measure(sh, server, &cluster, &work, sizes, runs)
            })?;
        }
    }
    let dir = if quick {
        project_root().join("target/bench-quick-sync")
    } else {
        project_root().join(format!("results/sync-bench-{}-{}", provenance.date, provenance.commit))
    };
    std::fs::create_dir_all(&dir)?;
    if profile {
        step("profile the server under 100 pairs of JS clients (perf)", || {
            sync_js::profile(sh, &cluster, &work, &provenance, &dir)
        })?;
    }
    cluster.stop()?;
    let report = report(&command, &provenance, &sizes, repeats, &measured)
        + &sync_js::report(sizes.js, sizes.js_documents, &js);
    std::fs::write(dir.join("README.md"), &report)?;
    println!("{report}");
    note(format!("report in {}", dir.display()));
    Ok(())
}

fn cargo(args: &[&str]) -> Result<()> {
    if !Command::new("cargo").args(args).current_dir(project_root()).status()?.success() {
        bail!("cargo {} failed", args.join(" "));
    }
    Ok(())
}

/// One repeat on fresh storage: seed, restart (so the first sync reads storage), first
/// sync, then each latency run on a server started for it.
fn measure(
    sh: &Shell,
    backend: Backend,
    cluster: &Cluster,
    work: &Path,
    sizes: &Sizes,
    measured: &mut Measured,
) -> Result<()> {
    let ids = work.join("ids.txt");
    let files = work.join("filesystem-storage");
    if files.exists() {
        std::fs::remove_dir_all(&files)?;
    }
    std::fs::create_dir_all(work)?;
    cluster.psql(DATABASE, "DROP TABLE IF EXISTS documents, automerge_repo_chunks; CHECKPOINT;")?;
    let secret = work.join("jwt-secret");
    let (storage, access, tokens) = match backend {
        Backend::Postgres => (ServerStorage::Postgres(cluster, DATABASE), anonymous(), vec![]),
        Backend::PostgresAccess => {
            cluster.psql(DATABASE, ACCESS_SETUP)?;
            std::fs::write(&secret, "a benchmark's secret, at least 32 bytes long")?;
            let secret = secret.display().to_string();
            let flags = vec!["--jwt-secret-file".to_string(), secret.clone()];
            (
                ServerStorage::Postgres(cluster, DATABASE),
                flags,
                vec!["--secret".to_string(), secret],
            )
        }
        Backend::Filesystem => (ServerStorage::Filesystem(&files), anonymous(), vec![]),
        Backend::PostgresOneRepo => {
            let flags = [anonymous(), vec!["--shards".to_string(), "1".to_string()]].concat();
            (ServerStorage::Postgres(cluster, DATABASE), flags, vec![])
        }
    };
    let start = || SyncServer::start(sh, storage_again(&storage), "bench", true, &access);
    let client = |args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(tokens.iter().map(String::as_str));
        client(&args)
    };
    let server = start()?;
    let documents = sizes.documents.to_string();
    let ids_arg = ids.display().to_string();
    client(&["seed", "--url", &server.url, "--documents", &documents, "--ids", &ids_arg])?;
    server.stop()?;
    let server = start()?;
    let first = client(&["first-sync", "--url", &server.url, "--ids", &ids_arg])?;
    measured.documents_per_second.push(sizes.documents as f64 / number(&first, "seconds")?);
    server.stop()?;
    for (runs, &(pairs, rounds)) in measured.latency.iter_mut().zip(sizes.latency) {
        // A server that just started: samod's cost of each event grows with connections
        // times open documents (see docs/sync-server.md), and the first sync left hundreds
        // open.
        let server = start()?;
        let (pairs, rounds) = (pairs.to_string(), rounds.to_string());
        // A run that does not finish is reported as such, with its reason.
        match client(&["latency", "--url", &server.url, "--pairs", &pairs, "--rounds", &rounds]) {
            Ok(line) => {
                let samples = samples(&line)?;
                runs.repeat_medians_ms.push(median(&samples));
                runs.samples_ms.extend(samples);
            }
            Err(error) => runs.failures.push(error.to_string()),
        }
        server.stop()?;
    }
    Ok(())
}

/// `ServerStorage` borrows; a copy of it for each start.
fn storage_again<'a>(storage: &ServerStorage<'a>) -> ServerStorage<'a> {
    match storage {
        ServerStorage::Postgres(cluster, database) => ServerStorage::Postgres(cluster, database),
        ServerStorage::Filesystem(dir) => ServerStorage::Filesystem(dir),
    }
}

/// Runs a phase of the benchmark's samod client; returns its JSON line.
fn client(args: &[&str]) -> Result<String> {
    let mut command = Command::new(project_root().join("target/release/examples/sync_bench"));
    command.args(args);
    last_line(command, &format!("sync_bench {}", args.join(" ")))
}

/// Runs a benchmark client (`what` in errors), killed after PHASE_TIMEOUT; returns the last
/// line it printed, or its error line when it fails.
pub(super) fn last_line(mut command: Command, what: &str) -> Result<String> {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > PHASE_TIMEOUT {
            child.kill()?;
            bail!("{what} did not finish within {PHASE_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = stderr
            .lines()
            .find(|l| l.starts_with("Error: ") || l.contains("Error:"))
            .unwrap_or("no message");
        bail!("{what} failed ({}): {reason}", output.status);
    }
    let stdout = String::from_utf8(output.stdout)?;
    stdout.lines().last().map(str::to_string).with_context(|| format!("{what} printed nothing"))
}

pub(super) fn number(line: &str, field: &str) -> Result<f64> {
    let json: serde_json::Value = serde_json::from_str(line)?;
    json[field].as_f64().with_context(|| format!("no {field} in {line}"))
}

pub(super) fn samples(line: &str) -> Result<Vec<f64>> {
    let json: serde_json::Value = serde_json::from_str(line)?;
    let samples = json["samples_ms"].as_array().with_context(|| format!("no samples in {line}"))?;
    Ok(samples.iter().filter_map(serde_json::Value::as_f64).collect())
}

/// The lowest and highest value (NaN for none).
/// A report's four cells for rates measured over the repeats (documents per second): the
/// median, the lowest, the highest, and the median's ratio to `base`.
pub(super) fn rate_cells(per_second: &[f64], base: f64) -> [String; 4] {
    let (min, max) = range(per_second);
    let median = median(per_second);
    [
        format!("{median:.0}"),
        format!("{min:.0}"),
        format!("{max:.0}"),
        format!("{:.2}x", median / base),
    ]
}

pub(super) fn range(values: &[f64]) -> (f64, f64) {
    (percentile(values, 0.0), percentile(values, 1.0))
}

pub(super) fn percentile(values: &[f64], at: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * at).round() as usize]
}

fn report(
    command: &str,
    provenance: &Provenance,
    sizes: &Sizes,
    repeats: usize,
    measured: &[Measured; 4],
) -> String {
    let [postgres, access, filesystem, one_repo] = measured;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Sync server: Postgres storage, with and without access control, against samod's \
         file-system storage\n"
    );
    let _ = writeln!(text, "Generated by `{command}`; not edited by hand.\n");
    let _ = writeln!(text, "{}", provenance.markdown());
    let _ = writeln!(
        text,
        "The same server binary (release) on loopback, on Postgres through pg_automerge, on \
         Postgres with access control, and on samod's `TokioFilesystemStorage`, measured in \
         this run: {repeats} repeat(s) of each, rotating which goes first, each \
         repeat on fresh storage. Clients are samod repos in one process, each with its \
         own WebSocket connection (`sync_server/examples/sync_bench.rs`).\n"
    );
    let _ = writeln!(
        text,
        "\"Postgres with access control\" is the Postgres run with the server checking an HS256 \
         token at each connection (each client a peer of its own) and deciding each \
         (document, peer) pair in Postgres, again on each write of the document's row, as \
         docs/sync-server.md describes, under a policy that lets every client read and write \
         every document: its difference from the plain Postgres run is the cost of the \
         checks, not of a policy's predicates.\n"
    );
    let _ = writeln!(text, "## First sync\n");
    let _ = writeln!(
        text,
        "{} stored documents (a title, a 336-character text, a list of tags), seeded through \
         the server, which is then restarted; a fresh client finds them all, {} at a time. \
         Median, lowest and highest over the repeats.\n",
        sizes.documents, FIND_CONCURRENCY
    );
    let mut first = Table::new([
        ("storage", Align::Left),
        ("documents/s (median)", Align::Right),
        ("min", Align::Right),
        ("max", Align::Right),
        ("ratio to file system", Align::Right),
    ]);
    let base = median(&filesystem.documents_per_second);
    for (backend, measured) in Backend::ALL.into_iter().zip(measured) {
        let cells = rate_cells(&measured.documents_per_second, base);
        first.row([backend.name().to_string()].into_iter().chain(cells));
    }
    let _ = writeln!(text, "{first}");
    let _ = writeln!(text, "## Change round trip\n");
    let _ = writeln!(
        text,
        "Writer/reader pairs, each a repo of its own with its own connection, each pair on its \
         own document; each round every writer changes its document at once, and each change \
         is timed from the writer's commit until its reader has it (client → server → storage \
         → client). The median and 90th percentile are over every change of every repeat; \
         \"repeats\" gives the lowest and highest of the repeats' own medians. The ratio is \
         Postgres's median over the file system's; \"checks cost\" is the median with access \
         control less the plain Postgres median.\n"
    );
    let mut latency = Table::new([
        ("pairs", Align::Right),
        ("rounds", Align::Right),
        ("Postgres median ms", Align::Right),
        ("repeats", Align::Right),
        ("p90", Align::Right),
        ("file system median ms", Align::Right),
        ("repeats", Align::Right),
        ("p90", Align::Right),
        ("ratio (medians)", Align::Right),
        ("with access control median ms", Align::Right),
        ("repeats", Align::Right),
        ("p90", Align::Right),
        ("checks cost ms", Align::Right),
    ]);
    let mut failures = Vec::new();
    for (at, &(pairs, rounds)) in sizes.latency.iter().enumerate() {
        let (pg, fs, ac) = (&postgres.latency[at], &filesystem.latency[at], &access.latency[at]);
        let one = &one_repo.latency[at];
        for (backend, runs) in [
            (Backend::Postgres, pg),
            (Backend::PostgresAccess, ac),
            (Backend::Filesystem, fs),
            (Backend::PostgresOneRepo, one),
        ] {
            for reason in &runs.failures {
                failures.push(format!("- {pairs} pairs on {}: {reason}", backend.name()));
            }
        }
        let cells = [pairs.to_string(), rounds.to_string()]
            .into_iter()
            .chain(pg.cells())
            .chain(fs.cells())
            .chain([format!("{:.2}x", median(&pg.samples_ms) / median(&fs.samples_ms))])
            .chain(ac.cells());
        latency
            .row(cells.chain([format!("{:+.1}", median(&ac.samples_ms) - median(&pg.samples_ms))]));
    }
    let _ = writeln!(text, "{latency}");
    let _ = writeln!(text, "## Documents shared among repos\n");
    let _ = writeln!(
        text,
        "The server shares documents among samod repos (`--shards`, as the server defaults it) behind a \
         router of the wire protocol; \"one repo\" is the same server with `--shards 1`, \
         every document in one repo, on Postgres, as in the first table. The ratio is the \
         shared median over one repo's.\n"
    );
    let mut shared = Table::new([
        ("pairs", Align::Right),
        ("default --shards median ms", Align::Right),
        ("p90", Align::Right),
        ("one repo median ms", Align::Right),
        ("repeats", Align::Right),
        ("p90", Align::Right),
        ("ratio (medians)", Align::Right),
    ]);
    for (at, &(pairs, _)) in sizes.latency.iter().enumerate() {
        let (pg, one) = (&postgres.latency[at], &one_repo.latency[at]);
        let (min, max) = range(&one.repeat_medians_ms);
        shared.row([
            pairs.to_string(),
            format!("{:.1}", median(&pg.samples_ms)),
            format!("{:.1}", percentile(&pg.samples_ms, 0.9)),
            format!("{:.1}", median(&one.samples_ms)),
            format!("{min:.1}–{max:.1}"),
            format!("{:.1}", percentile(&one.samples_ms, 0.9)),
            format!("{:.2}x", median(&pg.samples_ms) / median(&one.samples_ms)),
        ]);
    }
    let _ = writeln!(text, "{shared}");
    if !failures.is_empty() {
        let _ = writeln!(
            text,
            "Runs that did not finish (left out of the figures above; NaN where no repeat \
             finished):\n\n{}\n",
            failures.join("\n")
        );
    }
    let _ = writeln!(
        text,
        "How round trips grow with the pairs is samod's doing more than the storage's: samod \
         0.16's hub checks every connection against every open document on each event it \
         handles, so in one repo a round costs in proportion to connections × documents × \
         events, on either storage; shared among repos, each repo's share of both (see \
         [docs/sync-server.md](../../docs/sync-server.md#scaling-limits)).\n"
    );
    text
}
