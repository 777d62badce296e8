//! `cargo xtask test`'s reliability step, per major: provisions the clusters of the
//! reliability tests (`extension/cluster_tests/tests/reliability/`, which hold the
//! scenarios: crashes, a hot standby, logical replication, dump and restore, upgrades) and
//! runs them with `cargo test`, one at a time.

use std::process::Command;

use anyhow::{Context, Result};
use cluster_tests::{versions, RELIABILITY_PRIMARY, RELIABILITY_STANDBY, RELIABILITY_SUBSCRIBER};
use xshell::Shell;

use crate::cluster::Cluster;
use crate::install;
use crate::postgres::PgMajor;
use crate::project_root;
use crate::util::{note, run_tests, Counts};

/// The tests whose names the step reads: it counts the crashes survived and the upgrades
/// by them, and skips the version checks that do not apply yet.
pub const CRASH_TESTS: [&str; 2] = [
    "crashes::backend_killed_mid_write_loses_no_acknowledged_write",
    "crashes::postmaster_killed_mid_write_loses_no_acknowledged_write",
];
pub const FROZEN_SCRIPT_TEST: &str =
    "upgrades::frozen_script_of_the_current_version_creates_what_create_extension_creates";
pub const UPGRADE_TEST: &str =
    "upgrades::each_older_release_upgrades_to_the_current_one_and_its_documents_read_and_merge";

/// What the step found: the tests' counts, how many crashes the cluster came back from with
/// every acknowledged write in place, and how many older releases upgraded.
pub struct Outcome {
    pub counts: Counts,
    pub crashes_survived: usize,
    pub upgrades: usize,
}

pub fn run(sh: &Shell, major: PgMajor) -> Result<Outcome> {
    let primary =
        Cluster::new(sh, major, "reliability-primary")?.with_setting("wal_level", "logical");
    // What the standby must show is what it replays: its own durability is not under test,
    // and without fsync it skips syncing the copied data directory as it starts. The tests
    // make its data directory by pg_basebackup.
    let standby = Cluster::new(sh, major, "reliability-standby")?.with_setting("fsync", "off");
    let subscriber = Cluster::new(sh, major, "reliability-subscriber")?;
    for cluster in [&primary, &subscriber] {
        cluster.wipe()?;
        cluster.init()?;
        cluster.start()?;
    }
    let mut tests = Command::new("cargo");
    tests
        .args(["test", "--no-fail-fast", "--package", "cluster_tests", "--test", "reliability"])
        // They share the clusters: one at a time, in the order of their names.
        .args(["--", "--ignored", "--test-threads=1", "--nocapture"])
        .current_dir(project_root());
    for (cluster, role) in [
        (&primary, RELIABILITY_PRIMARY),
        (&standby, RELIABILITY_STANDBY),
        (&subscriber, RELIABILITY_SUBSCRIBER),
    ] {
        tests.envs(cluster.env(role));
    }
    let older = provide_releases(&primary, &mut tests)?;
    let run = run_tests(tests);
    for cluster in [&subscriber, &standby, &primary] {
        cluster.stop()?;
    }
    let run = run?;
    let passed = |name: &str| run.passed.iter().any(|test| test == name);
    Ok(Outcome {
        counts: run.counts,
        crashes_survived: CRASH_TESTS.iter().filter(|test| passed(test)).count(),
        upgrades: if passed(UPGRADE_TEST) { older } else { 0 },
    })
}

/// Puts the frozen install script of every older release beside the current version's
/// (pgrx installs the current version's script and the upgrade scripts, not the install
/// scripts of older versions), and skips the version checks that do not apply yet: they are
/// not counted then. Returns how many older releases the upgrade test upgrades from.
fn provide_releases(primary: &Cluster, tests: &mut Command) -> Result<usize> {
    let current = versions::current()?;
    let released = versions::released();
    if !released.contains(&current) {
        note(format!("not checked: {current} is not released, so it has no frozen script yet"));
        tests.args(["--skip", FROZEN_SCRIPT_TEST]);
    }
    let older: Vec<&String> = released.iter().filter(|v| **v != current).collect();
    if older.is_empty() {
        note(format!(
            "not checked: {current} is the only release, so there is nothing to upgrade from yet"
        ));
        tests.args(["--skip", UPGRADE_TEST]);
    }
    let upgrades = versions::upgrades()?;
    let extension_dir = primary.install.extension_dir()?;
    for version in &older {
        let chain = versions::upgrade_path(version, &current, &upgrades)
            .with_context(|| format!("no upgrade scripts lead from {version} to {current}"))?;
        note(format!("upgrading through {}", chain.join(" -> ")));
        let name = versions::install_script_name(version);
        let script = versions::install_script(version)?;
        install::write_file(&extension_dir.join(&name), script.as_bytes(), None)
            .with_context(|| format!("installing {name}"))?;
    }
    Ok(older.len())
}
