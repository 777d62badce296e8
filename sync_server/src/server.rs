//! The server: the repo on its storage, the axum router (the WebSocket endpoint at `/`
//! that automerge-repo's WebSocket client adapter connects to, `/health`), the LISTEN
//! task, and a shutdown that stops accepting, then flushes the repo to storage.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use samod::{AcceptorHandle, Repo, ShareConfig};
use tokio::net::TcpListener;
use tokio_postgres::NoTls;

use crate::config::{Config, StorageChoice};
use crate::listen;
use crate::schema::{self, Tables};
use crate::storage::PostgresStorage;

/// What the handlers share.
struct Shared {
    acceptor: AcceptorHandle,
    /// None on file-system storage, whose health is the process's.
    pool: Option<Pool>,
}

/// How long shutdown waits for the repo to flush what it holds to storage.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let url = format!("ws://{}", listener.local_addr()?);
    // Like automerge-repo's own sync server: documents are not announced to every
    // client; a client syncs the documents it asks for, and from then on every change.
    let share = ShareConfig::read_write().with_announce(false);
    let builder = Repo::build_tokio().with_share_policy(share);
    let (repo, pool) = match config.storage() {
        StorageChoice::Postgres(database_url) => {
            let pool = pool(database_url, config.pool_size)?;
            let tables = Tables {
                documents: config.documents_table.clone(),
                chunks: config.chunks_table.clone(),
                channel: config.channel.clone(),
            };
            let mut client = pool.get().await.context("connecting to Postgres (--database-url)")?;
            schema::ensure(&mut client, &tables)
                .await
                .map_err(|e| anyhow::anyhow!(crate::storage::describe(&e)))
                .context("creating the tables")?;
            drop(client);
            let storage = PostgresStorage::new(pool.clone(), &tables);
            let repo = builder.with_storage(storage.clone()).load().await;
            tokio::spawn(listen::run(
                database_url.to_string(),
                config.channel.clone(),
                repo.clone(),
                storage,
            ));
            (repo, Some(pool))
        }
        StorageChoice::Filesystem(dir) => {
            std::fs::create_dir_all(dir)?;
            let storage = samod::storage::TokioFilesystemStorage::new(dir);
            (builder.with_storage(storage).load().await, None)
        }
    };
    let acceptor = repo.make_acceptor(samod::Url::parse(&url)?)?;
    let shared = Arc::new(Shared { acceptor, pool });
    let app = Router::new()
        .route("/", get(websocket))
        .route("/health", get(health))
        .with_state(shared.clone());
    tracing::info!(%url, peer_id = %repo.peer_id(), "serving");
    // The line scripts read to learn the port when --listen asked for port 0.
    println!("listening on {url}");
    std::io::stdout().flush()?;
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
    tracing::info!("shutting down: closing connections and flushing the repo");
    shared.acceptor.close();
    if tokio::time::timeout(FLUSH_TIMEOUT, repo.stop()).await.is_err() {
        tracing::error!("the repo did not flush to storage within {FLUSH_TIMEOUT:?}");
    }
    Ok(())
}

fn pool(database_url: &str, size: usize) -> anyhow::Result<Pool> {
    let config: tokio_postgres::Config = database_url.parse().context("reading --database-url")?;
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig { recycling_method: RecyclingMethod::Fast },
    );
    Ok(Pool::builder(manager).max_size(size).build()?)
}

async fn websocket(
    State(shared): State<Arc<Shared>>,
    upgrade: WebSocketUpgrade,
) -> impl IntoResponse {
    upgrade.on_upgrade(move |socket| async move {
        if shared.acceptor.accept_axum(socket, None).is_err() {
            tracing::debug!("a client connected while the repo stopped");
        }
    })
}

/// 200 when the storage answers, 503 with the reason when it does not.
async fn health(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    let Some(pool) = &shared.pool else { return (StatusCode::OK, "ok\n".into()) };
    let answer = match pool.get().await {
        Ok(client) => client.simple_query("SELECT 1").await.map(|_| ()).map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    match answer {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("Postgres: {error}\n")),
    }
}

async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
