//! `cargo xtask citus-bench`: the soak's mix ([`mix`]) for a fixed time against one node,
//! then against a Citus coordinator and two workers on the same machine, alternating,
//! several times; the report ([`report`]) gives each statement kind's median latency and
//! the ratios to the single node measured in the same run, under
//! results/citus-bench-<date>-<commit>/.

mod cpu;
mod mix;
mod report;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use cluster_tests::CITUS_DATABASE as DATABASE;
use fixtures::row_documents::document;
use xshell::Shell;

use crate::citus;
use crate::cluster::Cluster;
use crate::distributed::Nodes;
use crate::flags::{CitusBenchFlags, SetupFlags};
use crate::install::PgInstall;
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, step};
use fixtures::load_mix::{self, Growth};
use mix::{Connection, Run, DOCUMENTS};

/// The table, and the GIN index of its documents' JSON that the containment queries use
/// (an expression index: Citus distributes it with the table).
const TABLE: &str = "CREATE TABLE docs (id bigint PRIMARY KEY, doc automerge NOT NULL);\n";
const INDEX: &str = "CREATE INDEX docs_paths ON docs USING gin ((doc::jsonb) jsonb_path_ops);\n";

impl CitusBenchFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        let major = self.pg;
        ensure!(citus::MAJORS.contains(&major), "Citus is built for PostgreSQL 17 and 18 here");
        SetupFlags { pg: major.into() }.run(sh)?;
        step(&format!("{major}: install the extension (release build)"), || {
            PgInstall::shared(major).install_extension(sh, true)
        })?;
        let single = Cluster::new(sh, major, "citus-bench-single")?;
        let nodes = Nodes::start(sh, major, "bench")?;
        single.wipe()?;
        single.init()?;
        single.start()?;
        single.psql("postgres", &format!("CREATE DATABASE {DATABASE};"))?;
        let extension = "CREATE EXTENSION IF NOT EXISTS pg_automerge;\n";
        single.psql(DATABASE, &format!("{extension}{TABLE}{INDEX}"))?;
        nodes.coordinator.psql(
            DATABASE,
            &format!("{extension}{TABLE}SELECT create_distributed_table('docs', 'id');\n{INDEX}"),
        )?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            // A thread per connection: one connection's checks do not delay the timing of
            // another's statement.
            .worker_threads(self.connections)
            .enable_all()
            .build()?;
        let duration = Duration::from_secs(self.seconds);
        let mut runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
        let one_node = [(report::ONE_NODE, &single)];
        let citus = [
            (report::COORDINATOR, &nodes.coordinator),
            (report::WORKERS, &nodes.workers[0]),
            (report::WORKERS, &nodes.workers[1]),
        ];
        for repeat in 1..=self.repeats {
            for (setup, servers) in [(report::ONE_NODE, &one_node[..]), (report::CITUS, &citus)] {
                let run = step(&format!("{setup}, run {repeat} of {}", self.repeats), || {
                    runtime.block_on(measure(servers, self.connections, duration))
                })?;
                note(format!("{} statements, every answer checked", run.statements));
                runs.entry(setup).or_default().push(run);
            }
        }
        single.stop()?;
        nodes.stop()?;
        let command = format!(
            "cargo xtask citus-bench --pg {} --repeats {} --seconds {} --connections {}",
            major.number(),
            self.repeats,
            self.seconds,
            self.connections
        );
        let pg_version = std::process::Command::new(major.pg_config()).arg("--version").output()?;
        let provenance = Provenance::collect(
            sh,
            &command,
            &[
                ("PostgreSQL", String::from_utf8_lossy(&pg_version.stdout).trim().to_string()),
                ("Citus", citus::VERSION.to_string()),
            ],
        )?;
        let cores = std::thread::available_parallelism()?.get();
        let report = report::write(&runs, &provenance, self, cores);
        let dir = project_root()
            .join("results")
            .join(format!("citus-bench-{}-{}", provenance.date, provenance.commit));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("report.md"), &report)?;
        println!("{report}");
        note(format!("written to {}", dir.join("report.md").display()));
        Ok(())
    }
}

/// A setup's servers, the one clients connect to first, each under the name the report
/// gives its CPU time (the workers share one).
type Servers<'a> = [(&'static str, &'a Cluster)];

/// Fills the table afresh, runs the mix on `connections` connections for `duration`, and
/// checks that the table holds every row inserted; counts the servers' CPU time until the
/// deadline, while every backend of the run is still there to be counted.
async fn measure(servers: &Servers<'_>, connections: usize, duration: Duration) -> Result<Run> {
    let conninfo = servers[0].1.conninfo(DATABASE);
    let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client.batch_execute("TRUNCATE docs").await?;
    for id in 1..=DOCUMENTS {
        client
            .execute("INSERT INTO docs VALUES ($1, $2::bytea)", &[&id, &document(id).save()])
            .await?;
    }
    client.batch_execute("VACUUM ANALYZE docs").await?;
    let mut opened = Vec::new();
    for worker in 0..connections {
        let ids: Vec<i64> =
            (1..=DOCUMENTS).filter(|&id| mix::owner(id, connections) == worker).collect();
        opened.push(Connection::open(&conninfo, worker, &ids).await?);
    }
    let cpu_before = cpu_used(servers)?;
    let inserts = load_mix::growth(duration.as_secs()) as i64;
    let growth =
        std::sync::Arc::new(Growth::new(Instant::now(), duration, DOCUMENTS, DOCUMENTS + inserts));
    let tasks: Vec<_> = opened
        .into_iter()
        .map(|connection| {
            let growth = growth.clone();
            tokio::spawn(async move { connection.run(&growth).await })
        })
        .collect();
    tokio::time::sleep_until(growth.deadline().into()).await;
    let cpu_after = cpu_used(servers)?;
    let mut total = Run::default();
    for task in tasks {
        total.add(task.await??);
    }
    total.cpu =
        cpu_after.into_iter().map(|(name, after)| (name, after - cpu_before[name])).collect();
    let rows: i64 = client.query_one("SELECT count(*) FROM docs", &[]).await?.get(0);
    ensure!(rows == growth.rows(), "{rows} rows in the table, {} inserted", growth.rows());
    Ok(total)
}

/// The CPU time each named server (or servers) used so far.
fn cpu_used(servers: &Servers<'_>) -> Result<BTreeMap<&'static str, Duration>> {
    let mut used = BTreeMap::new();
    for (name, cluster) in servers {
        *used.entry(*name).or_default() += cpu::used(cluster)?;
    }
    Ok(used)
}
