//! What the report says the run ran on, and what loading each document took before it.

use anyhow::Result;
use tokio_postgres::Client;

use crate::load::TABLE;

/// Where and with what the run ran.
pub struct Environment {
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub server_version: String,
    pub extension_version: String,
    pub settings: Vec<(String, String)>,
    pub docker_version: String,
}

impl Environment {
    pub async fn collect(
        client: &Client,
        started_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<Environment> {
        let server_version: String = client.query_one("SELECT version()", &[]).await?.get(0);
        let extension_version: String = client
            .query_one("SELECT extversion FROM pg_extension WHERE extname = 'pg_automerge'", &[])
            .await?
            .get(0);
        let mut settings = Vec::new();
        for name in [
            "shared_preload_libraries",
            "default_toast_compression",
            "shared_buffers",
            "max_wal_size",
            "work_mem",
            "max_connections",
            "pg_automerge.trim_threshold",
            "pg_automerge.max_load_memory",
            "pg_automerge.append_limit",
            "pg_automerge.compactor_database",
            "pg_automerge.compactor_naptime",
            "pg_automerge.compact_after",
            "autovacuum_vacuum_scale_factor",
        ] {
            let value: String =
                client.query_one(&format!("SELECT current_setting('{name}')"), &[]).await?.get(0);
            settings.push((name.to_string(), value));
        }
        let docker_version = std::process::Command::new("docker")
            .args(["version", "--format", "{{.Server.Version}}"])
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default();
        Ok(Environment { started_at, server_version, extension_version, settings, docker_version })
    }
}

/// One document's load, measured with the Operations page's recipe before the mix starts.
pub struct LoadPeak {
    pub name: String,
    pub stored_bytes: i64,
    pub peak_bytes: i64,
    pub load_ms: f64,
}

/// Loads one row of each document, alone on the connection, and keeps the Rust heap's peak
/// and the load time: `automerge_to_jsonb` at the document's own heads loads it, where
/// `doc->>'title'` reads the kept JSON and would measure nothing.
pub async fn load_peaks(client: &Client, ids: &[i64]) -> Result<Vec<LoadPeak>> {
    let mut peaks = Vec::new();
    for id in ids {
        client.batch_execute("SELECT automerge_memory_reset()").await?;
        let row = client
            .query_one(&format!("SELECT kind, pg_column_size(doc)::bigint, automerge_to_jsonb(doc, automerge_heads(doc)) IS NOT NULL FROM {TABLE} WHERE id = $1"), &[id])
            .await?;
        let usage = client
            .query_one(
                "SELECT peak_allocated_bytes, load_time_ms FROM automerge_memory_usage()",
                &[],
            )
            .await?;
        peaks.push(LoadPeak {
            name: row.get(0),
            stored_bytes: row.get(1),
            peak_bytes: usage.get(0),
            load_ms: usage.get(1),
        });
    }
    peaks.sort_by_key(|peak| std::cmp::Reverse(peak.peak_bytes));
    Ok(peaks)
}
