//! The tables the server keeps, created when missing. Several servers may start at once
//! on one database: the creation runs under a transaction-level advisory lock, so the
//! `IF NOT EXISTS` checks never race.

use tokio_postgres::Client;

/// The names the SQL is written with (validated as plain identifiers by `config`).
#[derive(Clone, Debug)]
pub struct Tables {
    pub documents: String,
    pub chunks: String,
    pub channel: String,
}

/// The advisory lock key of schema creation (any constant that other code does not use).
const SCHEMA_LOCK: i64 = 0x7067_616d_7379_6e63; // "pgamsync"

/// Creates the extension, both tables, their index and the NOTIFY trigger when missing.
pub async fn ensure(client: &mut Client, tables: &Tables) -> Result<(), tokio_postgres::Error> {
    let Tables { documents, chunks, channel } = tables;
    let transaction = client.transaction().await?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK]).await?;
    transaction
        .batch_execute(&format!(
            r#"
CREATE EXTENSION IF NOT EXISTS pg_automerge;

-- One row per repo document, merged with `||` as its chunks arrive: what SQL reads.
CREATE TABLE IF NOT EXISTS {documents} (
    id text PRIMARY KEY,
    doc automerge NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- automerge-repo's key/value storage, exactly: the key's parts joined by '/' (no part
-- holds one), in the C collation so that a prefix is a range of the primary key.
CREATE TABLE IF NOT EXISTS {chunks} (
    key text COLLATE "C" PRIMARY KEY,
    document_id text COLLATE "C",
    data bytea NOT NULL,
    -- A snapshot or incremental chunk not yet merged into {documents}: its dependencies
    -- have not arrived, or the extension refused it (refusal says why).
    pending boolean NOT NULL DEFAULT false,
    refusal text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {chunks}_pending ON {chunks} (document_id) WHERE pending;

CREATE OR REPLACE TRIGGER {documents}_notify
    AFTER INSERT OR UPDATE OR DELETE ON {documents}
    FOR EACH ROW EXECUTE FUNCTION automerge_notify('{channel}', 'doc', 'id');
"#
        ))
        .await?;
    transaction.commit().await
}
