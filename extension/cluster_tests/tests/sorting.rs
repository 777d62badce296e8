//! Sorting and hashing many documents kept out of line reads each one's header about once,
//! and never their bodies: the buffers a sort or a hash aggregate touches are compared with
//! those of a scan that reads every header once, and the order with the heads' own.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use cluster_tests::connect;
use tokio_postgres::{Client, SimpleQueryMessage};

const DOCUMENTS: usize = 10_000;
/// Copies of the first documents, so that equal documents meet in the sort and the hash.
const COPIES: usize = 100;

/// Letters from a fixed linear congruential sequence: text that compresses as prose does
/// not, so that each value is a few TOAST chunks.
fn content() -> String {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..3_000)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            char::from(b'a' + (state >> 59) as u8 % 26)
        })
        .collect()
}

/// Shared buffers the statement touched, TOAST included, from EXPLAIN (ANALYZE, BUFFERS).
async fn buffers(client: &Client, query: &str) -> i64 {
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) {query}");
    // The simple protocol hands the plan over as text (its type is json).
    let plan = client.simple_query(&explain).await.unwrap();
    let plan = plan.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0),
        _ => None,
    });
    let plan: serde_json::Value = serde_json::from_str(plan.expect("a plan")).unwrap();
    let top = &plan[0]["Plan"];
    top["Shared Hit Blocks"].as_i64().unwrap() + top["Shared Read Blocks"].as_i64().unwrap()
}

#[tokio::test]
async fn sorting_and_hashing_read_each_header_about_once() {
    let client = connect().await;
    client
        .batch_execute(
            "DROP TABLE IF EXISTS sorted_docs; CREATE TABLE sorted_docs (id int, doc automerge)",
        )
        .await
        .unwrap();
    let content = content();
    let saves: Vec<Vec<u8>> = (0..DOCUMENTS)
        .map(|i| {
            let mut doc =
                AutoCommit::new().with_actor(ActorId::from((i as u128 + 1).to_be_bytes()));
            doc.put(ROOT, "title", format!("document {i}")).unwrap();
            doc.put(ROOT, "content", content.as_str()).unwrap();
            doc.save()
        })
        .collect();
    for (batch, saves) in saves.chunks(1_000).enumerate() {
        client
            .execute(
                "INSERT INTO sorted_docs SELECT $1::int + n::int - 1, save FROM unnest($2::bytea[]) WITH ORDINALITY u(save, n)",
                &[&((batch * 1_000) as i32), &saves],
            )
            .await
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "INSERT INTO sorted_docs SELECT id + {DOCUMENTS}, doc FROM sorted_docs WHERE id < {COPIES}; \
             ANALYZE sorted_docs"
        ))
        .await
        .unwrap();
    // Every value is out of line, in more than one chunk: a body read would show.
    let toast: String = client
        .query_one("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'sorted_docs'::regclass", &[])
        .await
        .unwrap()
        .get(0);
    let chunks: i64 =
        client.query_one(&format!("SELECT count(*) FROM {toast}"), &[]).await.unwrap().get(0);
    assert!(chunks >= 2 * DOCUMENTS as i64, "only {chunks} TOAST chunks: the values are inline");

    let each_header_once = buffers(&client, "SELECT automerge_heads(doc) FROM sorted_docs").await;
    let sorted = buffers(&client, "SELECT id FROM sorted_docs ORDER BY doc").await;
    // Comparing full values would read two headers per comparison, about 2·log2(n) = 27
    // per row; abbreviated keys read one, and the copies' ties a few more.
    assert!(
        sorted * 10 <= each_header_once * 15,
        "a sort touched {sorted} buffers where reading every header once touches {each_header_once}"
    );
    let heads: Vec<Vec<String>> = client
        .query("SELECT automerge_heads(doc) FROM sorted_docs ORDER BY doc", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(heads.len(), DOCUMENTS + COPIES);
    assert!(heads.is_sorted(), "ORDER BY doc is not the order of the heads");

    client.batch_execute("SET enable_sort = off").await.unwrap();
    let grouping = "SELECT count(*) FROM (SELECT doc FROM sorted_docs GROUP BY doc) g";
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN (COSTS OFF) {grouping}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(plan.iter().any(|line| line.contains("HashAggregate")), "{plan:?}");
    let hashed = buffers(&client, grouping).await;
    assert!(
        hashed * 10 <= each_header_once * 15,
        "grouping touched {hashed} buffers where reading every header once touches {each_header_once}"
    );
    eprintln!(
        "buffers: every header once {each_header_once}, ORDER BY doc {sorted}, GROUP BY doc {hashed}"
    );
    let groups: i64 = client.query_one(grouping, &[]).await.unwrap().get(0);
    assert_eq!(groups, DOCUMENTS as i64);

    client.batch_execute("RESET enable_sort; DROP TABLE sorted_docs").await.unwrap();
}
