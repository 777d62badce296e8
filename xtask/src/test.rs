//! `cargo xtask test`: setup, the core crates' tests, then on each PostgreSQL major the
//! extension's #[pg_test]s, the documentation's SQL examples, the cluster tests and the
//! multi-cluster reliability step (`reliability.rs`), and on the sync server's major its
//! checks and the automerge-repo storage adapter's (`storage_adapter.rs`); on PostgreSQL
//! 17 all of it beside a cluster made as `run` makes its own, which must come through
//! unharmed (`side_by_side.rs`). Prints summary lines per major and a closing
//! `N passed, N failed` line.

use std::process::Command;

use anyhow::{bail, Result};
use xshell::{cmd, Shell};

use std::path::PathBuf;

use crate::bench;
use crate::citus;
use crate::cluster::{checkout_id, Cluster};
use crate::distributed;
use crate::doc_examples;
use crate::flags::{BenchScale, FuzzTarget, SetupFlags, TestFlags, TestStep, DEBOOTSTRAP_BASE};
use crate::fuzz;
use crate::image;
use crate::install::PgInstall;
use crate::package::TestPackages;
use crate::package_install;
use crate::postgres::{cluster_user, PgMajor};
use crate::project_root;
use crate::reliability;
use crate::run::{start_with_samples, Fresh, DATABASE};
use crate::side_by_side;
use crate::soak::{remove_leftover_containers, run_label};
use crate::storage_adapter;
use crate::sync;
use crate::util::{counted, note, npm_dependencies, step, Counts, Skippable};

impl TestFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        SetupFlags { pg: self.pg }.run(sh)?;
        let mut summary: Vec<String> = Vec::new();
        let mut total = Counts::default();
        let runs = |wanted: TestStep| self.only.is_empty() || self.only.contains(&wanted);
        use TestStep::{Citus, Docs, Hostile, Node, Reliability, SideBySide, Snapshots, Sync};

        if runs(TestStep::Lints) {
            let lints = step("lints: clippy on every crate and target, warnings denied", || {
                clippy(self.pg.majors()[0])
            })?;
            summary.push(format!("lints: {lints}"));
            total += lints;
        }

        if runs(TestStep::Core) {
            let core = step("core crates: unit tests and properties", || {
                let mut cargo = Command::new("cargo");
                // The extension's tests need a backend and the snapshots a cluster: both run per major;
                // the soak crate's tests need the Docker image: they run in the Docker step.
                cargo
                    .args(["test", "--no-fail-fast", "--workspace"])
                    .args([
                        "--exclude",
                        "pg_automerge",
                        "--exclude",
                        "cluster_tests",
                        "--exclude",
                        "soak",
                    ])
                    // The load-estimate test prints its estimate/peak table.
                    .args(["--", "--nocapture"])
                    .current_dir(project_root());
                counted(cargo)
            })?;
            summary.push(format!("core crates: {core}"));
            total += core;
        }

        if runs(TestStep::Fuzz) {
            for target in [FuzzTarget::All, FuzzTarget::AlteredWrites] {
                let title =
                    format!("fuzz the core crate for {} ({})", fuzz::BOUNDED_TIME, target.name());
                let fuzzed = step(&title, || fuzz::campaign(fuzz::BOUNDED_TIME, 1, target))?;
                summary.push(format!("fuzz ({}): {}", target.name(), fuzzed.counts));
                total.failed += fuzzed.counts.failures as usize;
            }
        }

        // The snapshots step runs examples/node-client against the server too.
        if runs(TestStep::Node) || runs(TestStep::Estimate) || runs(TestStep::Snapshots) {
            step("Node.js client example: npm dependencies", || {
                npm_dependencies(sh, "examples/node-client")
            })?;
        }
        // The core tests wrote a sample of the values they accepted (issue 14).
        if runs(TestStep::Node) {
            // The payloads that extension/core/tests/wrong_changes.rs accepted load in JS.
            if let Some(samples) =
                step("Node.js: accepted samples load in @automerge/automerge", || {
                    node_checks_written(sh, "load-samples.mjs", "accepted-samples")
                })?
            {
                summary.push(format!("Node.js: accepted samples {samples}"));
                total += samples;
            }
            // The saves extension/core/tests/crafted_saves.rs refused are unsound in JS too.
            if let Some(crafted) = step(
                "Node.js: @automerge/automerge refuses or misreads the crafted saves we refuse",
                || node_checks_written(sh, "crafted-saves.mjs", "crafted-saves"),
            )? {
                summary.push(format!("Node.js: crafted saves {crafted}"));
                total += crafted;
            }
            // What the JS library makes that the core tests hold pg_automerge to.
            if let Some(fixtures) =
                step("Node.js: @automerge/automerge still makes fixtures/js/", || {
                    node_fixtures_are_current(sh)
                })?
            {
                summary.push(format!("Node.js: JS-made fixtures {fixtures}"));
                total += fixtures;
            }
        }

        if runs(TestStep::Estimate) {
            let estimate =
                step("load estimate against measured peaks (release, small and medium)", || {
                    estimate_peaks(sh)
                })?;
            summary.push(format!("load estimate within 1.0-1.5x of the peak: {estimate}"));
            total += estimate;
        }

        for major in self.pg.majors() {
            // The whole step of this major runs beside a cluster made as `run` makes its own.
            let beside = (major == side_by_side::MAJOR && runs(TestStep::SideBySide))
                .then(|| {
                    step(&format!("{major}: a run cluster beside the tests"), || {
                        side_by_side::start(sh)
                    })
                })
                .transpose()?;
            if runs(TestStep::Pgrx) {
                let extension =
                    step(&format!("{major}: extension tests"), || pgrx_tests(sh, major))?;
                summary.push(format!("{major}: extension tests {extension}"));
                total += extension;
            } else if [Docs, Snapshots, Reliability, Hostile, Citus, SideBySide, Sync, Node]
                .into_iter()
                .any(|wanted| {
                    runs(wanted) && (![Sync, Node].contains(&wanted) || major == sync::MAJOR)
                })
            {
                // The extension tests install the build the later steps use; without them,
                // install it here.
                step(&format!("{major}: install the extension (debug build)"), || {
                    PgInstall::shared(major).install_extension(sh, false)
                })?;
            }
            let (docs, snapshots) = (runs(TestStep::Docs), runs(TestStep::Snapshots));
            if docs || snapshots {
                let (examples, cluster) =
                    step(&format!("{major}: documentation examples and cluster tests"), || {
                        cluster_checks(sh, major, docs, snapshots)
                    })?;
                summary.push(format!(
                    "{major}: documentation examples {examples}; cluster tests {cluster}"
                ));
                total += examples;
                total += cluster;
            }
            if runs(TestStep::Reliability) {
                let reliability = step(
                    &format!("{major}: reliability (crashes, replication, dump, upgrades)"),
                    || reliability::run(sh, major),
                )?;
                summary.push(format!(
                    "{}: reliability: {}; crashes survived: {}; upgrades from older releases: {}",
                    major.number(),
                    reliability.counts,
                    reliability.crashes_survived,
                    reliability.upgrades
                ));
                total += reliability.counts;
            }
            if runs(TestStep::Hostile) {
                let hostile =
                    step(&format!("{major}: hostile inputs"), || hostile_inputs(sh, major))?;
                summary.push(format!("{major}: hostile inputs: {hostile}"));
                total += hostile;
            }
            if runs(TestStep::Citus) && citus::MAJORS.contains(&major) {
                if !citus::installed(major)? && !self.only.contains(&TestStep::Citus) {
                    // Only where setup found no Citus tarball (outside the project): said
                    // loudly in the summary rather than failing every other step's run.
                    summary.push(format!(
                        "{major}: Citus: SKIPPED, not installed (setup found no citus-{}.tar.gz)",
                        citus::VERSION
                    ));
                } else {
                    let distributed =
                        step(&format!("{major}: Citus, a coordinator and two workers"), || {
                            distributed::run(sh, major)
                        })?;
                    summary.push(format!("{major}: Citus: {distributed}"));
                    total += distributed;
                }
            }
            if major == sync::MAJOR && runs(TestStep::Sync) {
                let synced = step(&format!("{major}: the sync server"), || sync_checks(sh, major))?;
                summary.push(format!("{major}: sync server: {synced}"));
                total += synced;
            }
            // The storage adapter's tests run a Rust sync server beside its JS one.
            if major == sync::MAJOR && runs(TestStep::Node) {
                let adapter =
                    step(&format!("{major}: Node.js: the automerge-repo storage adapter"), || {
                        storage_adapter::checks(sh, major)
                    })?;
                if let Some(adapter) = adapter {
                    summary.push(format!("{major}: Node.js: storage adapter {adapter}"));
                    total += adapter;
                }
            }
            if let Some(beside) = beside {
                let unharmed = step(
                    &format!("{major}: the run cluster beside the tests is unharmed"),
                    || side_by_side::check(beside),
                )?;
                summary.push(format!("{major}: a run cluster beside the tests: {unharmed}"));
                total += unharmed;
            }
        }

        // Every bench runs once on the small fixtures: no timing is checked, only that each
        // still works against the extension as built.
        let major = self.pg.majors()[0];
        if runs(TestStep::Bench) {
            let benches = step("benchmarks, quick (a smoke check)", || {
                bench::measure_and_report(sh, major, BenchScale::Small, 2, None)
            })?;
            summary.push(format!("benchmarks (quick, {major}): {benches} ran"));
            total += Counts { passed: benches, failed: 0 };
            let breakdown = step("the load breakdown, quick (a smoke check)", || {
                bench::load_breakdown::run(sh, BenchScale::Small)
            })?;
            summary.push(format!("load breakdown (quick): {breakdown} ran"));
            total += Counts { passed: breakdown, failed: 0 };
        }
        if runs(TestStep::Docker) {
            let docker =
                step("Docker: packages, images, container tests and a short soak", || {
                    docker_checks(sh, &self.pg.majors())
                })?;
            summary.push(match docker {
                Skippable::Ran(counts) => {
                    total += counts;
                    format!("Docker: container tests and short soak {counts}")
                }
                Skippable::Skipped(reason) => {
                    format!("Docker: SKIPPED, no Docker engine can run here ({reason})")
                }
            });
        }

        println!();
        for line in &summary {
            println!("{line}");
        }
        println!("{total}");
        if total.failed > 0 {
            bail!("{} test(s) failed", total.failed);
        }
        Ok(())
    }
}

/// `cargo clippy -- -D warnings` over the workspace, the extension built for `major`: one
/// pass, or one failure with clippy's messages shown.
fn clippy(major: PgMajor) -> Result<Counts> {
    let feature = format!("pg{}", major.number());
    let runs: [&[&str]; 2] = [
        &["--workspace", "--exclude", "pg_automerge"],
        &["-p", "pg_automerge", "--no-default-features", "--features", &feature],
    ];
    for args in runs {
        let status = Command::new("cargo")
            .arg("clippy")
            .args(args)
            .args(["--all-targets", "--", "-D", "warnings"])
            .current_dir(project_root())
            .status()?;
        if !status.success() {
            return Ok(Counts { passed: 0, failed: 1 });
        }
    }
    Ok(Counts { passed: 1, failed: 0 })
}

/// `cargo pgrx test`, which installs the tests' build into the major's shared install
/// (as root with `sudo cp`, which rewrites a file in place): the library is unlinked first,
/// so that servers that mapped it keep their copy and the install makes a new file.
fn pgrx_tests(sh: &Shell, major: PgMajor) -> Result<Counts> {
    PgInstall::shared(major).unlink_library()?;
    let mut pgrx = Command::new("cargo");
    pgrx.args(["pgrx", "test", &major.pgrx_name()])
        .current_dir(project_root().join("extension/pg_automerge"));
    if let Some(user) = cluster_user() {
        // pgrx puts its socket in this directory: keep the path short.
        let pgdata = PathBuf::from(format!("/tmp/pgam-{}", checkout_id()));
        if pgdata.exists() {
            std::fs::remove_dir_all(&pgdata)?;
        }
        std::fs::create_dir_all(&pgdata)?;
        cmd!(sh, "chown {user} {pgdata}").quiet().run()?;
        pgrx.args(["--runas", user, "--pgdata"]).arg(&pgdata);
    }
    counted(pgrx)
}

/// Runs `script` of examples/node-client over the directory `dir` (under target/) that a
/// core test wrote: one pass for the whole directory, or a failure. `None` without Node.js.
fn node_checks_written(sh: &Shell, script: &str, dir: &str) -> Result<Option<Counts>> {
    if cmd!(sh, "node --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        note(format!("Node.js is not installed: {script} does not run"));
        return Ok(None);
    }
    let dir = project_root().join("target").join(dir);
    let _dir = sh.push_dir("examples/node-client");
    let passed = cmd!(sh, "node {script} {dir}").run().is_ok();
    Ok(Some(Counts { passed: usize::from(passed), failed: usize::from(!passed) }))
}

/// What each script in examples/node-client writes, as committed in fixtures/js/: the
/// diffs `automerge_diff` must return, and the changes the writes without a load must take.
const JS_FIXTURES: [(&str, &str); 2] =
    [("diff-fixtures.mjs", "diffs.json"), ("edit-fixtures.mjs", "edits.json")];

/// Makes the JS-made fixtures again with `@automerge/automerge` and compares them with the
/// committed ones in fixtures/js/: one pass each, or a failure that says to regenerate
/// them. `None` without Node.js.
fn node_fixtures_are_current(sh: &Shell) -> Result<Option<Counts>> {
    if cmd!(sh, "node --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        note("Node.js is not installed: the JS-made fixtures are not made again");
        return Ok(None);
    }
    let mut counts = Counts::default();
    for (script, fixture) in JS_FIXTURES {
        let committed = std::fs::read_to_string(project_root().join("fixtures/js").join(fixture))?;
        let _dir = sh.push_dir("examples/node-client");
        let made = cmd!(sh, "node {script}").read()?;
        if made.trim_end() == committed.trim_end() {
            counts.passed += 1;
        } else {
            counts.failed += 1;
            note(format!(
                "fixtures/js/{fixture} differs from what @automerge/automerge makes now: run \
                 `node {script} > ../../fixtures/js/{fixture}` in examples/node-client and \
                 review the change"
            ));
        }
    }
    Ok(Some(counts))
}

/// The load estimate against measured peaks in a release build, on the generated
/// documents at the small and medium scales (the medium ones cached in target/fixtures)
/// and on small documents made by `@automerge/automerge` 3 when Node.js is there: the
/// estimate/peak table of docs/operations.md, at those scales. The operations scale takes
/// minutes more: `ESTIMATE_PEAKS_SCALES=small,medium,operations` by hand.
fn estimate_peaks(sh: &Shell) -> Result<Counts> {
    let mut cargo = Command::new("cargo");
    cargo
        .args(["test", "--release", "-p", "pg_automerge_core", "--test", "estimate_peaks"])
        .args(["realistic", "--", "--nocapture"])
        .env("ESTIMATE_PEAKS_SCALES", "small,medium")
        .current_dir(project_root());
    if let Some(dir) = js_fixtures_small(sh)? {
        cargo.env("ESTIMATE_PEAKS_JS_FIXTURES", dir);
    }
    counted(cargo)
}

/// Small documents made by `@automerge/automerge` 3 (examples/node-client/
/// estimate-fixtures.mjs), made now into target/js-fixtures-small, relative to the project
/// root; `None` without Node.js.
fn js_fixtures_small(sh: &Shell) -> Result<Option<&'static str>> {
    if cmd!(sh, "node --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        note("Node.js is not installed: no documents made by @automerge/automerge");
        return Ok(None);
    }
    let dir = project_root().join("target/js-fixtures-small");
    let script = project_root().join("examples/node-client/estimate-fixtures.mjs");
    cmd!(sh, "node {script} {dir} 1000").quiet().run()?;
    Ok(Some("target/js-fixtures-small"))
}

/// Runs the SQL examples of README.md and docs/, then the insta snapshots of every
/// function's psql output, on a fresh database with the sample documents, against the
/// extension that the pgrx tests just installed.
fn cluster_checks(
    sh: &Shell,
    major: PgMajor,
    docs: bool,
    snapshots: bool,
) -> Result<(Counts, Counts)> {
    let cluster = Cluster::new(sh, major, "test")?
        .with_compactor(cluster_tests::COMPACTOR_DATABASE)
        .with_setting("pg_automerge.compactor_naptime", "100ms");
    let cluster: Cluster = start_with_samples(cluster, Fresh::Yes)?;
    // The compactor's database is made after the server starts: its worker fails to connect
    // until then, and the postmaster starts it again.
    let compactor = cluster_tests::COMPACTOR_DATABASE;
    cluster.psql("postgres", &format!("CREATE DATABASE {compactor};"))?;
    cluster.psql(compactor, "CREATE EXTENSION pg_automerge;")?;
    let examples = if docs { doc_examples::check_all(&cluster) } else { Ok(Counts::default()) };
    let checks = examples.and_then(|examples| {
        if !snapshots {
            return Ok((examples, Counts::default()));
        }
        let mut snapshots = Command::new("cargo");
        snapshots
            .args(["test", "--no-fail-fast", "--package", "cluster_tests", "--", "--nocapture"])
            // The hostile inputs run as their own step, on a cluster of their own.
            .args(["--skip", HOSTILE_PREFIX])
            .env(cluster_tests::PSQL_ENV, cluster.psql_path())
            .env(cluster_tests::CONNECTION_ENV, cluster.conninfo(DATABASE))
            .env(cluster_tests::SERVER_LOG_ENV, &cluster.log_file)
            .current_dir(project_root());
        Ok((examples, counted(snapshots)?))
    });
    cluster.stop()?;
    checks
}

/// The tests of `cluster_tests/tests/hostile_inputs.rs` are named with this prefix.
const HOSTILE_PREFIX: &str = "hostile_";

/// Sends hostile input (damaged bytes, deep nesting, inputs that describe millions of
/// operations or inflate to gigabytes, cancels) through a fresh cluster of its own, one
/// test at a time, the last of which reads the server log for backends that died.
fn hostile_inputs(sh: &Shell, major: PgMajor) -> Result<Counts> {
    let cluster: Cluster = start_with_samples(Cluster::new(sh, major, "hostile")?, Fresh::Yes)?;
    let mut tests = Command::new("cargo");
    tests
        .args(["test", "--no-fail-fast", "--package", "cluster_tests", "--test", "hostile_inputs"])
        .args(["--", "--test-threads=1", HOSTILE_PREFIX])
        .env(cluster_tests::PSQL_ENV, cluster.psql_path())
        .env(cluster_tests::CONNECTION_ENV, cluster.conninfo(DATABASE))
        .env(cluster_tests::SERVER_LOG_ENV, &cluster.log_file)
        .current_dir(project_root());
    let counts = counted(tests);
    cluster.stop()?;
    counts
}

/// Builds the Debian packages and the images of `majors` with debug builds of the extension
/// and the sync server (no release build in the tests), installs the packages as a user
/// does (package_install.rs), and runs the soak crate's tests against the images: the
/// container tests (every major's image, the sync server's image against the extension's)
/// and a 2.5-minute soak on the soak's major. Skipped where no Docker engine can run.
fn docker_checks(sh: &Shell, majors: &[PgMajor]) -> Result<Skippable<Counts>> {
    if let Skippable::Skipped(reason) = image::ensure_docker(sh)? {
        note(format!("skipping the container tests: {reason}"));
        return Ok(Skippable::Skipped(reason));
    }
    let run = run_label("container-tests");
    remove_leftover_containers(sh, &run)?;
    let packages = step("the Debian packages (debug)", || TestPackages::build(sh, majors))?;
    let mut counts = package_install::checks(sh, &packages, &run)?;
    let mut tags = Vec::new();
    for (major, deb) in &packages.current {
        tags.push((*major, image::build_with_package(sh, *major, DEBOOTSTRAP_BASE, true, deb)?));
    }
    // The soak and the other container tests run on the soak's major, tested or not.
    if !majors.contains(&image::IMAGE_MAJOR) {
        tags.push((
            image::IMAGE_MAJOR,
            image::build(sh, image::IMAGE_MAJOR, DEBOOTSTRAP_BASE, true)?,
        ));
    }
    let every_major: Vec<String> =
        tags.iter().map(|(major, tag)| format!("{}={tag}", major.number())).collect();
    let sync_server_tag = image::build_sync_server(sh, DEBOOTSTRAP_BASE, true)?;
    let mut tests = Command::new("cargo");
    tests
        .args(["test", "--no-fail-fast", "--package", "soak", "--", "--nocapture"])
        .env("PG_AUTOMERGE_IMAGE", image::tag(image::IMAGE_MAJOR, true))
        .env("PG_AUTOMERGE_IMAGES", every_major.join(","))
        .env("PG_AUTOMERGE_SYNC_SERVER_IMAGE", &sync_server_tag)
        .env("PG_AUTOMERGE_RUN", &run)
        .current_dir(project_root());
    let container_tests = counted(tests);
    remove_leftover_containers(sh, &run)?;
    counts += container_tests?;
    Ok(Skippable::Ran(counts))
}

/// The sync server's checks, on a fresh cluster of their own with the sample documents.
fn sync_checks(sh: &Shell, major: PgMajor) -> Result<Counts> {
    let cluster: Cluster = start_with_samples(Cluster::new(sh, major, "sync")?, Fresh::Yes)?;
    let counts = sync::checks(sh, &cluster, DATABASE);
    cluster.stop()?;
    counts
}
