//! A samod client of the server over plain WebSocket (loopback, tests, the benchmark):
//! samod's own WebSocket dialer needs its `tungstenite` feature, which pulls in a TLS stack
//! that a loopback client does not need.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use samod::{BackoffConfig, ConnectionId, DialError, Dialer, PeerId, Repo, Transport, Url};
use tokio_tungstenite::tungstenite::{self, Message};

/// Dials `ws://` URLs; samod reconnects through it with backoff.
pub struct WebSocketDialer(pub Url);

impl Dialer for WebSocketDialer {
    type Error = Infallible;

    fn url(&self) -> Url {
        self.0.clone()
    }

    fn connect(&self) -> BoxFuture<'static, Result<Transport, DialError<Infallible>>> {
        let url = self.0.clone();
        Box::pin(async move {
            let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
                .await
                .map_err(DialError::transient)?;
            let (sink, stream) = socket.split();
            let stream = stream.filter_map(|message| async move {
                match message {
                    Ok(Message::Binary(bytes)) => Some(Ok(bytes.to_vec())),
                    Ok(_) => None,
                    Err(error) => Some(Err(error)),
                }
            });
            let sink = sink.with(|bytes: Vec<u8>| async move {
                Ok::<_, tungstenite::Error>(Message::Binary(bytes.into()))
            });
            Ok(Transport::new(Box::pin(stream), Box::pin(sink)))
        })
    }
}

/// A repo with in-memory storage connected to the server at `url`, and its connection.
pub async fn connect(url: &str) -> anyhow::Result<(Repo, ConnectionId)> {
    connect_as(url, None).await
}

/// As [`connect`], with the repo's peer id (the one its token names, when `url` carries
/// a `token` parameter).
pub async fn connect_as(
    url: &str,
    peer_id: Option<PeerId>,
) -> anyhow::Result<(Repo, ConnectionId)> {
    let mut builder = Repo::build_tokio();
    if let Some(peer_id) = peer_id {
        builder = builder.with_peer_id(peer_id);
    }
    let repo = builder.load().await;
    let dialer =
        repo.dial(BackoffConfig::default(), Arc::new(WebSocketDialer(Url::parse(url)?)))?;
    tokio::time::timeout(Duration::from_secs(30), dialer.established())
        .await
        .map_err(|_| anyhow::anyhow!("no connection to {url} within 30s"))?
        .map_err(|e| anyhow::anyhow!("connecting to {url}: {e:?}"))?;
    let connection = dialer.connection_id().ok_or_else(|| anyhow::anyhow!("connection lost"))?;
    Ok((repo, connection))
}
