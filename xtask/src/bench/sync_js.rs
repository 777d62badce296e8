//! `cargo xtask bench --sync`'s JS part: automerge-repo 2.5 clients
//! (`examples/sync-client/bench.mjs`) against our server on Postgres and against
//! automerge-repo's own Node server (`node-server.mjs`: `Repo`, `NodeWSServerAdapter`,
//! `NodeFSStorageAdapter`), the server a user would pick instead, in the same run,
//! alternating; each pair count on a server started for it, on fresh storage; then the
//! first sync of many stored documents (`first-sync.mjs`) on each.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use report_table::{Align, Table};
use xshell::{cmd, Shell};

use super::sync_server::{last_line, number, range, rate_cells, samples, LatencyRuns};
use crate::cluster::{clusters_dir, Cluster};
use crate::project_root;
use crate::provenance::Provenance;
use crate::run::DATABASE;
use crate::sync::{anonymous, postgres_url, ServerStorage, SyncServer};
use crate::util::median;

/// Writer/reader pairs and the rounds each makes: 500 pairs are 1,000 connections.
pub const FULL: &[(usize, usize)] = &[(10, 10), (100, 5), (500, 3)];
pub const QUICK: &[(usize, usize)] = &[(10, 2)];

/// Stored documents of the first sync: as many as the issue's users open.
pub const FIRST_SYNC_FULL: usize = 10_000;
pub const FIRST_SYNC_QUICK: usize = 50;

#[derive(Clone, Copy)]
pub enum JsServer {
    Ours,
    Node,
}

impl JsServer {
    pub const ALL: [JsServer; 2] = [JsServer::Ours, JsServer::Node];

    pub fn name(self) -> &'static str {
        match self {
            JsServer::Ours => "ours (Postgres)",
            JsServer::Node => "automerge-repo's Node server",
        }
    }
}

/// What one server measured at one pair count over the repeats.
#[derive(Default)]
pub struct JsRuns {
    latency: LatencyRuns,
    /// Changes that had not reached their reader a minute after their writer's commit.
    missing: usize,
    /// Readers whose `find` had not succeeded 10 s after their writer's `create`.
    failed_finds: usize,
    /// Ours only: from a client's `create` to the document's row in the documents table.
    create_to_row_ms: Vec<f64>,
    /// Ours only: new documents whose row had not appeared 30 s after their `create`.
    not_stored: usize,
}

/// What one server's first syncs measured over the repeats.
#[derive(Default)]
pub struct FirstSyncRuns {
    documents_per_second: Vec<f64>,
    /// Seeded documents the checking client did not find (left out of the first sync's
    /// count of failures: it asks for every seeded id).
    failed_seeds: usize,
    /// Finds of the first sync that did not succeed within 30 s.
    failed_finds: usize,
    failures: Vec<String>,
}

/// One server's runs: per pair count, then the first syncs.
pub struct JsServerRuns {
    pairs: Vec<JsRuns>,
    first_sync: FirstSyncRuns,
}

/// Per server, in [`JsServer::ALL`]'s order.
pub type JsMeasured = [JsServerRuns; 2];

pub fn new_measured(pairs: &[(usize, usize)]) -> JsMeasured {
    JsServer::ALL.map(|_| JsServerRuns {
        pairs: pairs.iter().map(|_| JsRuns::default()).collect(),
        first_sync: FirstSyncRuns::default(),
    })
}

/// One repeat of `server`: each pair count on a server started for it, on fresh storage,
/// then the first sync of `documents` stored ones.
pub fn measure(
    sh: &Shell,
    server: JsServer,
    cluster: &Cluster,
    work: &Path,
    (pairs, documents): (&[(usize, usize)], usize),
    measured: &mut JsServerRuns,
) -> Result<()> {
    for (runs, &(pairs, rounds)) in measured.pairs.iter_mut().zip(pairs) {
        let (running, database) =
            start(sh, server, cluster, work, Storage::Fresh, DocumentsPerConnection::Default)?;
        // A run that does not finish is reported as such, with its reason.
        match last_line(clients(&running, pairs, rounds, database), &clients_name(pairs)) {
            Ok(line) => record(runs, &line)?,
            Err(error) => runs.latency.failures.push(error.to_string()),
        }
        running.stop()?;
    }
    first_sync(sh, server, cluster, work, documents, &mut measured.first_sync)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Storage {
    Fresh,
    Kept,
}

/// How many documents one client may sync from our server: its default bound (1,000, a
/// public server's), or as many as a first sync asks for.
#[derive(Clone, Copy)]
enum DocumentsPerConnection {
    Default,
    AtMost(usize),
}

/// Starts `server` on its storage, emptied first when `Fresh`; returns it and, for ours,
/// the cluster it stores in.
fn start<'a>(
    sh: &Shell,
    server: JsServer,
    cluster: &'a Cluster,
    work: &Path,
    storage: Storage,
    bound: DocumentsPerConnection,
) -> Result<(SyncServer, Option<&'a Cluster>)> {
    match server {
        JsServer::Ours => {
            if storage == Storage::Fresh {
                cluster.psql(
                    DATABASE,
                    "DROP TABLE IF EXISTS documents, automerge_repo_chunks; CHECKPOINT;",
                )?;
            }
            let mut flags = anonymous();
            if let DocumentsPerConnection::AtMost(documents) = bound {
                flags.extend(["--max-documents-per-connection".to_string(), documents.to_string()]);
            }
            let storage = ServerStorage::Postgres(cluster, DATABASE);
            Ok((SyncServer::start(sh, storage, "bench", true, &flags)?, Some(cluster)))
        }
        JsServer::Node => {
            let files = work.join("node-server-storage");
            if storage == Storage::Fresh && files.exists() {
                std::fs::remove_dir_all(&files)?;
            }
            std::fs::create_dir_all(&files)?;
            let mut command = Command::new("node");
            command.arg("node-server.mjs").arg("--storage").arg(&files);
            command.current_dir(project_root().join("examples/sync-client"));
            let log = clusters_dir(sh)?.join("sync-node-server.log");
            Ok((SyncServer::spawn(command, log)?, None))
        }
    }
}

/// Seeds `documents` through `server`, restarts it on the same storage and times a fresh
/// client finding them all; a phase that does not finish is recorded with its reason.
fn first_sync(
    sh: &Shell,
    server: JsServer,
    cluster: &Cluster,
    work: &Path,
    documents: usize,
    runs: &mut FirstSyncRuns,
) -> Result<()> {
    let ids = work.join("first-sync-ids.txt").display().to_string();
    let documents_arg = documents.to_string();
    let phases: [(Storage, &[&str]); 2] = [
        (Storage::Fresh, &["--seed", &documents_arg, "--ids", &ids]),
        (Storage::Kept, &["--find", &ids]),
    ];
    let mut lines = Vec::new();
    for (storage, args) in phases {
        let bound = DocumentsPerConnection::AtMost(documents);
        let (running, _) = start(sh, server, cluster, work, storage, bound)?;
        let mut command = Command::new("node");
        command
            .current_dir(project_root().join("examples/sync-client"))
            .args(["first-sync.mjs", "--server", &running.url])
            .args(args);
        let line = last_line(command, &format!("first-sync.mjs {}", args.join(" ")));
        running.stop()?;
        match line {
            Ok(line) => lines.push(line),
            Err(error) => {
                runs.failures.push(error.to_string());
                return Ok(());
            }
        }
    }
    runs.failed_seeds += number(&lines[0], "failed")? as usize;
    runs.failed_finds += number(&lines[1], "failed")? as usize;
    runs.documents_per_second.push(documents as f64 / number(&lines[1], "seconds")?);
    Ok(())
}

/// bench.mjs's pairs against `server`, which stores in `database` when given.
fn clients(
    server: &SyncServer,
    pairs: usize,
    rounds: usize,
    database: Option<&Cluster>,
) -> Command {
    let mut command = Command::new("node");
    command.current_dir(project_root().join("examples/sync-client")).args([
        "bench.mjs",
        "--server",
        &server.url,
        "--pairs",
        &pairs.to_string(),
        "--rounds",
        &rounds.to_string(),
    ]);
    if let Some(cluster) = database {
        command.arg("--pg").arg(postgres_url(cluster, DATABASE));
    }
    command
}

fn clients_name(pairs: usize) -> String {
    format!("bench.mjs with {pairs} pairs")
}

/// Where the time goes with 100 pairs of JS clients on our server: perf samples the whole
/// machine meanwhile; `dir/profile-100-pairs.md` gets the share of each process and
/// library, then the server's own functions.
pub fn profile(
    sh: &Shell,
    cluster: &Cluster,
    work: &Path,
    provenance: &Provenance,
    dir: &Path,
) -> Result<()> {
    const PAIRS: usize = 100;
    const ROUNDS: usize = 10;
    let (server, _) =
        start(sh, JsServer::Ours, cluster, work, Storage::Fresh, DocumentsPerConnection::Default)?;
    let data = work.join("perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "--all-cpus", "--freq", "499", "--output"])
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting perf (Debian's linux-perf; `cargo xtask setup` installs it)")?;
    let line = last_line(clients(&server, PAIRS, ROUNDS, Some(cluster)), &clients_name(PAIRS));
    let pid = libc::pid_t::try_from(perf.id())?;
    // SAFETY: kill(2) takes plain integers; the child is ours and not yet reaped. perf
    // writes its data on SIGINT.
    unsafe { libc::kill(pid, libc::SIGINT) };
    perf.wait()?;
    let server_pid = server.pid().to_string();
    server.stop()?;
    let samples = samples(&line?)?;
    // perf pads its columns to the longest symbol's width.
    let report = |args: &[&str]| -> Result<String> {
        let text = cmd!(sh, "perf report --input {data} --stdio --no-children {args...}")
            .quiet()
            .read()?;
        Ok(text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n"))
    };
    let machine = report(&["--sort", "comm,dso", "--percent-limit", "1"])?;
    let own = report(&[
        "--pid",
        &server_pid,
        "--percentage",
        "relative",
        "--sort",
        "symbol",
        "--percent-limit",
        "0.5",
    ])?;
    let text = format!(
        "# Where the time goes: {PAIRS} pairs of JS clients on our server\n\n\
         Generated with the README.md beside it; not edited by hand.\n\n{}\n`perf record \
         --all-cpus --freq 499` while examples/sync-client/bench.mjs ran {PAIRS} pairs × \
         {ROUNDS} rounds against the sync server (release) on PostgreSQL; change round trip \
         median {:.1} ms over {} changes. First every process and library's share of the \
         machine's samples, then the sync server's own functions as shares of its \
         samples.\n\n## The machine\n\n```\n{machine}\n```\n\n## The sync server\n\n```\n{own}\n```\n",
        provenance.markdown(),
        median(&samples),
        samples.len()
    );
    std::fs::write(dir.join("profile-100-pairs.md"), text)?;
    Ok(())
}

fn record(runs: &mut JsRuns, line: &str) -> Result<()> {
    let json: serde_json::Value = serde_json::from_str(line)?;
    let count = |field: &str| {
        json[field].as_u64().map(|n| n as usize).with_context(|| format!("no {field} in {line}"))
    };
    let samples = samples(line)?;
    runs.latency.repeat_medians_ms.push(median(&samples));
    runs.latency.samples_ms.extend(samples);
    runs.missing += count("missing")?;
    runs.failed_finds += count("failed_finds")?;
    let rows = json["create_to_row_ms"].as_array().context("no create_to_row_ms")?;
    runs.not_stored += rows.iter().filter(|ms| ms.is_null()).count();
    runs.create_to_row_ms.extend(rows.iter().filter_map(serde_json::Value::as_f64));
    Ok(())
}

/// The report's section on the JS clients.
pub fn report(pairs: &[(usize, usize)], documents: usize, measured: &JsMeasured) -> String {
    let [ours, node] = measured.each_ref().map(|runs| &runs.pairs);
    let mut text = String::new();
    let _ = writeln!(text, "## JS clients: ours against automerge-repo's Node server\n");
    let _ = writeln!(
        text,
        "`@automerge/automerge-repo` 2.5 clients in one Node process \
         (`examples/sync-client/bench.mjs`), every writer and every reader a `Repo` with its \
         own WebSocket, one document per pair, against our server on Postgres (release, \
         anonymous) and against automerge-repo's own server as a user would set it up \
         (`examples/sync-client/node-server.mjs`: `Repo` + `NodeWSServerAdapter` + \
         `NodeFSStorageAdapter`, `sharePolicy` false), alternating. A reader retries its \
         `find` until 10 s after its writer's `create`; one that has not found the document \
         by then is a failed find and sits out the rounds. Each round every writer changes \
         its document at once; each change is timed until its reader has it, and one not \
         there a minute later is missing. Median and p90 over every change of every repeat; \
         the ratio is ours over the Node server's. \"create → row\" is the time from a \
         client's `create` to its document's row in the documents table (median and \
         highest; rows not there 30 s later are counted).\n"
    );
    let mut table = Table::new([
        ("pairs", Align::Right),
        ("connections", Align::Right),
        ("rounds", Align::Right),
        ("ours median ms", Align::Right),
        ("repeats", Align::Right),
        ("p90", Align::Right),
        ("Node median ms", Align::Right),
        ("repeats", Align::Right),
        ("p90", Align::Right),
        ("ratio (medians)", Align::Right),
        ("failed finds ours / Node", Align::Right),
        ("missing changes ours / Node", Align::Right),
        ("create → row median / max ms", Align::Right),
        ("rows not stored", Align::Right),
    ]);
    let mut failures = Vec::new();
    for (at, &(pairs, rounds)) in pairs.iter().enumerate() {
        let (us, them) = (&ours[at], &node[at]);
        for (server, runs) in JsServer::ALL.into_iter().zip([us, them]) {
            for reason in &runs.latency.failures {
                failures.push(format!("- {pairs} pairs on {}: {reason}", server.name()));
            }
        }
        let (_, row_max) = range(&us.create_to_row_ms);
        let cells = [pairs.to_string(), (2 * pairs).to_string(), rounds.to_string()]
            .into_iter()
            .chain(us.latency.cells())
            .chain(them.latency.cells());
        table.row(cells.chain([
            format!("{:.2}x", median(&us.latency.samples_ms) / median(&them.latency.samples_ms)),
            format!("{} / {}", us.failed_finds, them.failed_finds),
            format!("{} / {}", us.missing, them.missing),
            format!("{:.0} / {row_max:.0}", median(&us.create_to_row_ms)),
            us.not_stored.to_string(),
        ]));
    }
    let _ = writeln!(text, "{table}");
    let _ = writeln!(text, "### First sync of {documents} stored documents\n");
    let _ = writeln!(
        text,
        "Clients create {documents} documents through the server, 500 each (one client \
         holding thousands slows down, automerge-repo's own cost), and a second client finds \
         each of them (`examples/sync-client/first-sync.mjs --seed`); the server is restarted \
         on the same storage, and a fresh client finds them all, 50 at a time (`--find`), each \
         find failing after 30 s. Ours runs with `--max-documents-per-connection {documents}`: \
         its default bound, 1,000, would close each client's connection at the 1,001st \
         document. Documents per second of that first sync: median, lowest and highest over \
         the repeats; the ratio is ours over the Node server's median.\n"
    );
    let mut first = Table::new([
        ("server", Align::Left),
        ("documents/s (median)", Align::Right),
        ("min", Align::Right),
        ("max", Align::Right),
        ("ratio", Align::Right),
        ("seeds not found", Align::Right),
        ("first-sync finds failed", Align::Right),
    ]);
    let base = median(&measured[JsServer::Node as usize].first_sync.documents_per_second);
    for (server, runs) in JsServer::ALL.into_iter().zip(measured) {
        let runs = &runs.first_sync;
        for reason in &runs.failures {
            failures.push(format!("- first sync on {}: {reason}", server.name()));
        }
        first.row(
            [server.name().to_string()]
                .into_iter()
                .chain(rate_cells(&runs.documents_per_second, base))
                .chain([runs.failed_seeds.to_string(), runs.failed_finds.to_string()]),
        );
    }
    let _ = writeln!(text, "{first}");
    if !failures.is_empty() {
        let _ = writeln!(
            text,
            "JS runs that did not finish (left out of the figures above):\n\n{}\n",
            failures.join("\n")
        );
    }
    text
}
