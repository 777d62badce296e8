//! The server: the repos on their storage (see `shards`), the axum router (the WebSocket
//! endpoint at `/` that automerge-repo's WebSocket client adapter connects to, `/health`),
//! the LISTEN task, and a shutdown that stops accepting, then flushes the repos to
//! storage. The upgrade to WebSocket checks the client's token (see `auth`), and each
//! connection is bound to the peer id the token names and held to the configured bounds.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::{SinkExt, Stream, StreamExt};
use samod::{PeerId, ShareConfig};
use tokio::net::TcpListener;
use tokio_postgres::NoTls;

use crate::access::{Access, Creators};
use crate::auth::{self, Identity, Verifier};
use crate::config::{Config, StorageChoice};
use crate::listen;
use crate::schema::{self, Tables};
use crate::shards::{field, Routed, Shards};
use crate::storage::PostgresStorage;

/// What the handlers share.
struct Shared {
    shards: Arc<Shards>,
    /// None on file-system storage, whose health is the process's.
    pool: Option<Pool>,
    /// None when anyone may connect (`--allow-anonymous`).
    gate: Option<Gate>,
    max_message_bytes: usize,
    max_documents_per_connection: usize,
}

/// Who may connect, and the share policy that knows them.
struct Gate {
    verifier: Verifier,
    access: Access,
}

/// How long shutdown waits for the repos to flush what they hold to storage.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let url = format!("ws://{}", listener.local_addr()?);
    let verifier = config.verifier()?;
    // Like automerge-repo's own sync server: documents are not announced to every
    // client; a client syncs the documents it asks for, and from then on every change.
    let open = ShareConfig::read_write().with_announce(false);
    let shards = config.shards;
    let (shards, pool, gate) = match config.storage() {
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
            let creators = Creators::default();
            let storage = PostgresStorage::new(pool.clone(), &tables, creators.clone());
            let (repos, gate) = match verifier {
                Some(verifier) => {
                    let access = Access::new(pool.clone(), &tables.documents, creators);
                    let repos = Shards::load(shards, storage.clone(), access.clone(), &url).await?;
                    (repos, Some(Gate { verifier, access }))
                }
                None => (Shards::load(shards, storage.clone(), open, &url).await?, None),
            };
            let repos = Arc::new(repos);
            let channels = listen::Channels {
                documents: config.channel.clone(),
                access: gate.as_ref().map(|g| (config.access_channel.clone(), g.access.clone())),
            };
            tokio::spawn(listen::run(database_url.to_string(), channels, repos.clone(), storage));
            (repos, Some(pool), gate)
        }
        StorageChoice::Filesystem(dir) => {
            std::fs::create_dir_all(dir)?;
            let storage = samod::storage::TokioFilesystemStorage::new(dir);
            (Arc::new(Shards::load(shards, storage, open, &url).await?), None, None)
        }
    };
    if gate.is_none() {
        tracing::warn!("anonymous access (--allow-anonymous): anyone who reaches this server reads and writes every document whose id they know");
    }
    let peer_id = shards.peer_id();
    let shared = Arc::new(Shared {
        shards: shards.clone(),
        pool,
        gate,
        max_message_bytes: config.max_message_bytes,
        max_documents_per_connection: config.max_documents_per_connection,
    });
    let app = Router::new()
        .route("/", get(websocket))
        .route("/health", get(health))
        .with_state(shared.clone());
    tracing::info!(%url, %peer_id, shards = config.shards, "serving");
    // The line scripts read to learn the port when --listen asked for port 0.
    println!("listening on {url}");
    std::io::stdout().flush()?;
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
    tracing::info!("shutting down: closing connections and flushing the repos");
    shards.close().await;
    if tokio::time::timeout(FLUSH_TIMEOUT, shards.stop()).await.is_err() {
        tracing::error!("the repos did not flush to storage within {FLUSH_TIMEOUT:?}");
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

/// The upgrade: refused with a bare 401 unless the client proves who it is (or anyone
/// may connect), then a connection bound to that peer id.
async fn websocket(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let identity = match &shared.gate {
        None => None,
        Some(gate) => match identify(&gate.verifier, &headers, &query) {
            Ok(identity) => Some(identity),
            Err(reason) => {
                tracing::info!(%reason, "refused a connection");
                return StatusCode::UNAUTHORIZED.into_response();
            }
        },
    };
    upgrade
        .max_message_size(shared.max_message_bytes)
        .on_upgrade(move |socket| serve_connection(shared, socket, identity))
        .into_response()
}

fn identify(
    verifier: &Verifier,
    headers: &HeaderMap,
    query: &[(String, String)],
) -> anyhow::Result<Identity> {
    match auth::token(headers, query) {
        Some(token) => verifier.verify(token),
        None => verifier
            .anonymous(auth::parameter(query, auth::PEER_PARAMETER))
            .context("no token (and no anonymous role, or no anonymous- peer id)"),
    }
}

async fn serve_connection(shared: Arc<Shared>, socket: WebSocket, identity: Option<Identity>) {
    let access = shared.gate.as_ref().map(|gate| &gate.access);
    // The documents the peer syncs, for its share policy (see `access`).
    let syncs = match (access, &identity) {
        (Some(access), Some(identity)) => {
            let (access, peer_id) = (access.clone(), identity.peer_id.clone());
            Some(move |document: &str| access.syncs(&peer_id, document))
        }
        _ => None,
    };
    if let (Some(access), Some(identity)) = (access, &identity) {
        access.connected(identity);
    }
    let (sink, stream) = socket.split();
    let incoming = bounded_messages(stream, shared.max_documents_per_connection, syncs);
    let outgoing = sink.with(|bytes: Vec<u8>| {
        futures::future::ready(Ok::<_, axum::Error>(Message::Binary(bytes.into())))
    });
    let expected_peer_id = identity.as_ref().map(|identity| identity.peer_id.clone());
    // Without access control a peer names itself in its handshake, which the log has not read.
    let peer =
        expected_peer_id.as_ref().map_or_else(|| "unauthenticated".into(), PeerId::to_string);
    tracing::info!(peer, "connection opened");
    // A peer id other than its token's ends here, among other failures.
    match shared.shards.serve(Box::pin(incoming), Box::pin(outgoing), expected_peer_id).await {
        Ok(()) => tracing::info!(peer, "connection closed"),
        Err(reason) => tracing::info!(peer, %reason, "connection closed"),
    }
    if let (Some(access), Some(identity)) = (access, &identity) {
        access.disconnected(&identity.peer_id);
    }
}

/// The socket's messages with the document each is about, ended with the reason when
/// the client sends a text message or a message about more than `max_documents`
/// documents; `syncs` hears of each document the client sends its first message about.
fn bounded_messages(
    stream: impl Stream<Item = Result<Message, axum::Error>>,
    max_documents: usize,
    syncs: Option<impl Fn(&str) + Send + 'static>,
) -> impl Stream<Item = Result<Routed, String>> {
    stream
        .scan(HashSet::new(), move |documents, message| {
            let item = match message {
                Ok(Message::Binary(bytes)) => match field(&bytes, "documentId") {
                    Some(id) if !documents.contains(&id) && documents.len() >= max_documents => {
                        Some(Err(format!("more than {max_documents} documents")))
                    }
                    Some(id) => {
                        if let Some(syncs) = &syncs {
                            if !documents.contains(&id) {
                                syncs(&id);
                            }
                        }
                        documents.insert(id.clone());
                        Some(Ok(Routed { document: Some(id), bytes: bytes.to_vec() }))
                    }
                    None => Some(Ok(Routed { document: None, bytes: bytes.to_vec() })),
                },
                Ok(Message::Text(_)) => Some(Err("a text message".to_string())),
                Ok(Message::Close(_)) => return futures::future::ready(None),
                Ok(Message::Ping(_) | Message::Pong(_)) => None,
                Err(error) => Some(Err(error.to_string())),
            };
            futures::future::ready(Some(item))
        })
        .filter_map(futures::future::ready)
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
