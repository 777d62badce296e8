//! What Citus runs on the workers: the GIN index of the shards, and merge_agg's partial
//! aggregate.

use anyhow::{ensure, Result};
use cluster_tests::CITUS_DATABASE;

use super::{coordinator, same_as_one_node};

#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn the_gin_index_is_used_on_the_workers() -> Result<()> {
    let plan = coordinator()?.psql(
        CITUS_DATABASE,
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
#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn merge_agg_runs_partially_on_the_workers_and_combines_on_the_coordinator() -> Result<()> {
    let coordinator = coordinator()?;
    let plan = coordinator
        .psql(CITUS_DATABASE, "EXPLAIN (VERBOSE, COSTS OFF) SELECT merge_agg(doc) FROM docs;")?;
    ensure!(
        plan.contains("worker_binary_partial_agg(") && plan.contains("coord_binary_combine_agg("),
        "merge_agg is not pushed down:\n{plan}"
    );
    same_as_one_node(
        &coordinator,
        "SELECT automerge_heads(merge_agg(doc)), merge_agg(doc)::jsonb FROM {table};\n\
         SELECT doc->>'status', automerge_heads(merge_agg(doc)) FROM {table} GROUP BY 1 ORDER BY 1;",
    )
}
