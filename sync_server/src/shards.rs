//! The server's documents shared among several samod repos behind one router of
//! automerge-repo's wire protocol. samod 0.16's hub checks every connection against every
//! open document on each event it handles, so one repo serving C connections and D
//! documents costs C × D per event, and a round of changes costs C × D × events. A repo
//! per share of the documents, holding only the connections that sync them, costs a share
//! of each.
//!
//! A client's connection makes its handshake with a repo that holds no documents; each
//! message about a document goes to the repo its id hashes to, over a connection of the
//! client's own to that repo, opened at the client's first message for it by replaying
//! the client's join message (that repo's answer to it is dropped: the client has had
//! one). What the repos send goes back on the client's socket. Every repo announces the
//! same peer id, so the client sees one server; each checks the client's peer id and asks
//! the share policy as a single repo would.

use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::hash::{Hash, Hasher};

use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use samod::storage::Storage;
use samod::{AcceptorEvent, AcceptorHandle, PeerId, Repo, SharePolicy, Transport};

/// A message from the client, with the document it is about (`documentId`), if any.
pub struct Routed {
    pub document: Option<String>,
    pub bytes: Vec<u8>,
}

/// The repos, and an acceptor of each.
pub struct Shards {
    /// The repo clients make their handshake with: it never holds a document.
    handshake: (Repo, AcceptorHandle),
    documents: Vec<(Repo, AcceptorHandle)>,
}

impl Shards {
    /// `count` repos of documents on `storage` under `policy`, and the handshake repo, all
    /// with one peer id.
    pub async fn load<S, A>(count: u16, storage: S, policy: A, url: &str) -> anyhow::Result<Shards>
    where
        S: Storage + Clone,
        A: SharePolicy,
    {
        let url = samod::Url::parse(url)?;
        let handshake = Repo::build_tokio().load().await;
        let peer_id = handshake.peer_id();
        let handshake_acceptor = handshake.make_acceptor(url.clone())?;
        let mut documents = Vec::with_capacity(usize::from(count.max(1)));
        for _ in 0..count.max(1) {
            let repo = Repo::build_tokio()
                .with_peer_id(peer_id.clone())
                .with_storage(storage.clone())
                .with_share_policy(policy.clone())
                .load()
                .await;
            let acceptor = repo.make_acceptor(url.clone())?;
            documents.push((repo, acceptor));
        }
        Ok(Shards { handshake: (handshake, handshake_acceptor), documents })
    }

    /// The peer id every repo announces.
    pub fn peer_id(&self) -> PeerId {
        self.handshake.0.peer_id()
    }

    fn shard_of(&self, document: &str) -> usize {
        let mut hasher = DefaultHasher::new();
        document.hash(&mut hasher);
        (hasher.finish() % self.documents.len() as u64) as usize
    }

    /// The repo that holds `document` (by its id as clients send it).
    pub fn repo_for(&self, document: &str) -> &Repo {
        &self.documents[self.shard_of(document)].0
    }

    /// Accepts no more connections.
    pub fn close(&self) {
        self.handshake.1.close();
        for (_, acceptor) in &self.documents {
            acceptor.close();
        }
    }

    /// Stops every repo, once each has flushed what it holds to storage.
    pub async fn stop(&self) {
        let stops = self.documents.iter().map(|(repo, _)| repo.stop());
        futures::future::join_all(stops.chain([self.handshake.0.stop()])).await;
    }

    /// Serves one client until its socket closes or a repo ends its connection: the
    /// messages of `incoming` to the repos, what the repos send to `outgoing`.
    pub async fn serve<In, Out>(
        &self,
        mut incoming: In,
        mut outgoing: Out,
        expected_peer_id: Option<PeerId>,
    ) -> Result<(), String>
    where
        In: Stream<Item = Result<Routed, String>> + Unpin,
        Out: Sink<Vec<u8>> + Unpin,
    {
        let join = match incoming.next().await {
            Some(Ok(first)) => first.bytes,
            Some(Err(reason)) => return Err(reason),
            None => return Ok(()),
        };
        let (to_client, mut from_repos) = mpsc::unbounded::<(Option<usize>, Vec<u8>)>();
        let mut finished = FuturesUnordered::new();
        let open = |acceptor: &AcceptorHandle, shard: Option<usize>, finished: &mut Finished| {
            let link = Link::open(acceptor, expected_peer_id.clone(), shard, to_client.clone())?;
            finished.push(link.finished);
            link.to_repo
                .unbounded_send(join.clone())
                .map_err(|_| "the repo stopped".to_string())?;
            Ok::<_, String>(link.to_repo)
        };
        let handshake = open(&self.handshake.1, None, &mut finished)?;
        let mut links: HashMap<usize, mpsc::UnboundedSender<Vec<u8>>> = HashMap::new();
        // The repos of documents whose answer to the replayed join is still to come.
        let mut answering: HashSet<usize> = HashSet::new();
        loop {
            tokio::select! {
                message = incoming.next() => match message {
                    None => return Ok(()),
                    Some(Err(reason)) => return Err(reason),
                    Some(Ok(Routed { document: Some(document), bytes })) => {
                        let shard = self.shard_of(&document);
                        let link = match links.entry(shard) {
                            Entry::Occupied(link) => link.into_mut(),
                            Entry::Vacant(place) => {
                                answering.insert(shard);
                                let acceptor = &self.documents[shard].1;
                                place.insert(open(acceptor, Some(shard), &mut finished)?)
                            }
                        };
                        link.unbounded_send(bytes).map_err(|_| "a repo stopped".to_string())?;
                    }
                    // `leave`, `remote-subscription-change`: every repo the client talks
                    // to hears them.
                    Some(Ok(Routed { document: None, bytes })) => {
                        for link in links.values().chain([&handshake]) {
                            let _ = link.unbounded_send(bytes.clone());
                        }
                    }
                },
                Some((shard, bytes)) = from_repos.next() => {
                    if let Some(shard) = shard {
                        if answering.contains(&shard) && field(&bytes, "type").as_deref() == Some("peer") {
                            answering.remove(&shard);
                            continue;
                        }
                    }
                    if outgoing.send(bytes).await.is_err() {
                        return Ok(());
                    }
                }
                Some(reason) = finished.next() => {
                    return Err(format!("a repo ended the connection: {reason}"));
                }
            }
        }
    }
}

type Finished = FuturesUnordered<BoxFuture<'static, String>>;

/// A connection of the client's own to one repo.
struct Link {
    to_repo: mpsc::UnboundedSender<Vec<u8>>,
    finished: BoxFuture<'static, String>,
}

impl Link {
    fn open(
        acceptor: &AcceptorHandle,
        expected_peer_id: Option<PeerId>,
        shard: Option<usize>,
        to_client: mpsc::UnboundedSender<(Option<usize>, Vec<u8>)>,
    ) -> Result<Link, String> {
        let (to_repo, from_client) = mpsc::unbounded::<Vec<u8>>();
        let incoming = from_client.map(Ok::<_, Infallible>);
        let outgoing = to_client
            .with(move |bytes| futures::future::ready(Ok::<_, mpsc::SendError>((shard, bytes))));
        let mut transport = Transport::new(incoming, Box::pin(outgoing));
        if let Some(peer_id) = expected_peer_id {
            transport = transport.with_expected_peer_id(peer_id);
        }
        let connection = acceptor.accept(transport).map_err(|_| "the repo stopped".to_string())?;
        let finished = async move {
            let mut events = connection.events();
            while let Some(event) = events.next().await {
                if let AcceptorEvent::ClientDisconnected { reason, .. } = event {
                    return format!("{reason:?}");
                }
            }
            "the repo stopped".to_string()
        };
        // Polled once now, so that it hears of the connection's end however soon it comes.
        let mut finished: BoxFuture<'static, String> = Box::pin(finished);
        if let Some(reason) = (&mut finished).now_or_never() {
            return Err(reason);
        }
        Ok(Link { to_repo, finished })
    }
}

/// A text field of a repo message (a CBOR map), if it has one; a `documentId` sent as
/// bytes reads as their hex.
pub fn field(message: &[u8], name: &str) -> Option<String> {
    let mut decoder = minicbor::Decoder::new(message);
    let fields = decoder.map().ok()??;
    for _ in 0..fields {
        if decoder.str().ok()? == name {
            return match decoder.datatype().ok()? {
                minicbor::data::Type::Bytes => Some(hex::encode(decoder.bytes().ok()?)),
                _ => decoder.str().ok().map(str::to_string),
            };
        }
        decoder.skip().ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use automerge::transaction::Transactable;
    use automerge::{Automerge, ReadDoc, ROOT};
    use samod::storage::InMemoryStorage;
    use samod::{BackoffConfig, DialError, Dialer, DocHandle, ShareConfig, Url};

    use super::*;

    /// Connects a client repo to the router over in-memory channels.
    struct RouterDialer(Arc<Shards>);

    impl Dialer for RouterDialer {
        type Error = Infallible;

        fn url(&self) -> Url {
            Url::parse("memory://router").unwrap()
        }

        fn connect(&self) -> BoxFuture<'static, Result<Transport, DialError<Infallible>>> {
            let shards = self.0.clone();
            Box::pin(async move {
                let (to_server, from_client) = mpsc::unbounded::<Vec<u8>>();
                let (to_client, from_server) = mpsc::unbounded::<Vec<u8>>();
                let incoming = from_client
                    .map(|bytes| Ok(Routed { document: field(&bytes, "documentId"), bytes }));
                tokio::spawn(async move { shards.serve(incoming, to_client, None).await });
                Ok(Transport::new(from_server.map(Ok::<_, Infallible>), to_server))
            })
        }
    }

    async fn client(shards: &Arc<Shards>) -> Repo {
        let repo = Repo::build_tokio().load().await;
        let dialer = repo.dial(BackoffConfig::default(), Arc::new(RouterDialer(shards.clone())));
        let dialer = dialer.expect("dialing");
        tokio::time::timeout(Duration::from_secs(10), dialer.established())
            .await
            .expect("a handshake within 10 s")
            .expect("a handshake");
        repo
    }

    fn title(handle: &DocHandle) -> Option<String> {
        handle.with_document(|doc| {
            doc.get(ROOT, "title").ok().flatten().map(|(value, _)| value.to_string())
        })
    }

    async fn eventually(what: &str, check: impl Fn() -> bool) {
        for _ in 0..200 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{what} within 10 s");
    }

    /// Documents on several repos sync between two clients through one connection each:
    /// found, then changed, as through one repo.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clients_sync_documents_held_by_several_repos_through_one_connection() {
        let policy = ShareConfig::read_write().with_announce(false);
        let shards = Shards::load(4, InMemoryStorage::new(), policy, "memory://router").await;
        let shards = Arc::new(shards.expect("the repos"));
        let (writer, reader) = (client(&shards).await, client(&shards).await);
        let mut made = Vec::new();
        for at in 0..8 {
            let mut doc = Automerge::new();
            let mut tx = doc.transaction();
            tx.put(ROOT, "title", format!("document {at}")).unwrap();
            tx.commit();
            made.push(writer.create(doc).await.expect("created"));
        }
        let repos: HashSet<_> =
            made.iter().map(|h| shards.shard_of(&h.document_id().to_string())).collect();
        assert!(repos.len() > 1, "eight documents on one of four repos: {repos:?}");
        for (at, handle) in made.iter().enumerate() {
            let found = tokio::time::timeout(
                Duration::from_secs(10),
                reader.find(handle.document_id().clone()),
            )
            .await
            .expect("found within 10 s")
            .expect("the repo runs")
            .expect("available");
            eventually("the reader has the title", || title(&found).is_some()).await;
            assert_eq!(title(&found), title(handle), "document {at}");
            handle.with_document(|doc| {
                let mut tx = doc.transaction();
                tx.put(ROOT, "title", format!("changed {at}")).unwrap();
                tx.commit();
            });
            let wanted = format!("\"changed {at}\"");
            eventually("the change reaches the reader", || {
                title(&found).as_deref() == Some(wanted.as_str())
            })
            .await;
        }
        shards.stop().await;
    }
}
