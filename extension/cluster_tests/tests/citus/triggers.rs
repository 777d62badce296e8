//! Notifications from a distributed table: `automerge_notify` on every shard, listeners on
//! the workers; and the refusal on a reference table, which would notify once per node.

use std::time::Duration;

use anyhow::{ensure, Result};
use cluster_tests::server::Server;
use cluster_tests::CITUS_DATABASE;
use fixtures::row_documents::document;
use tokio_postgres::{AsyncMessage, NoTls};

use super::{connect, coordinator, nodes, note};

/// The channel the notification check listens on.
const CHANNEL: &str = "documents_changed";

/// A listener that hands every notification of `CHANNEL` on `node` to the channel.
async fn listen(
    node: &Server,
) -> Result<(tokio_postgres::Client, tokio::sync::mpsc::UnboundedReceiver<String>)> {
    let (client, mut connection) =
        tokio_postgres::connect(&node.conninfo(CITUS_DATABASE), NoTls).await?;
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = futures_util::StreamExt::next(&mut messages).await {
            if let AsyncMessage::Notification(notification) = message {
                let _ = sender.send(notification.payload().to_string());
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    Ok((client, receiver))
}

/// The trigger is created on the distributed table, which Citus creates on every shard;
/// listeners on the workers (and one on the coordinator, which must hear nothing) count
/// what a batch of writes through the coordinator sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
async fn exactly_one_notification_per_distributed_write_from_the_worker_naming_the_table(
) -> Result<()> {
    let (coordinator, nodes) = (coordinator()?, nodes());
    coordinator.psql(
        CITUS_DATABASE,
        &format!(
            "SET citus.enable_unsafe_triggers = on;\n\
             CREATE TRIGGER docs_notify AFTER INSERT OR UPDATE OR DELETE ON docs \
             FOR EACH ROW EXECUTE FUNCTION automerge_notify('{CHANNEL}', 'doc', 'id');"
        ),
    )?;
    let mut listeners = Vec::new();
    for node in nodes.all() {
        listeners.push(listen(node).await?);
    }
    let client = connect(&coordinator).await?;
    let ids: Vec<i64> = (1..=12).collect();
    for &id in &ids {
        client
            .execute(
                "UPDATE docs SET doc = doc || $1::bytea::automerge WHERE id = $2",
                &[&document(id + 100).save(), &id],
            )
            .await?;
    }
    // A write that changes no document sends nothing.
    client.execute("UPDATE docs SET doc = doc || doc WHERE id = 1", &[]).await?;
    client.execute("INSERT INTO docs VALUES (1000, '\\x')", &[]).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut heard: Vec<Vec<serde_json::Value>> = Vec::new();
    for (_, receiver) in &mut listeners {
        let mut payloads = Vec::new();
        while let Ok(payload) = receiver.try_recv() {
            payloads.push(serde_json::from_str(&payload)?);
        }
        heard.push(payloads);
    }
    ensure!(heard[0].is_empty(), "the coordinator sent {} notifications", heard[0].len());
    let all: Vec<&serde_json::Value> = heard[1..].iter().flatten().collect();
    let mut keys: Vec<i64> = all.iter().filter_map(|p| p["key"]["id"].as_i64()).collect();
    keys.sort();
    let mut wanted = ids.clone();
    wanted.push(1000);
    ensure!(keys == wanted, "notified keys {keys:?}, written {wanted:?}");
    ensure!(
        all.iter().all(|p| p["table"] == "public.docs"),
        "payloads do not all name public.docs: {all:?}"
    );
    note(format!(
        "{} notifications for {} writes: {} from worker 1, {} from worker 2, none from the coordinator",
        all.len(),
        wanted.len() + 1,
        heard[1].len(),
        heard[2].len()
    ));
    coordinator.psql(
        CITUS_DATABASE,
        "DELETE FROM docs WHERE id = 1000;\nSET citus.enable_unsafe_triggers = on;\n\
             DROP TRIGGER docs_notify ON docs;",
    )?;
    Ok(())
}

/// A reference table has a copy on every node, so a trigger there would notify once per
/// node: the write is refused instead.
#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn automerge_notify_on_a_reference_table_refuses_writes_rather_than_notify_per_node() -> Result<()>
{
    let session = coordinator()?.psql_session(
        CITUS_DATABASE,
        &format!(
            "SET citus.enable_unsafe_triggers = on;\n\
             CREATE TRIGGER templates_notify AFTER INSERT OR UPDATE OR DELETE ON templates \
             FOR EACH ROW EXECUTE FUNCTION automerge_notify('{CHANNEL}', 'doc', 'name');\n\
             INSERT INTO templates VALUES ('blank', '\\x');\n\
             DROP TRIGGER templates_notify ON templates;"
        ),
        &[],
    )?;
    ensure!(
        session.text.contains("cannot notify for the reference table public.templates"),
        "the write was not refused:\n{}",
        session.text
    );
    Ok(())
}
