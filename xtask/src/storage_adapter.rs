//! The automerge-repo storage adapter of clients/automerge-repo-storage-postgres, in the
//! Node step: its node:test tests on a cluster of their own, with a Rust sync server on
//! the same database, so that the tests' JS server and the Rust server share it.

use anyhow::Result;
use xshell::{cmd, Shell};

use crate::cluster::Cluster;
use crate::postgres::PgMajor;
use crate::project_root;
use crate::run::{start_with_samples, Fresh, DATABASE};
use crate::sync::{self, postgres_url, ServerStorage, SyncServer};
use crate::util::{note, npm_dependencies, Counts};

/// The adapter's npm package, relative to the project's root.
const PACKAGE: &str = "clients/automerge-repo-storage-postgres";

/// The adapter's tests' counts; `None` without Node.js.
pub fn checks(sh: &Shell, major: PgMajor) -> Result<Option<Counts>> {
    if !npm_dependencies(sh, PACKAGE)? {
        return Ok(None);
    }
    sync::build_server(false)?;
    let cluster = start_with_samples(Cluster::new(sh, major, "adapter")?, Fresh::Yes)?;
    let counts = tests_beside_server(sh, &cluster);
    cluster.stop()?;
    counts.map(Some)
}

/// Runs the tests (their progress shown as they run), a Rust server on the database
/// meanwhile, and counts them from their TAP report.
fn tests_beside_server(sh: &Shell, cluster: &Cluster) -> Result<Counts> {
    let storage = ServerStorage::Postgres(cluster, DATABASE);
    let server = SyncServer::start(sh, storage, "adapter", false, &sync::anonymous())?;
    let report = project_root().join("target/storage-adapter-tests.tap");
    if report.exists() {
        std::fs::remove_file(&report)?;
    }
    let _dir = sh.push_dir(PACKAGE);
    let ran = cmd!(
        sh,
        "node --test --test-concurrency=1 --test-timeout=120000 --test-force-exit
              --test-reporter=spec --test-reporter-destination=stdout
              --test-reporter=tap --test-reporter-destination={report}"
    )
    .env("DATABASE_URL", postgres_url(cluster, DATABASE))
    .env("SYNC_SERVER_URL", &server.url)
    .run();
    // The top-level test points and the plan: node's summary comments may not reach the
    // file before a forced exit.
    let tap = std::fs::read_to_string(&report).unwrap_or_default();
    let points = |prefix: &str| tap.lines().filter(|line| line.starts_with(prefix)).count();
    let (passed, failed) = (points("ok "), points("not ok "));
    let planned = tap.lines().find_map(|line| line.strip_prefix("1..")?.parse::<usize>().ok());
    let counts = if planned == Some(passed + failed) && (ran.is_ok() || failed > 0) {
        Counts { passed, failed }
    } else {
        // No plan, or node failed with no failing test: the run itself broke.
        Counts { passed, failed: failed + 1 }
    };
    if counts.failed > 0 {
        note(format!(
            "the storage adapter's tests failed; the Rust server's log: {}",
            server.log.display()
        ));
    }
    Ok(counts)
}
