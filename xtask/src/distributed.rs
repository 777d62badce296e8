//! `cargo xtask test`'s `citus` step, per major: provisions a Citus coordinator and two
//! workers on loopback, each a cluster of its own, with Citus created on each and the
//! workers added to the coordinator; puts the older release's install script beside the
//! current version's; runs the Citus tests (`extension/cluster_tests/tests/citus/`: the
//! upgrade on every node, reads and loads as on one node, pushdown, shard moves, concurrent
//! writers, a worker crash, notifications) with `cargo test`, one at a time; then checks
//! docs/scaling.md's examples on the coordinator the tests left.

use std::process::Command;

use anyhow::Result;
use cluster_tests::{
    versions, CITUS_COORDINATOR, CITUS_DATABASE, CITUS_OLDER_RELEASE, CITUS_WORKERS,
};
use xshell::Shell;

use crate::cluster::Cluster;
use crate::doc_examples;
use crate::install::{self, PgInstall};
use crate::postgres::PgMajor;
use crate::project_root;
use crate::util::{note, run_tests, Counts};

/// The coordinator and its two workers, each a cluster of its own under `target/`.
pub struct Nodes {
    pub coordinator: Cluster,
    pub workers: [Cluster; 2],
}

impl Nodes {
    /// Starts the three clusters named `citus-<purpose>-…` afresh, with Citus created in
    /// `CITUS_DATABASE` on each and the workers added to the coordinator.
    pub fn start(sh: &Shell, major: PgMajor, purpose: &str) -> Result<Nodes> {
        let node = |name: &str| -> Result<Cluster> {
            Ok(Cluster::new(sh, major, &format!("citus-{purpose}-{name}"))?
                .with_setting("shared_preload_libraries", "citus,pg_automerge")
                // Shard moves copy by logical replication.
                .with_setting("wal_level", "logical")
                // Writes that touch several shards commit with two-phase commit.
                .with_setting("max_prepared_transactions", "20"))
        };
        let nodes = Nodes {
            coordinator: node("coordinator")?,
            workers: [node("worker-1")?, node("worker-2")?],
        };
        for cluster in nodes.all() {
            cluster.wipe()?;
            cluster.init()?;
            cluster.start()?;
            cluster.psql("postgres", &format!("CREATE DATABASE {CITUS_DATABASE};"))?;
            cluster.psql(CITUS_DATABASE, "CREATE EXTENSION citus;")?;
        }
        let mut add_nodes = format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {});\n",
            nodes.coordinator.port
        );
        for worker in &nodes.workers {
            add_nodes.push_str(&format!("SELECT citus_add_node('127.0.0.1', {});\n", worker.port));
        }
        nodes.coordinator.psql(CITUS_DATABASE, &add_nodes)?;
        Ok(nodes)
    }

    pub fn all(&self) -> [&Cluster; 3] {
        [&self.coordinator, &self.workers[0], &self.workers[1]]
    }

    pub fn stop(&self) -> Result<()> {
        for cluster in self.all().into_iter().rev() {
            cluster.stop()?;
        }
        Ok(())
    }
}

pub fn run(sh: &Shell, major: PgMajor) -> Result<Counts> {
    // pgrx installs the current version and the upgrade scripts; the older release's install
    // script is put beside them, as the reliability step does.
    let extension_dir = PgInstall::shared(major).extension_dir()?;
    let name = versions::install_script_name(CITUS_OLDER_RELEASE);
    install::write_file(
        &extension_dir.join(&name),
        versions::install_script(CITUS_OLDER_RELEASE)?.as_bytes(),
        None,
    )?;
    let nodes = Nodes::start(sh, major, "test")?;
    let outcome = tests_then_examples(&nodes);
    nodes.stop()?;
    outcome
}

fn tests_then_examples(nodes: &Nodes) -> Result<Counts> {
    let mut tests = Command::new("cargo");
    tests
        .args(["test", "--no-fail-fast", "--package", "cluster_tests", "--test", "citus"])
        // They share the nodes and tables: one at a time, in the order of their names.
        .args(["--", "--ignored", "--test-threads=1", "--nocapture"])
        .current_dir(project_root());
    tests.envs(nodes.coordinator.env(CITUS_COORDINATOR));
    for (worker, role) in nodes.workers.iter().zip(CITUS_WORKERS) {
        tests.envs(worker.env(role));
    }
    let mut counts = run_tests(tests)?.counts;
    let scaling = project_root().join(doc_examples::CITUS_PAGE);
    let examples = doc_examples::check_file(&nodes.coordinator, &scaling, CITUS_DATABASE)?;
    note(format!("examples of {}: {examples}", doc_examples::CITUS_PAGE));
    counts += examples;
    Ok(counts)
}
