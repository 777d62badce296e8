//! The distributed table answers as one node does: its reads, its equality, and the loads
//! its routed writes cost, each against the twin table on the coordinator.

use anyhow::{ensure, Context, Result};
use automerge::transaction::Transactable;
use automerge::ROOT;
use cluster_tests::CITUS_DATABASE;
use fixtures::row_documents::document;

use super::{coordinator, nodes, note, same_as_one_node};

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

#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn arrow_reads_gin_containment_and_history_answer_as_on_one_node() -> Result<()> {
    same_as_one_node(&coordinator()?, READS)
}

#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn count_distinct_doc_and_group_by_doc_answer_as_on_one_node() -> Result<()> {
    same_as_one_node(&coordinator()?, EQUALITY_READS)
}

fn last_line(output: &str) -> String {
    output.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_string()
}

/// Loads counted where the write ran: for the plain table on the coordinator's backend, for
/// the distributed one on the worker backend that Citus routed it to (the same connection
/// for every statement of a transaction that touches one shard).
#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn routed_change_and_upsert_load_on_the_workers_as_often_as_on_one_node() -> Result<()> {
    let coordinator = coordinator()?;
    let worker_ports: Vec<String> = nodes().workers.iter().map(|w| w.port.to_string()).collect();
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
            CITUS_DATABASE,
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
            CITUS_DATABASE,
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
    same_as_one_node(
        &coordinator,
        &format!("SELECT id, doc::jsonb FROM {{table}} WHERE id = {id};"),
    )
}
