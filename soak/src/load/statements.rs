//! The statements the soak's workers run, each prepared once per connection.

use anyhow::Result;
use tokio_postgres::{Client, Statement};

use super::{insert_sql, TABLE};

/// The statements a worker runs, prepared once per connection.
pub struct Statements {
    pub insert: Statement,
    pub incremental: Statement,
    pub title: Statement,
    pub containment: Statement,
    pub spans: Statement,
    pub history: Statement,
    pub merge: Statement,
    pub loads: Statement,
    pub memory: Statement,
}

impl Statements {
    pub async fn prepare(client: &Client) -> Result<Statements> {
        Ok(Statements {
            insert: client.prepare(&insert_sql()).await?,
            incremental: client
                .prepare(&format!("UPDATE {TABLE} SET doc = doc || $1::bytea WHERE id = $2"))
                .await?,
            title: client.prepare(&format!("SELECT doc->>'title' FROM {TABLE} WHERE id = $1")).await?,
            containment: client
                .prepare(&format!("SELECT count(*) FROM {TABLE} WHERE body @> $1::text::jsonb"))
                .await?,
            spans: client
                .prepare(&format!("SELECT jsonb_array_length(automerge_spans(doc, $2::text[])) FROM {TABLE} WHERE id = $1"))
                .await?,
            history: client
                .prepare(&format!(
                    "SELECT cardinality(automerge_heads(d.doc)), c.changes,
                            automerge_to_jsonb(d.doc, c.first) IS NOT NULL
                     FROM {TABLE} d, LATERAL (
                         SELECT count(*) AS changes, (array_agg(hash))[1:1] AS first FROM automerge_changes(d.doc)
                     ) c
                     WHERE d.id = $1"
                ))
                .await?,
            merge: client
                .prepare(&format!(
                    "SELECT automerge_change_count(merge_agg(doc)) FROM {TABLE} WHERE id = ANY($1)"
                ))
                .await?,
            loads: client.prepare("SELECT loads FROM automerge_memory_usage()").await?,
            memory: client
                .prepare(
                    "SELECT u.allocated_bytes::bigint, u.resident_bytes::bigint,
                            (SELECT sum(total_bytes) FROM pg_backend_memory_contexts)::bigint
                     FROM automerge_memory_usage() u",
                )
                .await?,
        })
    }
}
