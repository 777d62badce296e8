//! `cargo xtask test`'s `citus` step, per major: pg_automerge on Citus, a coordinator and
//! two workers on loopback, each a cluster of its own. An older release is installed first
//! and `ALTER EXTENSION … UPDATE` must reach every node; then a distributed table and a
//! reference table of documents, beside a plain table of the same documents on the
//! coordinator, which stands for a single node. Each check is named and counted.

use anyhow::{ensure, Context, Result};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use xshell::Shell;

use crate::cluster::Cluster;
use crate::doc_examples;
use crate::install::{self, PgInstall};
use crate::postgres::PgMajor;
use crate::project_root;
use crate::util::{note, Checks, Counts};
use cluster_tests::line_differences;
use cluster_tests::versions;

mod notifications;
mod writers;

/// The database every node serves: Citus needs the same name on each.
pub const DATABASE: &str = "citus_documents";
/// Fewer shards than Citus's 32: as many writers' rows still land on different shards, and
/// creating, moving and rebalancing them is quicker.
const SHARDS: usize = 8;
/// Documents in the distributed table and in its single-node twin.
pub const DOCUMENTS: i64 = 48;
/// The release the step installs first, to upgrade from.
const OLDER_RELEASE: &str = "0.4.0";

/// The coordinator and its two workers, each a cluster of its own under `target/`.
pub struct Nodes {
    pub coordinator: Cluster,
    pub workers: [Cluster; 2],
}

impl Nodes {
    /// Starts the three clusters named `citus-<purpose>-…` afresh, with Citus created in
    /// `DATABASE` on each and the workers added to the coordinator.
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
            cluster.psql("postgres", &format!("CREATE DATABASE {DATABASE};"))?;
            cluster.psql(DATABASE, "CREATE EXTENSION citus;")?;
        }
        let mut add_nodes = format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {});\n",
            nodes.coordinator.port
        );
        for worker in &nodes.workers {
            add_nodes.push_str(&format!("SELECT citus_add_node('127.0.0.1', {});\n", worker.port));
        }
        nodes.coordinator.psql(DATABASE, &add_nodes)?;
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
    let name = versions::install_script_name(OLDER_RELEASE);
    install::write_file(
        &extension_dir.join(&name),
        versions::install_script(OLDER_RELEASE)?.as_bytes(),
        None,
    )?;
    let nodes = Nodes::start(sh, major, "test")?;
    let outcome = checks(&nodes);
    nodes.stop()?;
    outcome
}

fn checks(nodes: &Nodes) -> Result<Counts> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let coordinator = &nodes.coordinator;

    let mut checks = Checks::default();
    checks.run("ALTER EXTENSION pg_automerge UPDATE on the coordinator reaches every node", || {
        extension_update_reaches_every_node(nodes)
    });
    coordinator.psql(DATABASE, &tables_script())?;
    // The reads first, while the distributed table and its twin hold the same rows.
    checks.run("->>, GIN containment and history answer as on one node", || {
        same_as_one_node(coordinator, READS)
    });
    checks.run("the GIN index is used on the workers", || gin_used_on_workers(coordinator));
    checks.run("merge_agg runs partially on the workers and combines on the coordinator", || {
        merge_agg_pushed_down(coordinator)
    });
    checks.run("count(DISTINCT doc) and GROUP BY doc answer as on one node", || {
        same_as_one_node(coordinator, EQUALITY_READS)
    });
    checks.run(
        "routed doc || change and upserts load on the workers as often as on one node",
        || routed_writes_load_as_on_one_node(nodes),
    );
    checks.run("concurrent writers on many shards lose no change", || {
        runtime.block_on(writers::concurrent_writers(coordinator))
    });
    checks.run(
        "citus_move_shard_placement and rebalance_table_shards carry documents byte for byte",
        || moves_carry_documents(coordinator),
    );
    checks.run("a worker killed with SIGKILL mid-write loses no committed write", || {
        runtime.block_on(writers::worker_crash(nodes))
    });
    checks.run(
        "exactly one notification per distributed write, from the worker, naming the table",
        || runtime.block_on(notifications::notifications(nodes)),
    );
    checks.run(
        "automerge_notify on a reference table refuses writes instead of notifying per node",
        || notifications::reference_table_notify_refused(coordinator),
    );
    let scaling = project_root().join(doc_examples::CITUS_PAGE);
    let examples = doc_examples::check_file(coordinator, &scaling, DATABASE)?;
    note(format!("examples of {}: {examples}", doc_examples::CITUS_PAGE));
    let mut counts = checks.counts;
    counts += examples;
    Ok(counts)
}

fn extension_version(cluster: &Cluster) -> Result<String> {
    let version = cluster.psql(
        DATABASE,
        "\\t on\nSELECT extversion FROM pg_extension WHERE extname = 'pg_automerge';",
    )?;
    Ok(version.trim().to_string())
}

/// Creates the older release on the coordinator (Citus creates it on the workers), writes a
/// document with it, then updates: every node must report the current version.
fn extension_update_reaches_every_node(nodes: &Nodes) -> Result<()> {
    let coordinator = &nodes.coordinator;
    coordinator
        .psql(DATABASE, &format!("CREATE EXTENSION pg_automerge VERSION '{OLDER_RELEASE}';"))?;
    for cluster in nodes.all() {
        let version = extension_version(cluster)?;
        ensure!(
            version == OLDER_RELEASE,
            "port {}: version `{version}` after CREATE",
            cluster.port
        );
    }
    coordinator.psql(DATABASE, "ALTER EXTENSION pg_automerge UPDATE;")?;
    let current = versions::current()?;
    for cluster in nodes.all() {
        let version = extension_version(cluster)?;
        ensure!(version == current, "port {}: version `{version}` after UPDATE", cluster.port);
    }
    Ok(())
}

/// Which document row `id` holds: its own, but rows 1 and 2 hold the same one, so that
/// equality has something to find.
fn document_id(id: i64) -> i64 {
    if id == 2 {
        1
    } else {
        id
    }
}

/// Which of the samples row `id`'s document is made from.
pub fn sample_index(id: i64) -> usize {
    document_id(id) as usize % fixtures::samples().len()
}

/// The document of row `id`: a sample, forked by an actor of its own that sets `n` and a
/// status.
pub fn document(id: i64) -> AutoCommit {
    let sample = &fixtures::samples()[sample_index(id)];
    let id = document_id(id);
    let mut actor = [0u8; 16];
    actor[..8].copy_from_slice(&id.to_be_bytes());
    actor[15] = 1;
    let mut doc = AutoCommit::load(&sample.doc.save())
        .expect("samples load")
        .with_actor(ActorId::from(actor));
    doc.put(ROOT, "n", id).expect("a put on the root");
    doc.put(ROOT, "status", ["draft", "review", "done"][id as usize % 3])
        .expect("a put on the root");
    doc.commit();
    doc
}

/// The distributed table `docs`, its single-node twin `local_docs` (a plain table on the
/// coordinator) with the same rows, and the reference table `templates`.
fn tables_script() -> String {
    let rows: Vec<String> = (1..=DOCUMENTS)
        .map(|id| format!("({id}, '\\x{}')", hex::encode(document(id).save())))
        .collect();
    let templates: Vec<String> = fixtures::samples()
        .iter()
        .map(|sample| format!("('{}', '\\x{}')", sample.name, hex::encode(sample.doc.save())))
        .collect();
    format!(
        "SET citus.shard_count = {SHARDS};\n\
         CREATE TABLE docs (id bigint PRIMARY KEY, doc automerge NOT NULL);\n\
         SELECT create_distributed_table('docs', 'id');\n\
         CREATE INDEX docs_paths ON docs USING gin ((doc::jsonb) jsonb_path_ops);\n\
         CREATE TABLE local_docs (id bigint PRIMARY KEY, doc automerge NOT NULL);\n\
         CREATE INDEX local_docs_paths ON local_docs USING gin ((doc::jsonb) jsonb_path_ops);\n\
         INSERT INTO docs VALUES {rows};\n\
         INSERT INTO local_docs SELECT * FROM docs;\n\
         CREATE TABLE templates (name text PRIMARY KEY, doc automerge NOT NULL);\n\
         SELECT create_reference_table('templates');\n\
         INSERT INTO templates VALUES {templates};\n\
         ANALYZE docs; ANALYZE local_docs;\n",
        rows = rows.join(", "),
        templates = templates.join(", ")
    )
}

/// Loads counted where the write ran: for the plain table on the coordinator's backend, for
/// the distributed one on the worker backend that Citus routed it to (the same connection
/// for every statement of a transaction that touches one shard).
fn routed_writes_load_as_on_one_node(nodes: &Nodes) -> Result<()> {
    let coordinator = &nodes.coordinator;
    let worker_ports: Vec<String> = nodes.workers.iter().map(|w| w.port.to_string()).collect();
    let id = 7;
    let mut client = document(id);
    let heads = client.get_heads();
    client.put(ROOT, "status", "edited")?;
    client.commit();
    let change = hex::encode(client.save_after(&heads));
    client.put(ROOT, "title", "Upserted")?;
    client.commit();
    let save = hex::encode(client.save());
    let writes = [
        (
            "doc || change",
            format!("UPDATE {{table}} SET doc = doc || '\\x{change}'::bytea WHERE id = {id}"),
        ),
        (
            "an upsert of a full save",
            format!(
                "INSERT INTO {{table}} AS t VALUES ({id}, '\\x{save}') \
                 ON CONFLICT (id) DO UPDATE SET doc = t.doc || EXCLUDED.doc"
            ),
        ),
    ];
    let mut figures = Vec::new();
    for (what, write) in writes {
        let local = coordinator.psql(
            DATABASE,
            &format!(
                "\\t on\n\\a\nBEGIN;\nSELECT automerge_memory_reset();\n{};\n\
                 SELECT loads FROM automerge_memory_usage();\nCOMMIT;",
                write.replace("{table}", "local_docs")
            ),
        )?;
        let local: i64 = last_line(&local).parse().context("local loads")?;
        let routed_loads = format!(
            "SELECT (automerge_memory_usage()).loads || ' ' || inet_server_port() FROM docs WHERE id = {id};"
        );
        let distributed = coordinator.psql(
            DATABASE,
            &format!(
                "\\t on\n\\a\nBEGIN;\n{routed_loads}\n{};\n{routed_loads}\nCOMMIT;",
                write.replace("{table}", "docs")
            ),
        )?;
        let lines: Vec<&str> = distributed.lines().filter(|l| !l.trim().is_empty()).collect();
        let parse = |line: &str| -> Result<(i64, String)> {
            let (loads, port) = line.split_once(' ').context("loads and port")?;
            Ok((loads.parse()?, port.to_string()))
        };
        let (before, port) = parse(lines.first().context("no first count")?)?;
        let (after, port_after) = parse(lines.last().context("no last count")?)?;
        ensure!(
            worker_ports.contains(&port) && port == port_after,
            "the loads were counted on port {port} then {port_after}, not on one worker"
        );
        let routed = after - before;
        ensure!(routed == local, "{what}: {routed} loads on the worker, {local} on one node");
        figures.push(format!("{what}: {routed} load(s) on worker :{port}, {local} on one node"));
    }
    note(figures.join("; "));
    same_as_one_node(coordinator, &format!("SELECT id, doc::jsonb FROM {{table}} WHERE id = {id};"))
}

fn last_line(output: &str) -> String {
    output.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_string()
}

/// Runs `sql` with `{table}` as the distributed table and as its single-node twin: the
/// outputs must be the same.
fn same_as_one_node(coordinator: &Cluster, sql: &str) -> Result<()> {
    let distributed = coordinator.psql(DATABASE, &sql.replace("{table}", "docs"))?;
    let local = coordinator.psql(DATABASE, &sql.replace("{table}", "local_docs"))?;
    ensure!(
        distributed == local,
        "the distributed table answers otherwise (- distributed, + one node):\n{}",
        line_differences(&distributed, &local)
    );
    Ok(())
}

const READS: &str = "\
SELECT id, doc->>'title', doc->>'status', (doc->>'n')::int FROM {table} ORDER BY id;
SELECT id FROM {table} WHERE doc::jsonb @> '{\"status\": \"review\"}' ORDER BY id;
SELECT id, automerge_heads(doc), automerge_change_count(doc),
       automerge_to_jsonb(doc, automerge_heads(doc)) = doc::jsonb AS as_of_heads
FROM {table} ORDER BY id;
SELECT t.id, c.hash, c.actor, c.seq FROM {table} t, LATERAL automerge_changes_meta(t.doc) c
ORDER BY t.id, c.hash;
";

const EQUALITY_READS: &str = "\
SELECT count(DISTINCT doc) FROM {table};
SELECT automerge_heads(doc), count(*) FROM {table} GROUP BY doc ORDER BY 1;
";

fn gin_used_on_workers(coordinator: &Cluster) -> Result<()> {
    let plan = coordinator.psql(
        DATABASE,
        // SET LOCAL reaches the workers' sessions with propagate_set_commands = local.
        "SET citus.explain_all_tasks = on;\nSET citus.propagate_set_commands = 'local';\n\
         BEGIN;\nSET LOCAL enable_seqscan = off;\n\
         EXPLAIN (COSTS OFF) SELECT id FROM docs WHERE doc::jsonb @> '{\"status\": \"review\"}';\n\
         COMMIT;",
    )?;
    ensure!(plan.contains("Bitmap Index Scan on docs_paths"), "no GIN scan on the shards:\n{plan}");
    Ok(())
}

/// EXPLAIN VERBOSE shows Citus's partial aggregate on the workers and its combine on the
/// coordinator; the merge, whole and per group, is what one node merges.
fn merge_agg_pushed_down(coordinator: &Cluster) -> Result<()> {
    let plan = coordinator
        .psql(DATABASE, "EXPLAIN (VERBOSE, COSTS OFF) SELECT merge_agg(doc) FROM docs;")?;
    ensure!(
        plan.contains("worker_binary_partial_agg(") && plan.contains("coord_binary_combine_agg("),
        "merge_agg is not pushed down:\n{plan}"
    );
    same_as_one_node(
        coordinator,
        "SELECT automerge_heads(merge_agg(doc)), merge_agg(doc)::jsonb FROM {table};\n\
         SELECT doc->>'status', automerge_heads(merge_agg(doc)) FROM {table} GROUP BY 1 ORDER BY 1;",
    )
}

/// Moves a shard to the other worker by logical replication, then lets the rebalancer even
/// the placements out again: every document's bytes, JSON and heads stay as they were.
fn moves_carry_documents(coordinator: &Cluster) -> Result<()> {
    let fingerprint = "SELECT id, md5(doc::bytea), md5(doc::jsonb::text), automerge_heads(doc) FROM docs ORDER BY id;";
    let before = coordinator.psql(DATABASE, fingerprint)?;
    let placements = "SELECT nodeport, count(*) FROM citus_shards WHERE table_name = 'docs'::regclass GROUP BY 1 ORDER BY 1;";
    let moved = coordinator.psql(
        DATABASE,
        "\\t on\n\\a\n\
         SELECT count(citus_move_shard_placement(s.shardid, '127.0.0.1', s.nodeport, '127.0.0.1', \
                o.nodeport, shard_transfer_mode := 'force_logical')::text) \
         FROM (SELECT shardid, nodeport FROM citus_shards WHERE table_name = 'docs'::regclass ORDER BY shardid LIMIT 1) s, \
              (SELECT DISTINCT nodeport FROM citus_shards WHERE table_name = 'docs'::regclass) o \
         WHERE o.nodeport <> s.nodeport;",
    )?;
    ensure!(moved.trim() == "1", "{} shards moved", moved.trim());
    let after_move = coordinator.psql(DATABASE, fingerprint)?;
    ensure!(
        after_move == before,
        "after the move (- before, + after):\n{}",
        line_differences(&before, &after_move)
    );
    let uneven = coordinator.psql(DATABASE, placements)?;
    coordinator.psql(
        DATABASE,
        "SELECT rebalance_table_shards('docs', shard_transfer_mode := 'force_logical');",
    )?;
    let even = coordinator.psql(DATABASE, placements)?;
    ensure!(uneven != even, "the rebalancer moved nothing:\n{even}");
    let after_rebalance = coordinator.psql(DATABASE, fingerprint)?;
    ensure!(
        after_rebalance == before,
        "after the rebalance (- before, + after):\n{}",
        line_differences(&before, &after_rebalance)
    );
    Ok(())
}
