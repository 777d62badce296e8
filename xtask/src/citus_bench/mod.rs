//! `cargo xtask citus-bench`: the soak's mix (reads of a field, incremental `||` writes of
//! one change, upserts of a full save) for a fixed time against one node, then against a
//! Citus coordinator and two workers on the same machine, alternating, several times; the
//! report gives the medians and the ratios to the single node measured in the same run,
//! under results/citus-bench-<date>-<commit>/.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use automerge::transaction::Transactable;
use automerge::{AutoCommit, ROOT};
use report_table::{Align, Table};
use tokio_postgres::NoTls;
use xshell::Shell;

use crate::citus;
use crate::cluster::Cluster;
use crate::distributed::{document, Nodes, DATABASE};
use crate::flags::{CitusBenchFlags, SetupFlags};
use crate::install::PgInstall;
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, step};

/// Rows of the table; each connection writes its own share of them.
const DOCUMENTS: i64 = 256;
/// The operations of the mix, in the order each connection cycles through them (the soak's
/// proportions: mostly reads, then incremental writes, a few upserts).
const MIX: [Operation; 10] = [
    Operation::Read,
    Operation::Append,
    Operation::Read,
    Operation::Read,
    Operation::Append,
    Operation::Read,
    Operation::Upsert,
    Operation::Read,
    Operation::Append,
    Operation::Read,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Operation {
    Read,
    Append,
    Upsert,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Read => "read doc->>'title'",
            Operation::Append => "doc \\|\\| change",
            Operation::Upsert => "upsert of a full save",
        }
    }
}

/// One timed run: operations done, and each operation's latencies.
#[derive(Default)]
struct Run {
    operations: usize,
    latencies: BTreeMap<Operation, Vec<Duration>>,
}

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
        let table = "CREATE EXTENSION IF NOT EXISTS pg_automerge;\n\
                     CREATE TABLE docs (id bigint PRIMARY KEY, doc automerge NOT NULL);\n";
        single.psql(DATABASE, table)?;
        nodes
            .coordinator
            .psql(DATABASE, &format!("{table}SELECT create_distributed_table('docs', 'id');\n"))?;
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let duration = Duration::from_secs(self.seconds);
        let mut runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
        for repeat in 1..=self.repeats {
            for (setup, cluster) in [("one node", &single), ("Citus", &nodes.coordinator)] {
                let run = step(&format!("{setup}, run {repeat} of {}", self.repeats), || {
                    runtime.block_on(measure(cluster, self.connections, duration))
                })?;
                note(format!("{} operations", run.operations));
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
        let report = report(&runs, &provenance, self, duration);
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

/// Fills the table afresh, then runs the mix on `connections` connections for `duration`.
async fn measure(cluster: &Cluster, connections: usize, duration: Duration) -> Result<Run> {
    let conninfo = cluster.conninfo(DATABASE);
    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
    tokio::spawn(connection);
    client.batch_execute("TRUNCATE docs").await?;
    for id in 1..=DOCUMENTS {
        client
            .execute("INSERT INTO docs VALUES ($1, $2::bytea)", &[&id, &document(id).save()])
            .await?;
    }
    client.batch_execute("VACUUM ANALYZE docs").await?;
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for c in 0..connections {
        let conninfo = conninfo.clone();
        tasks.push(tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
            tokio::spawn(connection);
            // This connection's rows, and the client's copy of each document.
            let mine: Vec<i64> =
                (1..=DOCUMENTS).filter(|id| *id as usize % connections == c).collect();
            let mut docs: BTreeMap<i64, AutoCommit> =
                mine.iter().map(|&id| (id, document(id))).collect();
            let mut run = Run::default();
            let mut i = 0usize;
            while Instant::now() < deadline {
                let operation = MIX[i % MIX.len()];
                let id = mine[(i / MIX.len() + i) % mine.len()];
                let doc = docs.get_mut(&id).expect("every row of mine has a document");
                let started = Instant::now();
                match operation {
                    Operation::Read => {
                        client
                            .query_one("SELECT doc->>'title' FROM docs WHERE id = $1", &[&id])
                            .await?;
                    }
                    Operation::Append | Operation::Upsert => {
                        let heads = doc.get_heads();
                        doc.put(ROOT, "edits", i as i64)?;
                        doc.commit();
                        if operation == Operation::Append {
                            let change = doc.save_after(&heads);
                            client
                                .execute(
                                    "UPDATE docs SET doc = doc || $1::bytea WHERE id = $2",
                                    &[&change, &id],
                                )
                                .await?;
                        } else {
                            client
                                .execute(
                                    "INSERT INTO docs AS t VALUES ($1, $2::bytea) \
                                     ON CONFLICT (id) DO UPDATE SET doc = t.doc || EXCLUDED.doc",
                                    &[&id, &doc.save()],
                                )
                                .await?;
                        }
                    }
                }
                run.latencies.entry(operation).or_default().push(started.elapsed());
                run.operations += 1;
                i += 1;
            }
            Ok::<_, anyhow::Error>(run)
        }));
    }
    let mut total = Run::default();
    for task in tasks {
        let run = task.await??;
        total.operations += run.operations;
        for (operation, latencies) in run.latencies {
            total.latencies.entry(operation).or_default().extend(latencies);
        }
    }
    Ok(total)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.is_empty() {
        f64::NAN
    } else if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// Per setup: the median over repeats of the throughput and of each operation's median
/// latency.
fn report(
    runs: &BTreeMap<&str, Vec<Run>>,
    provenance: &Provenance,
    flags: &CitusBenchFlags,
    duration: Duration,
) -> String {
    let throughput = |setup: &str| {
        median(runs[setup].iter().map(|r| r.operations as f64 / duration.as_secs_f64()).collect())
    };
    let latency = |setup: &str, operation: Operation| {
        median(
            runs[setup]
                .iter()
                .map(|r| {
                    let ms = r.latencies.get(&operation).map_or_else(Vec::new, |l| {
                        l.iter().map(|d| d.as_secs_f64() * 1000.0).collect()
                    });
                    median(ms)
                })
                .collect(),
        )
    };
    let mut table = Table::new([
        ("measure", Align::Left),
        ("one node", Align::Right),
        ("coordinator + 2 workers", Align::Right),
        ("Citus / one node", Align::Right),
    ]);
    let (one, citus) = (throughput("one node"), throughput("Citus"));
    table.row([
        "operations per second".to_string(),
        format!("{one:.0}"),
        format!("{citus:.0}"),
        format!("{:.2}x", citus / one),
    ]);
    let counts = |setup: &str| {
        runs[setup].iter().map(|r| r.operations.to_string()).collect::<Vec<_>>().join(", ")
    };
    table.row([
        "operations in each run".to_string(),
        counts("one node"),
        counts("Citus"),
        String::new(),
    ]);
    for operation in [Operation::Read, Operation::Append, Operation::Upsert] {
        let (one, citus) = (latency("one node", operation), latency("Citus", operation));
        table.row([
            format!("median latency, {} (ms)", operation.name()),
            format!("{one:.2}"),
            format!("{citus:.2}"),
            format!("{:.2}x", citus / one),
        ]);
    }
    format!(
        "# The soak's mix on one node and on Citus, same machine\n\n\
         Generated by `cargo xtask citus-bench`; do not edit by hand.\n\n\
         {connections} connections run the mix (per ten operations: six reads of \
         `doc->>'title'`, three `doc || change` of one change, one upsert of a full save) on \
         {DOCUMENTS} documents for {seconds}s, against one PostgreSQL node and against a \
         Citus coordinator with two workers, all on this machine; {repeats} runs of each, \
         alternating. Figures are medians over the runs. Every node shares the same cores: \
         this measures what distributing costs (a coordinator hop per statement), not what \
         more machines give.\n\n{table}\n## Provenance\n\n{}",
        provenance.markdown(),
        connections = flags.connections,
        seconds = duration.as_secs(),
        repeats = flags.repeats,
    )
}
