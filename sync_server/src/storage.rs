//! `samod::Storage` on Postgres: automerge-repo's keys and bytes in the chunks table,
//! exactly as put (so a repo loads what it stored), and each document chunk merged into
//! the document's row in the documents table with the extension's `||` in the same
//! transaction, so SQL sees every document as the repo has it.
//!
//! Merges run under a transaction-level advisory lock on the document id, so servers
//! sharing the database merge one document one at a time; nothing assumes one server.
//! A chunk the extension refuses (its dependencies have not arrived yet, or it is bad
//! input: `22P03` and the like) rolls back to a savepoint, stays `pending` with its
//! `refusal`, and leaves the stored document as it was; pending chunks are tried again
//! whenever another chunk of their document arrives.
//!
//! A load of a document's snapshots returns, beside the repo's own chunks, the document's
//! row as one more snapshot (key `[docId, "snapshot", "documents-row"]`): a document
//! inserted in SQL is a repo document, and a repo that loads a document has every SQL
//! write of it, including those made while no server listened.
//!
//! With access control, the first chunk of a document a peer was allowed to create
//! inserts its row as that peer (its role and claims, see `access`), so the INSERT
//! policies and the columns' defaults (an `owner` set from the claims) apply.
//!
//! The `Storage` trait has no way to report a failure, and a load that says "nothing"
//! or a put that is dropped would lose data: every operation retries, with a capped
//! backoff and a warning, until Postgres answers.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use samod::storage::{Storage, StorageKey};
use tokio_postgres::types::ToSql;

use crate::access::{Creators, BECOME, BECOME_SERVER};
use crate::schema::Tables;

#[derive(Clone)]
pub struct PostgresStorage {
    pool: Pool,
    sql: Arc<Statements>,
    creators: Creators,
}

/// The statements, written once with the configured table names.
struct Statements {
    load: String,
    load_all: String,
    load_range: String,
    put: String,
    delete: String,
    lock_document: String,
    pending: String,
    merge: String,
    insert_document: String,
    merged: String,
    refused: String,
    row_snapshot: String,
}

/// The last part of the key under which a load of snapshots returns the document's row.
pub const ROW_SNAPSHOT: &str = "documents-row";

impl Statements {
    fn new(Tables { documents, chunks, .. }: &Tables) -> Statements {
        Statements {
            load: format!("SELECT data FROM {chunks} WHERE key = $1"),
            load_all: format!("SELECT key, data FROM {chunks}"),
            load_range: format!(
                "SELECT key, data FROM {chunks} \
                 WHERE key = $1 OR (key > $1 || '/' AND key < $1 || '0')"
            ),
            // A put records whether its bytes merged, so the same bytes put again are
            // merged again (a no-op merge when they are in the document already).
            put: format!(
                "INSERT INTO {chunks} (key, document_id, data, pending, refusal) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data, \
                   pending = EXCLUDED.pending, refusal = EXCLUDED.refusal, updated_at = now()"
            ),
            delete: format!("DELETE FROM {chunks} WHERE key = $1"),
            lock_document: "SELECT pg_advisory_xact_lock(hashtextextended($1, 1853))".into(),
            pending: format!(
                "SELECT key, data FROM {chunks} WHERE document_id = $1 AND pending ORDER BY key"
            ),
            merge: format!(
                "UPDATE {documents} SET doc = doc || $2::bytea, updated_at = now() WHERE id = $1"
            ),
            insert_document: format!(
                "INSERT INTO {documents} (id, doc) VALUES ($1, $2::bytea::automerge) \
                 ON CONFLICT (id) DO NOTHING"
            ),
            merged: format!("UPDATE {chunks} SET pending = false, refusal = NULL WHERE key = $1"),
            refused: format!("UPDATE {chunks} SET refusal = $2 WHERE key = $1"),
            row_snapshot: format!("SELECT doc::bytea FROM {documents} WHERE id = $1"),
        }
    }
}

/// What went wrong talking to Postgres: the pool or the statement.
#[derive(Debug)]
pub enum StorageError {
    Pool(deadpool_postgres::PoolError),
    Postgres(tokio_postgres::Error),
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::Pool(error) => write!(f, "no Postgres connection: {error}"),
            StorageError::Postgres(error) => write!(f, "Postgres: {}", describe(error)),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<deadpool_postgres::PoolError> for StorageError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        StorageError::Pool(error)
    }
}

impl From<tokio_postgres::Error> for StorageError {
    fn from(error: tokio_postgres::Error) -> Self {
        StorageError::Postgres(error)
    }
}

/// An error with the server's SQLSTATE, message and detail when it has them.
pub fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let detail = db.detail().map(|d| format!(" ({d})")).unwrap_or_default();
            format!("{}: {}{detail}", db.code().code(), db.message())
        }
        None => error.to_string(),
    }
}

/// The document a key belongs to, and whether its bytes are the document's (a snapshot
/// or an incremental change) rather than a sync state: `[docId, kind, …]`.
fn classify(key: &StorageKey) -> (Option<String>, bool) {
    let parts: Vec<&String> = key.into_iter().collect();
    match parts.as_slice() {
        [doc, kind, _] => {
            let merged = kind.as_str() == "snapshot" || kind.as_str() == "incremental";
            (Some(doc.to_string()), merged)
        }
        _ => (None, false),
    }
}

fn joined(key: &StorageKey) -> String {
    key.into_iter().map(String::as_str).collect::<Vec<_>>().join("/")
}

fn split(key: &str) -> Option<StorageKey> {
    StorageKey::from_parts(key.split('/')).ok()
}

impl PostgresStorage {
    pub fn new(pool: Pool, tables: &Tables, creators: Creators) -> PostgresStorage {
        PostgresStorage { pool, sql: Arc::new(Statements::new(tables)), creators }
    }

    /// Runs `operation` until Postgres answers it, waiting longer after each failure (at
    /// most five seconds).
    async fn retrying<T, F, Fut>(&self, what: &str, key: &str, operation: F) -> T
    where
        F: Fn(PostgresStorage) -> Fut,
        Fut: Future<Output = Result<T, StorageError>>,
    {
        let mut wait = Duration::from_millis(50);
        loop {
            match operation(self.clone()).await {
                Ok(value) => return value,
                Err(error) => {
                    tracing::warn!(%key, %error, retry_in_ms = wait.as_millis() as u64, "storage {what} failed");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    async fn try_load(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let client = self.pool.get().await?;
        let row = client.query_opt(&client.prepare_cached(&self.sql.load).await?, &[&key]).await?;
        Ok(row.map(|row| row.get(0)))
    }

    async fn try_load_range(
        &self,
        prefix: &str,
    ) -> Result<HashMap<StorageKey, Vec<u8>>, StorageError> {
        let client = self.pool.get().await?;
        let rows = if prefix.is_empty() {
            client.query(&client.prepare_cached(&self.sql.load_all).await?, &[]).await?
        } else {
            client.query(&client.prepare_cached(&self.sql.load_range).await?, &[&prefix]).await?
        };
        let mut chunks: HashMap<StorageKey, Vec<u8>> = rows
            .into_iter()
            .filter_map(|row| Some((split(row.get(0))?, row.get::<_, Vec<u8>>(1))))
            .collect();
        if let Some(document) = prefix.strip_suffix("/snapshot") {
            if let Some(row) = client
                .query_opt(&client.prepare_cached(&self.sql.row_snapshot).await?, &[&document])
                .await?
            {
                if let Some(key) = split(&format!("{prefix}/{ROW_SNAPSHOT}")) {
                    chunks.insert(key, row.get(0));
                }
            }
        }
        Ok(chunks)
    }

    /// One put: a document chunk is merged into the document's row first and stored
    /// with the outcome (merged, or pending with its refusal), then the document's other
    /// pending chunks are tried again. The statements are prepared once per connection
    /// and sent in pipelines: a change costs five round trips to Postgres, where one
    /// per statement and its preparation cost eighteen.
    async fn try_put(&self, key: &StorageKey, data: &[u8]) -> Result<(), StorageError> {
        let (document, merged) = classify(key);
        let joined = joined(key);
        let mut client = self.pool.get().await?;
        let put = client.prepare_cached(&self.sql.put).await?;
        let transaction = client.transaction().await?;
        let document = match document {
            Some(document) if merged => document,
            other => {
                let params: [&(dyn ToSql + Sync); 5] =
                    [&joined, &other, &data, &false, &None::<&str>];
                transaction.execute(&put, &params).await?;
                transaction.commit().await?;
                return Ok(());
            }
        };
        let lock = transaction.prepare_cached(&self.sql.lock_document).await?;
        let lock_params: [&(dyn ToSql + Sync); 1] = [&document];
        let (locked, outcome) = futures::join!(
            transaction.execute(&lock, &lock_params),
            self.merge_one(&transaction, &document, data)
        );
        locked?;
        let refusal = outcome?.err();
        let is_pending = refusal.is_some();
        let params: [&(dyn ToSql + Sync); 5] = [&joined, &document, &data, &is_pending, &refusal];
        let pending = transaction.prepare_cached(&self.sql.pending).await?;
        let pending_params: [&(dyn ToSql + Sync); 1] = [&document];
        let (stored, waiting) = futures::join!(
            transaction.execute(&put, &params),
            transaction.query(&pending, &pending_params)
        );
        stored?;
        if let Some(refusal) = &refusal {
            tracing::debug!(document, key = joined, %refusal, "chunk not merged (yet)");
        }
        // Pending chunks are tried again whenever a chunk of their document arrives: the
        // row may have gained their dependencies (this chunk, or a write in SQL). A
        // refused chunk is among them, as another may unblock it.
        let waiting = waiting?.into_iter().map(|row| (row.get(0), row.get(1))).collect();
        let just_refused = refusal.is_some().then_some(joined.as_str());
        self.merge_pending(&transaction, &document, waiting, just_refused).await?;
        transaction.commit().await?;
        Ok(())
    }

    /// Merges chunks that were waiting for a dependency into the document's row, each
    /// under a savepoint, until a pass merges nothing more (a change may wait for one
    /// later in the list); those still refused keep their latest refusal. The chunk
    /// `just_refused` (by the same row) is not tried again until another one merges.
    async fn merge_pending(
        &self,
        transaction: &deadpool_postgres::Transaction<'_>,
        document: &str,
        mut pending: Vec<(String, Vec<u8>)>,
        mut just_refused: Option<&str>,
    ) -> Result<(), StorageError> {
        let merged = transaction.prepare_cached(&self.sql.merged).await?;
        let refused = transaction.prepare_cached(&self.sql.refused).await?;
        loop {
            let mut refusals = Vec::new();
            let before = pending.len();
            for (key, data) in std::mem::take(&mut pending) {
                if just_refused == Some(key.as_str()) {
                    pending.push((key, data));
                    continue;
                }
                match self.merge_one(transaction, document, &data).await? {
                    Ok(()) => {
                        transaction.execute(&merged, &[&key]).await?;
                    }
                    Err(refusal) => {
                        refusals.push((key.clone(), refusal));
                        pending.push((key, data));
                    }
                }
            }
            just_refused = None;
            if pending.is_empty() || pending.len() == before {
                for (key, refusal) in refusals {
                    tracing::debug!(document, %key, %refusal, "chunk not merged (yet)");
                    transaction.execute(&refused, &[&key, &refusal]).await?;
                }
                return Ok(());
            }
        }
    }

    /// One chunk into the document's row, under a savepoint: `doc || bytes`, or the
    /// bytes as a new document when the row does not exist yet. The inner result is the
    /// extension's refusal (its SQLSTATE and message), after which the row is as it was.
    async fn merge_one(
        &self,
        transaction: &deadpool_postgres::Transaction<'_>,
        document: &str,
        data: &[u8],
    ) -> Result<Result<(), String>, tokio_postgres::Error> {
        let merge = transaction.prepare_cached(&self.sql.merge).await?;
        let params: [&(dyn ToSql + Sync); 2] = [&document, &data];
        let (savepoint, updated) = futures::join!(
            transaction.batch_execute("SAVEPOINT merge_chunk"),
            transaction.execute(&merge, &params)
        );
        savepoint?;
        let merged = async {
            if updated? == 0 && self.insert(transaction, document, data).await? == 0 {
                // Another writer inserted the row since the update: merge into it.
                transaction.execute(&merge, &params).await?;
            }
            Ok::<(), tokio_postgres::Error>(())
        }
        .await;
        match merged {
            Ok(()) => transaction.batch_execute("RELEASE SAVEPOINT merge_chunk").await.map(Ok),
            Err(error) if error.as_db_error().is_some() => {
                transaction.batch_execute("ROLLBACK TO SAVEPOINT merge_chunk").await?;
                Ok(Err(describe(&error)))
            }
            Err(error) => Err(error),
        }
    }

    /// The document's row, inserted as the peer that was allowed to create it if any.
    async fn insert(
        &self,
        transaction: &deadpool_postgres::Transaction<'_>,
        document: &str,
        data: &[u8],
    ) -> Result<u64, tokio_postgres::Error> {
        let Some(creator) = self.creators.get(document) else {
            return transaction.execute(&self.sql.insert_document, &[&document, &data]).await;
        };
        transaction.execute(BECOME, &[&creator.role, &creator.claims.to_string()]).await?;
        let inserted = transaction.execute(&self.sql.insert_document, &[&document, &data]).await?;
        transaction.batch_execute(BECOME_SERVER).await?;
        self.creators.created(document);
        Ok(inserted)
    }

    async fn try_delete(&self, key: &str) -> Result<(), StorageError> {
        let client = self.pool.get().await?;
        client.execute(&client.prepare_cached(&self.sql.delete).await?, &[&key]).await?;
        Ok(())
    }

    /// The document's row as it is now (its save), when the row exists.
    pub async fn document(&self, document: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let client = self.pool.get().await?;
        let row = client
            .query_opt(&client.prepare_cached(&self.sql.row_snapshot).await?, &[&document])
            .await?;
        Ok(row.map(|row| row.get(0)))
    }
}

impl Storage for PostgresStorage {
    fn load(&self, key: StorageKey) -> impl Future<Output = Option<Vec<u8>>> + Send {
        let storage = self.clone();
        async move {
            let joined = joined(&key);
            storage
                .retrying("load", &joined, |s| {
                    let joined = joined.clone();
                    async move { s.try_load(&joined).await }
                })
                .await
        }
    }

    fn load_range(
        &self,
        prefix: StorageKey,
    ) -> impl Future<Output = HashMap<StorageKey, Vec<u8>>> + Send {
        let storage = self.clone();
        async move {
            let joined = joined(&prefix);
            storage
                .retrying("load_range", &joined, |s| {
                    let joined = joined.clone();
                    async move { s.try_load_range(&joined).await }
                })
                .await
        }
    }

    fn put(&self, key: StorageKey, data: Vec<u8>) -> impl Future<Output = ()> + Send {
        let storage = self.clone();
        async move {
            let joined = joined(&key);
            let (key, data) = (Arc::new(key), Arc::new(data));
            storage
                .retrying("put", &joined, |s| {
                    let (key, data) = (key.clone(), data.clone());
                    async move { s.try_put(&key, &data).await }
                })
                .await
        }
    }

    fn delete(&self, key: StorageKey) -> impl Future<Output = ()> + Send {
        let storage = self.clone();
        async move {
            let joined = joined(&key);
            storage
                .retrying("delete", &joined, |s| {
                    let joined = joined.clone();
                    async move { s.try_delete(&joined).await }
                })
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_join_and_split_back() {
        let key = StorageKey::from_parts(["2Vd3", "incremental", "ab12"]).unwrap();
        assert_eq!(joined(&key), "2Vd3/incremental/ab12");
        assert_eq!(split(&joined(&key)), Some(key.clone()));
        assert_eq!(classify(&key), (Some("2Vd3".into()), true));
        let sync_state = StorageKey::from_parts(["2Vd3", "sync-state", "peer"]).unwrap();
        assert_eq!(classify(&sync_state), (Some("2Vd3".into()), false));
        assert_eq!(classify(&StorageKey::storage_id_path()), (None, false));
    }
}
