//! pg_automerge's soak test: a long mixed load of eight long-lived connections against the
//! Docker image (started with testcontainers under a memory limit), sampling the
//! container's memory, each backend's Rust heap, WAL, TOAST and latencies, then checking
//! that no write was lost or duplicated, that every write sent exactly one notification
//! and that nothing failed. `cargo xtask soak` runs it in release and writes the report;
//! `cargo xtask test` runs a short one and the container tests.

pub mod container;
pub mod documents;
mod listener;
mod load;
mod report;
mod sampler;
mod verify;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

pub use verify::Invariant;

/// What a run does. `cargo xtask soak` passes it to the `soak` binary as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The image tag to start (built by `cargo xtask image`).
    pub image: String,
    /// The run's name, in its container's label (`soak-<date>…`, or a test's name).
    pub run: String,
    pub duration_secs: u64,
    /// The container's memory limit, swap included (no swap).
    pub memory_bytes: u64,
    pub connections: usize,
    pub gin_fastupdate: bool,
    /// Whether the background compactor works in the soak's database.
    pub compactor: bool,
    /// `pg_automerge.trim_threshold` and `pg_automerge.max_load_memory`, as settings.
    pub trim_threshold: String,
    pub max_load_memory: String,
    /// The table starts with this many documents and grows to `final_documents`.
    pub initial_documents: usize,
    pub final_documents: usize,
    /// Which documents the table holds.
    pub documents: documents::DocumentSet,
    pub sample_interval_secs: u64,
    /// Where the report goes; none for a run that only checks the invariants.
    pub results_dir: Option<PathBuf>,
    /// For the report: the command, and the machine, toolchain and checkout the caller knows.
    pub command: String,
    pub build: Vec<(String, String)>,
    /// Show a progress bar (not in tests, whose output is captured).
    pub progress: bool,
}

/// What a run found.
pub struct Outcome {
    pub invariants: Vec<Invariant>,
    pub report: Option<PathBuf>,
}

impl Outcome {
    pub fn failed(&self) -> Vec<&Invariant> {
        self.invariants.iter().filter(|i| !i.holds).collect()
    }
}

/// Runs the soak described by `config`.
pub async fn run(config: Config) -> Result<Outcome> {
    let started_at = chrono::Utc::now();
    let catalogue =
        Arc::new(documents::Catalogue::new(config.documents).context("making the fixtures")?);
    let server = container::Server::start(&container::ServerOptions {
        image: config.image.clone(),
        memory_bytes: Some(config.memory_bytes),
        // The image runs the compactor in the soak's database unless told otherwise: an
        // empty database runs none.
        settings: vec![
            ("pg_automerge.trim_threshold".into(), config.trim_threshold.clone()),
            ("pg_automerge.max_load_memory".into(), config.max_load_memory.clone()),
            (
                "pg_automerge.compactor_database".into(),
                if config.compactor { container::DATABASE.into() } else { String::new() },
            ),
        ],
        run: config.run.clone(),
    })
    .await?;
    let setup = server.connect().await?;
    load::create_schema(&setup, &config).await.context("creating the soak table")?;
    let environment = report::Environment::collect(&setup, started_at).await?;

    let listener = listener::Listener::start(&server).await?;
    let state = Arc::new(load::State::new(config.clone(), catalogue.clone()));
    state.seed_initial(&setup).await.context("inserting the initial documents")?;
    let load_peaks =
        report::load_peaks(&setup, &catalogue.one_row_each(config.initial_documents as i64))
            .await
            .context("measuring each document's load")?;

    let begun = Instant::now();
    state.start_clock(begun);
    let deadline = begun + Duration::from_secs(config.duration_secs);
    let mut workers = Vec::new();
    for worker in 0..config.connections {
        let client = server.connect().await?;
        workers.push(tokio::spawn(load::work(worker, client, state.clone())));
    }
    let samples =
        sampler::sample_until(&server, &setup, &state, &listener, begun, deadline).await?;
    let mut final_heaps = Vec::new();
    for worker in workers {
        final_heaps.push(worker.await.context("a worker panicked")??);
    }
    let drained = listener.drain(state.successful_writes(), Duration::from_secs(60)).await;
    let verification = verify::check(&server, &state, &listener, &final_heaps, drained).await?;
    let report = match &config.results_dir {
        Some(dir) => Some(
            report::write(
                dir,
                &setup,
                &environment,
                &config,
                &state,
                &samples,
                &verification,
                &load_peaks,
            )
            .await
            .context("writing the report")?,
        ),
        None => None,
    };
    Ok(Outcome { invariants: verification.invariants, report })
}
