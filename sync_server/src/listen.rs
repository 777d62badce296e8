//! Writes made in SQL reach the repo: the server LISTENs on the documents table's
//! `automerge_notify` channel, and for each INSERT or UPDATE of a row whose id is a repo
//! document id that a client syncs, hands the row's document to the repo holding it,
//! which syncs it to clients like any peer's change. The repo's own merges notify too;
//! their heads are already in the repo's document and cost a lookup, not a load. A row no
//! client syncs is left in storage, which loads it as a snapshot when a client asks for
//! it (see `storage`).
//!
//! Notifications sent while the LISTEN connection is down are not replayed: a document
//! written then reaches clients with the next write of it, or when the server restarts.
//!
//! With access control, every notification about a row, and every notification on the
//! access channel, makes the share policy decide again (see `access`); so does every
//! (re)connection, since notifications may have been missed.

use std::str::FromStr;
use std::time::Duration;

use automerge::{ChangeHash, ReadDoc};
use futures::StreamExt;
use std::sync::Arc;

use samod::{DocumentId, Repo};
use serde::Deserialize;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::access::{Access, Recheck};
use crate::shards::Shards;
use crate::storage::PostgresStorage;

/// The channels listened on: the documents table's, and with access control the access
/// channel and the policy its notifications recheck.
pub struct Channels {
    pub documents: String,
    pub access: Option<(String, Access)>,
}

/// The JSON payload of `automerge_notify` (see docs/writing-documents.md).
#[derive(Deserialize, Debug)]
struct Payload {
    operation: String,
    key: Option<Key>,
    /// Absent on DELETE, and when a payload was too large and came truncated.
    heads: Option<Vec<String>>,
}

#[derive(Deserialize, Debug)]
struct Key {
    id: String,
}

/// How long a document lookup in the repo may take before the write is logged as missed.
const FIND_TIMEOUT: Duration = Duration::from_secs(30);

/// Listens until the process ends, connecting again (after a second) whenever the
/// connection is lost.
pub async fn run(
    database_url: String,
    channels: Channels,
    shards: Arc<Shards>,
    storage: PostgresStorage,
) {
    loop {
        if let Err(error) = listen(&database_url, &channels, &shards, &storage).await {
            tracing::warn!(%error, "LISTEN connection lost; connecting again in 1s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn listen(
    database_url: &str,
    channels: &Channels,
    shards: &Arc<Shards>,
    storage: &PostgresStorage,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(database_url, NoTls).await?;
    let (sender, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message? {
                AsyncMessage::Notification(notification) => {
                    let _ = sender.send((
                        notification.channel().to_string(),
                        notification.payload().to_string(),
                    ));
                }
                AsyncMessage::Notice(notice) => tracing::debug!(%notice, "notice"),
                _ => {}
            }
        }
        Ok::<(), tokio_postgres::Error>(())
    });
    client.batch_execute(&format!("LISTEN {}", channels.documents)).await?;
    tracing::info!(channel = channels.documents, "listening for SQL writes");
    if let Some((channel, access)) = &channels.access {
        client.batch_execute(&format!("LISTEN {channel}")).await?;
        tracing::info!(channel, "listening for access changes");
        access.recheck(Recheck::Everything);
    }
    while let Some((channel, payload)) = notifications.recv().await {
        match &channels.access {
            Some((access_channel, access)) if *access_channel == channel => {
                access.recheck(match payload.as_str() {
                    "" => Recheck::Everything,
                    id => Recheck::Document(id.to_string()),
                });
                continue;
            }
            _ => {}
        }
        let (shards, storage) = (shards.clone(), storage.clone());
        let access = channels.access.as_ref().map(|(_, access)| access.clone());
        tokio::spawn(async move { hand_to_repo(&payload, &shards, &storage, access).await });
    }
    // The channel closes when the connection's driver ends: report why.
    driver.await.expect("the LISTEN driver does not panic")
}

/// One notification: the written row's document into the repo, unless the repo has it.
async fn hand_to_repo(
    payload: &str,
    shards: &Shards,
    storage: &PostgresStorage,
    access: Option<Access>,
) {
    let payload: Payload = match serde_json::from_str(payload) {
        Ok(payload) => payload,
        Err(error) => return tracing::warn!(%error, payload, "unreadable notification"),
    };
    let Some(Key { id }) = payload.key else {
        return tracing::warn!("a notification without the row's key (truncated): skipped");
    };
    if let Some(access) = access {
        access.recheck(Recheck::Document(id.clone()));
    }
    if payload.operation == "DELETE" {
        // A row deleted in SQL keeps its chunks: see docs/sync-server.md.
        return;
    }
    let Ok(document_id) = DocumentId::from_str(&id) else {
        return tracing::debug!(id, "a row whose id is not a repo document id: not synced");
    };
    // A repo that does not hold the document loads the row when a client asks for it.
    let Some(repo) = shards.holding(&id).await else {
        return tracing::debug!(id, "a SQL write of a document no client syncs");
    };
    if let Err(error) = merge_into_repo(&id, document_id, payload.heads, &repo, storage).await {
        tracing::warn!(id, %error, "a SQL write was not handed to the repo");
    }
}

async fn merge_into_repo(
    id: &str,
    document_id: DocumentId,
    heads: Option<Vec<String>>,
    repo: &Repo,
    storage: &PostgresStorage,
) -> anyhow::Result<()> {
    let handle = tokio::time::timeout(FIND_TIMEOUT, repo.find(document_id))
        .await
        .map_err(|_| anyhow::anyhow!("the repo did not find the document within {FIND_TIMEOUT:?}"))?
        .map_err(|_| anyhow::anyhow!("the repo has stopped"))?
        // samod answered "unavailable" to a request for this document before any server
        // stored it, and keeps that answer (see docs/sync-server.md).
        .ok_or_else(|| anyhow::anyhow!("the repo holds the document as unavailable"))?;
    let heads: Option<Vec<ChangeHash>> =
        heads.map(|heads| heads.iter().filter_map(|h| ChangeHash::from_str(h).ok()).collect());
    let has_heads = handle
        .with_document_async(move |doc| {
            heads.is_some_and(|heads| heads.iter().all(|h| doc.get_change_by_hash(h).is_some()))
        })
        .await?;
    if has_heads {
        return Ok(());
    }
    let Some(save) = storage.document(id).await? else { return Ok(()) };
    let applied = handle.with_document_async(move |doc| doc.load_incremental(&save)).await??;
    tracing::debug!(id, applied, "a SQL write handed to the repo");
    Ok(())
}
