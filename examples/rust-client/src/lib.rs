//! The client loop of an app that keeps Automerge documents in pg_automerge:
//!
//! 1. create a document locally and upsert its full save;
//! 2. edit locally, and send only the changes made since the heads the server last
//!    confirmed (`doc || $1::bytea`);
//! 3. meanwhile another replica edits the same row;
//! 4. read back what the server has (`doc::bytea`), merge it in, and check that the local
//!    replica and the server agree on heads and JSON.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, AutoSerde, ChangeHash, ObjType, ReadDoc, ROOT};
use tokio_postgres::{Client, NoTls};

pub struct Report {
    pub changes_sent: usize,
    pub bytes_sent: usize,
    pub heads: Vec<String>,
}

fn hex(heads: &[ChangeHash]) -> Vec<String> {
    heads.iter().map(ChangeHash::to_string).collect()
}

async fn server_heads(client: &Client, id: i32) -> Result<Vec<String>, tokio_postgres::Error> {
    let row = client
        .query_one("SELECT automerge_heads(doc) FROM client_docs WHERE id = $1", &[&id])
        .await?;
    Ok(row.get(0))
}

/// Runs the loop against the database at `conninfo` (a libpq connection string).
pub async fn run(conninfo: &str) -> Result<Report, Box<dyn std::error::Error>> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS client_docs (id int PRIMARY KEY, doc automerge NOT NULL)",
        )
        .await?;
    let id = 1;
    client.execute("DELETE FROM client_docs WHERE id = $1", &[&id]).await?;

    // 1. A new document, stored with an upsert of its full save.
    let mut local = AutoCommit::new().with_actor(ActorId::from(*b"rust-client-demo"));
    local.put(ROOT, "title", "Shopping")?;
    let items = local.put_object(ROOT, "items", ObjType::List)?;
    local.insert(&items, 0, "bread")?;
    let upsert = "INSERT INTO client_docs (id, doc) VALUES ($1, $2::bytea) \
                  ON CONFLICT (id) DO UPDATE SET doc = client_docs.doc || EXCLUDED.doc";
    let full_save = local.save();
    client.execute(upsert, &[&id, &full_save]).await?;
    let mut bytes_sent = full_save.len();
    let mut synced = local.get_heads();
    let mut changes_sent = local.get_changes(&[]).len();

    // 2. Local edits; only the new changes travel.
    for item in ["milk", "eggs", "apples"] {
        let end = local.length(&items);
        local.insert(&items, end, item)?;
        local.commit();
        let changes = local.save_after(&synced);
        client
            .execute(
                "UPDATE client_docs SET doc = doc || $1::bytea WHERE id = $2",
                &[&changes, &id],
            )
            .await?;
        bytes_sent += changes.len();
        changes_sent += local.get_changes(&synced).len();
        synced = local.get_heads();
        if server_heads(&client, id).await? != hex(&synced) {
            return Err("the server does not have the changes just sent".into());
        }
    }

    // 3. Another replica edits the same row concurrently.
    let stored: Vec<u8> =
        client.query_one("SELECT doc::bytea FROM client_docs WHERE id = $1", &[&id]).await?.get(0);
    let mut other = AutoCommit::load(&stored)?.with_actor(ActorId::from(*b"another-replica!"));
    other.put(ROOT, "title", "Weekend shopping")?;
    let other_change = other.save_after(&synced);
    client
        .execute(
            "UPDATE client_docs SET doc = doc || $1::bytea WHERE id = $2",
            &[&other_change, &id],
        )
        .await?;
    local.put(ROOT, "done", false)?;
    local.commit();

    // 4. Read back, merge, and send what the server still lacks.
    let row = client
        .query_one("SELECT doc::bytea, doc::jsonb::text FROM client_docs WHERE id = $1", &[&id])
        .await?;
    let mut server_doc = AutoCommit::load(&row.get::<_, Vec<u8>>(0))?;
    local.merge(&mut server_doc)?;
    let missing = local.save_after(&server_doc.get_heads());
    client
        .execute("UPDATE client_docs SET doc = doc || $1::bytea WHERE id = $2", &[&missing, &id])
        .await?;
    bytes_sent += missing.len();
    changes_sent += 1;

    let row = client
        .query_one(
            "SELECT automerge_heads(doc), doc::jsonb::text FROM client_docs WHERE id = $1",
            &[&id],
        )
        .await?;
    let heads: Vec<String> = row.get(0);
    let server_json: serde_json::Value = serde_json::from_str(row.get(1))?;
    let local_json = serde_json::to_value(AutoSerde::from(&local))?;
    if heads != hex(&local.get_heads()) {
        return Err(
            format!("heads differ: server {heads:?}, local {:?}", hex(&local.get_heads())).into()
        );
    }
    if server_json != local_json {
        return Err(format!("JSON differs: server {server_json}, local {local_json}").into());
    }
    Ok(Report { changes_sent, bytes_sent, heads })
}
