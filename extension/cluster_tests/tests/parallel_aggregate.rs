//! merge_agg run by parallel workers, whose partial states cross process boundaries through
//! the serialize and deserialize functions and meet in the combine function, gives the same
//! document as the serial plan.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use cluster_tests::connect;

#[tokio::test]
async fn a_parallel_merge_agg_equals_the_serial_one() {
    let client = connect().await;
    client
        .batch_execute("DROP TABLE IF EXISTS forks; CREATE TABLE forks (doc automerge NOT NULL)")
        .await
        .unwrap();
    let mut base = AutoCommit::new().with_actor(ActorId::from([0xf0; 16]));
    base.put(ROOT, "title", "forked").unwrap();
    const FORKS: usize = 400;
    for i in 0..FORKS {
        let mut fork = base.fork().with_actor(ActorId::from((i as u128 + 1).to_be_bytes()));
        fork.put(ROOT, format!("k{}", i % 50), i as i64).unwrap();
        client.execute("INSERT INTO forks VALUES ($1::bytea)", &[&fork.save()]).await.unwrap();
    }
    client.batch_execute("ANALYZE forks").await.unwrap();

    let query = "SELECT automerge_heads(merge_agg(doc)) AS heads, merge_agg(doc)::jsonb::text AS json FROM forks";
    client.batch_execute("SET max_parallel_workers_per_gather = 0").await.unwrap();
    let serial = client.query_one(query, &[]).await.unwrap();

    client
        .batch_execute(
            "SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; \
             SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; \
             SET parallel_leader_participation = off",
        )
        .await
        .unwrap();
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("Partial Aggregate") && plan.contains("Workers Launched: 2"), "{plan}");
    let parallel = client.query_one(query, &[]).await.unwrap();

    let heads: Vec<String> = parallel.get("heads");
    assert_eq!(heads.len(), FORKS, "every fork's change is a head");
    assert_eq!(heads, serial.get::<_, Vec<String>>("heads"));
    assert_eq!(parallel.get::<_, String>("json"), serial.get::<_, String>("json"));
    println!("parallel merge_agg: {FORKS} documents, two workers, same heads and jsonb as serial");
}
