//! `pg_automerge_sync_server`: reads its configuration from flags and the environment,
//! sets up structured logs, and serves until SIGINT or SIGTERM; or, with `mint-token`,
//! prints a token.

use std::io::IsTerminal;

use clap::Parser;
use sync_server::config::{Command, Config, LogFormat};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    if let Some(Command::MintToken(mint)) = &config.command {
        println!("{}", sync_server::auth::mint(mint)?);
        return Ok(());
    }
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(sync_server::config::DEFAULT_LOG_LEVELS));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    sync_server::server::run(config).await
}
