//! The server: the repo on its storage, the axum router (the WebSocket endpoint at `/`
//! that automerge-repo's WebSocket client adapter connects to, `/health`), the LISTEN
//! task, and a shutdown that stops accepting, then flushes the repo to storage. The
//! upgrade to WebSocket checks the client's token (see `auth`), and each connection is
//! bound to the peer id the token names and held to the configured bounds.

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
use futures::{SinkExt, StreamExt};
use samod::{AcceptorEvent, AcceptorHandle, Repo, ShareConfig, Transport};
use tokio::net::TcpListener;
use tokio_postgres::NoTls;

use crate::access::{Access, Creators};
use crate::auth::{self, Identity, Verifier};
use crate::config::{Config, StorageChoice};
use crate::listen;
use crate::schema::{self, Tables};
use crate::storage::PostgresStorage;

/// What the handlers share.
struct Shared {
    acceptor: AcceptorHandle,
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

/// How long shutdown waits for the repo to flush what it holds to storage.
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
    let builder = Repo::build_tokio();
    let (repo, pool, gate) = match config.storage() {
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
            let builder = builder.with_storage(storage.clone());
            let (repo, gate) = match verifier {
                Some(verifier) => {
                    let access = Access::new(pool.clone(), &tables.documents, creators);
                    let repo = builder.with_share_policy(access.clone()).load().await;
                    (repo, Some(Gate { verifier, access }))
                }
                None => (builder.with_share_policy(open).load().await, None),
            };
            let channels = listen::Channels {
                documents: config.channel.clone(),
                access: gate.as_ref().map(|g| (config.access_channel.clone(), g.access.clone())),
            };
            tokio::spawn(listen::run(database_url.to_string(), channels, repo.clone(), storage));
            (repo, Some(pool), gate)
        }
        StorageChoice::Filesystem(dir) => {
            std::fs::create_dir_all(dir)?;
            let storage = samod::storage::TokioFilesystemStorage::new(dir);
            (builder.with_storage(storage).with_share_policy(open).load().await, None, None)
        }
    };
    if gate.is_none() {
        tracing::warn!("anonymous access (--allow-anonymous): anyone who reaches this server reads and writes every document whose id they know");
    }
    let acceptor = repo.make_acceptor(samod::Url::parse(&url)?)?;
    let shared = Arc::new(Shared {
        acceptor,
        pool,
        gate,
        max_message_bytes: config.max_message_bytes,
        max_documents_per_connection: config.max_documents_per_connection,
    });
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
    let mut transport = bounded_transport(socket, shared.max_documents_per_connection, syncs);
    if let Some(identity) = &identity {
        transport = transport.with_expected_peer_id(identity.peer_id.clone());
    }
    if let (Some(access), Some(identity)) = (access, &identity) {
        access.connected(identity);
    }
    match shared.acceptor.accept(transport) {
        Ok(connection) => {
            let mut events = connection.events();
            match connection.handshake_complete().await {
                Ok(_) => {
                    while let Some(event) = events.next().await {
                        if let AcceptorEvent::ClientDisconnected { reason, .. } = event {
                            tracing::debug!(?reason, "connection closed");
                            break;
                        }
                    }
                }
                // A peer id other than its token's ends here, among other failures.
                Err(reason) => tracing::info!(?reason, "a connection ended before its handshake"),
            }
        }
        Err(_) => tracing::debug!("a client connected while the repo stopped"),
    }
    if let (Some(access), Some(identity)) = (access, &identity) {
        access.disconnected(&identity.peer_id);
    }
}

/// Why the server closed a connection.
#[derive(Debug)]
struct Closed(String);

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Closed {}

/// The socket as samod's transport (binary messages both ways), closed when the client
/// sends a text message or a message about more than `max_documents` documents; `syncs`
/// hears of each document the client sends its first message about.
fn bounded_transport(
    socket: WebSocket,
    max_documents: usize,
    syncs: Option<impl Fn(&str) + Send + 'static>,
) -> Transport {
    let (sink, stream) = socket.split();
    let incoming = stream
        .scan(HashSet::new(), move |documents, message| {
            let item = match message {
                Ok(Message::Binary(bytes)) => match document_id(&bytes) {
                    Some(id) if !documents.contains(&id) && documents.len() >= max_documents => {
                        Some(Err(Closed(format!("more than {max_documents} documents"))))
                    }
                    Some(id) => {
                        if let Some(syncs) = &syncs {
                            if !documents.contains(&id) {
                                syncs(&id);
                            }
                        }
                        documents.insert(id);
                        Some(Ok(bytes.to_vec()))
                    }
                    None => Some(Ok(bytes.to_vec())),
                },
                Ok(Message::Text(_)) => Some(Err(Closed("a text message".into()))),
                Ok(Message::Close(_)) => return futures::future::ready(None),
                Ok(Message::Ping(_) | Message::Pong(_)) => None,
                Err(error) => Some(Err(Closed(error.to_string()))),
            };
            futures::future::ready(Some(item))
        })
        .filter_map(futures::future::ready);
    let outgoing = sink.with(|bytes: Vec<u8>| {
        futures::future::ready(Ok::<_, axum::Error>(Message::Binary(bytes.into())))
    });
    Transport::new(Box::pin(incoming), Box::pin(outgoing))
}

/// The `documentId` of a repo message (a CBOR map), if it has one.
fn document_id(message: &[u8]) -> Option<String> {
    let mut decoder = minicbor::Decoder::new(message);
    let fields = decoder.map().ok()??;
    for _ in 0..fields {
        if decoder.str().ok()? == "documentId" {
            return match decoder.datatype().ok()? {
                minicbor::data::Type::Bytes => Some(hex::encode(decoder.bytes().ok()?)),
                _ => decoder.str().ok().map(str::to_string),
            };
        }
        decoder.skip().ok()?;
    }
    None
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
