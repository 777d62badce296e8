//! The server's configuration: every setting is a flag with an environment variable of the
//! same meaning, so that a container sets it by `-e` and a person by `--`.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::auth::Verifier;
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "pg_automerge_sync_server",
    about = "An automerge-repo sync server whose storage is Postgres (pg_automerge)",
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
pub struct Config {
    #[command(subcommand)]
    pub command: Option<Command>,
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
    /// The HS256 secret clients' tokens are signed with: a file of at least 32 bytes (a
    /// trailing newline is not part of it).
    #[arg(long, env = "SYNC_SERVER_JWT_SECRET_FILE", conflicts_with = "jwks_file")]
    pub jwt_secret_file: Option<PathBuf>,
    /// The public keys (RS256, ES256) clients' tokens are signed with, as a JWKS file; a
    /// token names its key by `kid`.
    #[arg(long, env = "SYNC_SERVER_JWKS_FILE")]
    pub jwks_file: Option<PathBuf>,
    /// The audience tokens must name in `aud`. Without it, tokens with an `aud` are refused.
    #[arg(long, env = "SYNC_SERVER_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// The claim whose value is the client's peer id (the id its repo must announce).
    #[arg(long, env = "SYNC_SERVER_PEER_ID_CLAIM", default_value = "sub")]
    pub peer_id_claim: String,
    /// The database role of clients without a token (which then name their peer id,
    /// starting `anonymous-`, in the `peer_id` query parameter) and of tokens without a
    /// `role` claim. Without it, a client without a token is refused.
    #[arg(long, env = "SYNC_SERVER_ANONYMOUS_ROLE")]
    pub anonymous_role: Option<String>,
    /// No tokens and no access control: anyone who reaches the server reads and writes
    /// every document whose id they know, and creates documents. For local development.
    #[arg(
        long,
        env = "SYNC_SERVER_ALLOW_ANONYMOUS",
        conflicts_with_all = ["jwt_secret_file", "jwks_file", "anonymous_role"]
    )]
    pub allow_anonymous: bool,
    /// The channel on which a NOTIFY makes the server decide access again: the payload is
    /// a document id, or empty for every document.
    #[arg(long, env = "SYNC_SERVER_ACCESS_CHANNEL", default_value = "automerge_repo_access", value_parser = identifier)]
    pub access_channel: String,
    /// The largest WebSocket message a client may send, in bytes; a larger one closes
    /// its connection.
    #[arg(long, env = "SYNC_SERVER_MAX_MESSAGE_BYTES", default_value_t = 64 << 20)]
    pub max_message_bytes: usize,
    /// How many documents one connection may sync; a message about one more closes it.
    #[arg(long, env = "SYNC_SERVER_MAX_DOCUMENTS_PER_CONNECTION", default_value_t = 1000)]
    pub max_documents_per_connection: usize,
    /// How many samod repos share the documents (by a hash of each id). A repo's work on
    /// each event grows with its connections times its documents, so more repos keep
    /// round trips short with many clients; each costs a few tasks.
    #[arg(long, env = "SYNC_SERVER_SHARDS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub shards: u16,
    /// How logs are written to stderr: `text` for people, `json` for collectors. The
    /// levels come from `RUST_LOG` (default [`DEFAULT_LOG_LEVELS`]).
    #[arg(long, env = "SYNC_SERVER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The log levels without `RUST_LOG`: the server's connections, refusals and errors, and
/// samod's warnings and errors (at `info` samod writes a line for each document a peer
/// syncs and for each repo it stops: thousands a minute on a busy server).
pub const DEFAULT_LOG_LEVELS: &str = "info,samod=warn,samod_core=warn";

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Print a token signed with the HS256 secret, for trying the server out and for
    /// tests; an app's backend mints its own (see docs/sync-server.md).
    MintToken(MintToken),
}

#[derive(Args, Debug, Clone)]
pub struct MintToken {
    /// The HS256 secret file the server checks tokens with.
    #[arg(long, env = "SYNC_SERVER_JWT_SECRET_FILE")]
    pub jwt_secret_file: PathBuf,
    /// The `sub` claim: the user, and the peer id by default.
    #[arg(long)]
    pub sub: String,
    /// The `role` claim: the database role the server becomes for this client.
    #[arg(long)]
    pub role: String,
    /// The `aud` claim.
    #[arg(long)]
    pub audience: Option<String>,
    /// How long the token is valid.
    #[arg(long, default_value_t = 3600)]
    pub expires_in_seconds: u64,
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

    /// How clients are let in: `None` when anyone is (`--allow-anonymous`), else the
    /// verifier of their tokens. A server with neither refuses to start.
    pub fn verifier(&self) -> anyhow::Result<Option<Verifier>> {
        if self.allow_anonymous {
            return Ok(None);
        }
        if self.jwt_secret_file.is_none() && self.jwks_file.is_none() {
            anyhow::bail!(
                "give --jwt-secret-file or --jwks-file to check clients' tokens, or \
                 --allow-anonymous to let anyone read and write every document"
            );
        }
        if matches!(self.storage(), StorageChoice::Filesystem(_)) {
            anyhow::bail!("access control needs Postgres storage (--database-url)");
        }
        let verifier = Verifier::new(
            self.jwt_secret_file.as_deref(),
            self.jwks_file.as_deref(),
            self.jwt_audience.clone(),
            self.peer_id_claim.clone(),
            self.anonymous_role.clone(),
        )?;
        Ok(Some(verifier))
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
    fn needs_tokens_or_anonymous_access() {
        let open = Config::try_parse_from(["server", "--database-url", "x", "--allow-anonymous"]);
        assert!(open.unwrap().verifier().unwrap().is_none());
        let closed = Config::try_parse_from(["server", "--database-url", "x"]).unwrap();
        let refusal = closed.verifier().err().unwrap().to_string();
        assert!(refusal.contains("--allow-anonymous"), "{refusal}");
        assert!(Config::try_parse_from([
            "server",
            "--database-url",
            "x",
            "--allow-anonymous",
            "--jwt-secret-file",
            "/tmp/s"
        ])
        .is_err());
        let minting = Config::try_parse_from([
            "server",
            "mint-token",
            "--jwt-secret-file",
            "/tmp/s",
            "--sub",
            "ana",
            "--role",
            "app_user",
        ])
        .unwrap();
        assert!(
            matches!(minting.command, Some(Command::MintToken(MintToken { ref sub, .. })) if sub == "ana")
        );
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
