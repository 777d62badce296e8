//! The server's configuration: every setting is a flag with an environment variable of the
//! same meaning, so that a container sets it by `-e` and a person by `--`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "pg_automerge_sync_server",
    about = "An automerge-repo sync server whose storage is Postgres (pg_automerge)"
)]
pub struct Config {
    /// The address the WebSocket endpoint (`/`) and `/health` listen on; port 0 picks a
    /// free one (the `listening on ws://…` line on stdout says which).
    #[arg(long, env = "SYNC_SERVER_LISTEN", default_value = "127.0.0.1:3030")]
    pub listen: SocketAddr,
    /// The Postgres to store documents in, as a libpq connection string or URL. The
    /// database needs the pg_automerge extension available (the server creates it).
    #[arg(long, env = "DATABASE_URL", required_unless_present = "filesystem_storage")]
    pub database_url: Option<String>,
    /// Store documents in this directory with samod's own file-system storage instead of
    /// Postgres: the baseline the benchmark compares with, not for production.
    #[arg(long, env = "SYNC_SERVER_FILESYSTEM_STORAGE", conflicts_with = "database_url")]
    pub filesystem_storage: Option<PathBuf>,
    /// The table of documents, one row per repo document: `id text`, `doc automerge`.
    #[arg(long, env = "SYNC_SERVER_DOCUMENTS_TABLE", default_value = "documents", value_parser = identifier)]
    pub documents_table: String,
    /// The table of automerge-repo's storage keys and their bytes.
    #[arg(long, env = "SYNC_SERVER_CHUNKS_TABLE", default_value = "automerge_repo_chunks", value_parser = identifier)]
    pub chunks_table: String,
    /// The NOTIFY channel of the documents table's `automerge_notify` trigger.
    #[arg(long, env = "SYNC_SERVER_CHANNEL", default_value = "automerge_repo_documents", value_parser = identifier)]
    pub channel: String,
    /// How many Postgres connections the storage may hold (LISTEN takes one more).
    #[arg(long, env = "SYNC_SERVER_POOL_SIZE", default_value_t = 16)]
    pub pool_size: usize,
    /// How logs are written to stderr: `text` for people, `json` for collectors. The
    /// level comes from `RUST_LOG` (default `info`).
    #[arg(long, env = "SYNC_SERVER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where the repo keeps its documents.
pub enum StorageChoice<'a> {
    Postgres(&'a str),
    Filesystem(&'a std::path::Path),
}

impl Config {
    pub fn storage(&self) -> StorageChoice<'_> {
        match (&self.database_url, &self.filesystem_storage) {
            (_, Some(dir)) => StorageChoice::Filesystem(dir),
            (Some(url), None) => StorageChoice::Postgres(url),
            (None, None) => unreachable!("clap requires one of the two"),
        }
    }
}

/// Table and channel names go into SQL unquoted-safe: lower-case letters, digits and `_`,
/// not starting with a digit, at most 63 bytes (Postgres' limit).
fn identifier(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 63
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(text.to_string())
    } else {
        Err(format!("`{text}` is not a plain SQL identifier: use lower-case letters, digits and _"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_plain() {
        assert!(identifier("documents").is_ok());
        assert!(identifier("repo_chunks2").is_ok());
        for bad in ["", "Documents", "1st", "a;drop", "a b", &"x".repeat(64)] {
            assert!(identifier(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn needs_a_storage() {
        assert!(Config::try_parse_from(["server"]).is_err());
        let config = Config::try_parse_from(["server", "--database-url", "host=x"]).unwrap();
        assert!(matches!(config.storage(), StorageChoice::Postgres("host=x")));
        assert!(Config::try_parse_from([
            "server",
            "--database-url",
            "host=x",
            "--filesystem-storage",
            "/tmp/x"
        ])
        .is_err());
    }
}
