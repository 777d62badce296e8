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
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::Duration;

use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt};
use samod::runtime::RuntimeHandle;
use samod::storage::Storage;
use samod::{AcceptorEvent, AcceptorHandle, PeerId, Repo, SharePolicy, Transport};
use tokio::sync::Mutex;
use tokio::task::AbortHandle;

/// A message from the client, with the document it is about (`documentId`), if any.
pub struct Routed {
    pub document: Option<String>,
    pub bytes: Vec<u8>,
}

/// The repos: one for handshakes, and one per share of the documents.
pub struct Shards {
    /// The repo clients make their handshake with: it never holds a document.
    handshake: (Repo, AcceptorHandle),
    shares: Vec<Mutex<Share>>,
    /// Makes a share's repo: at start, and to replace one that released its documents.
    build: Build,
    /// Set by [`Shards::close`]: repos are no longer replaced.
    closed: AtomicBool,
}

type Build = Box<dyn Fn() -> BoxFuture<'static, anyhow::Result<DocumentRepo>> + Send + Sync>;

/// The documents whose ids hash to one share, and the client connections syncing them.
///
/// samod 0.16 keeps every document a repo has opened until the repo stops, so when the
/// last connection linked to a share closes, the share's repo is stopped (flushing what
/// it holds to storage) and replaced by a fresh one: the share's memory then follows the
/// documents its connections hold, not the process's history.
struct Share {
    repo: DocumentRepo,
    /// How many client connections are linked to `repo`.
    links: usize,
    /// The documents clients sent messages about since `repo` started: those it may hold.
    asked: HashSet<String>,
}

/// A repo of documents, its acceptor, and its tasks.
struct DocumentRepo {
    repo: Repo,
    acceptor: AcceptorHandle,
    tasks: Tasks,
}

impl DocumentRepo {
    /// Stops the repo once it has flushed to storage, and frees what it held.
    async fn end(self) {
        self.acceptor.close();
        self.repo.stop().await;
        self.tasks.end();
    }
}

/// The tokio runtime, keeping a handle on each task a repo spawns. A stopped samod 0.16
/// repo leaves its tasks waiting on channels they keep open among themselves, holding
/// the repo's documents, until they are aborted.
#[derive(Clone)]
struct Tasks {
    runtime: tokio::runtime::Handle,
    spawned: Arc<SyncMutex<Vec<AbortHandle>>>,
}

impl Tasks {
    fn new() -> Tasks {
        Tasks { runtime: tokio::runtime::Handle::current(), spawned: Arc::default() }
    }

    fn end(&self) {
        for task in self.spawned.lock().expect("no task panics holding it").drain(..) {
            task.abort();
        }
    }
}

impl RuntimeHandle for Tasks {
    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {
        let task = self.runtime.spawn(task).abort_handle();
        let mut spawned = self.spawned.lock().expect("no task panics holding it");
        spawned.retain(|task| !task.is_finished());
        spawned.push(task);
    }

    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Returns memory glibc holds free to the system: a released repo's documents are many
/// small allocations that malloc would otherwise keep for reuse.
fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a plain integer and only touches malloc's own state.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Shards {
    /// `count` repos of documents on `storage` under `policy`, and the handshake repo, all
    /// with one peer id.
    pub async fn load<S, A>(count: u16, storage: S, policy: A, url: &str) -> anyhow::Result<Shards>
    where
        S: Storage,
        A: SharePolicy,
    {
        let url = samod::Url::parse(url)?;
        let handshake = Repo::build_tokio().load().await;
        let peer_id = handshake.peer_id();
        let handshake_acceptor = handshake.make_acceptor(url.clone())?;
        // Behind a lock only so that the closure is Sync whether or not they are.
        let parts = SyncMutex::new((storage, policy));
        let build: Build = Box::new(move || {
            let (storage, policy) = parts.lock().expect("cloning does not panic").clone();
            let (peer_id, url) = (peer_id.clone(), url.clone());
            Box::pin(async move {
                let tasks = Tasks::new();
                let repo = Repo::builder(tasks.clone())
                    .with_peer_id(peer_id)
                    .with_storage(storage)
                    .with_share_policy(policy)
                    .load()
                    .await;
                let acceptor = repo.make_acceptor(url)?;
                Ok(DocumentRepo { repo, acceptor, tasks })
            })
        });
        let mut shares = Vec::with_capacity(usize::from(count.max(1)));
        for _ in 0..count.max(1) {
            let repo = build().await?;
            shares.push(Mutex::new(Share { repo, links: 0, asked: HashSet::new() }));
        }
        Ok(Shards {
            handshake: (handshake, handshake_acceptor),
            shares,
            build,
            closed: AtomicBool::new(false),
        })
    }

    /// The peer id every repo announces.
    pub fn peer_id(&self) -> PeerId {
        self.handshake.0.peer_id()
    }

    fn share_of(&self, document: &str) -> usize {
        let mut hasher = DefaultHasher::new();
        document.hash(&mut hasher);
        (hasher.finish() % self.shares.len() as u64) as usize
    }

    /// The repo holding `document` (by its id as clients send it), if a client asked for
    /// it since that repo started; a document no client asked for is loaded from storage
    /// when one does.
    pub async fn holding(&self, document: &str) -> Option<Repo> {
        let share = self.shares[self.share_of(document)].lock().await;
        share.asked.contains(document).then(|| share.repo.repo.clone())
    }

    /// Accepts no more connections, and replaces no repo.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.handshake.1.close();
        for share in &self.shares {
            share.lock().await.repo.acceptor.close();
        }
    }

    /// Stops every repo, once each has flushed what it holds to storage.
    pub async fn stop(&self) {
        let stops = self.shares.iter().map(|share| async move {
            let share = share.lock().await;
            share.repo.repo.stop().await;
            share.repo.tasks.end();
        });
        futures::future::join_all(stops).await;
        self.handshake.0.stop().await;
    }

    /// Serves one client until its socket closes or a repo ends its connection: the
    /// messages of `incoming` to the repos, what the repos send to `outgoing`.
    pub async fn serve<In, Out>(
        &self,
        incoming: In,
        outgoing: Out,
        expected_peer_id: Option<PeerId>,
    ) -> Result<(), String>
    where
        In: Stream<Item = Result<Routed, String>> + Unpin,
        Out: Sink<Vec<u8>> + Unpin,
    {
        let mut linked = Vec::new();
        let served = self.route(incoming, outgoing, expected_peer_id, &mut linked).await;
        for share in linked {
            self.unlink(share).await;
        }
        served
    }

    /// [`Shards::serve`]'s work; `linked` gathers the shares it linked the client to.
    async fn route<In, Out>(
        &self,
        mut incoming: In,
        mut outgoing: Out,
        expected_peer_id: Option<PeerId>,
        linked: &mut Vec<usize>,
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
        let open = |acceptor: &AcceptorHandle, share: Option<usize>, finished: &mut Finished| {
            let link = Link::open(acceptor, expected_peer_id.clone(), share, to_client.clone())?;
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
        // The documents this client sent messages about, each recorded in its share.
        let mut asked: HashSet<String> = HashSet::new();
        loop {
            tokio::select! {
                message = incoming.next() => match message {
                    None => return Ok(()),
                    Some(Err(reason)) => return Err(reason),
                    Some(Ok(Routed { document: Some(document), bytes })) => {
                        let at = self.share_of(&document);
                        if !asked.contains(&document) {
                            let mut share = self.shares[at].lock().await;
                            if let Entry::Vacant(place) = links.entry(at) {
                                place.insert(open(&share.repo.acceptor, Some(at), &mut finished)?);
                                share.links += 1;
                                linked.push(at);
                                answering.insert(at);
                            }
                            share.asked.insert(document.clone());
                            asked.insert(document);
                        }
                        links[&at].unbounded_send(bytes).map_err(|_| "a repo stopped".to_string())?;
                    }
                    // `leave`, `remote-subscription-change`: every repo the client talks
                    // to hears them.
                    Some(Ok(Routed { document: None, bytes })) => {
                        for link in links.values().chain([&handshake]) {
                            let _ = link.unbounded_send(bytes.clone());
                        }
                    }
                },
                Some((share, bytes)) = from_repos.next() => {
                    if let Some(share) = share {
                        if answering.contains(&share) && field(&bytes, "type").as_deref() == Some("peer") {
                            answering.remove(&share);
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

    /// A client's connection to share `at` has closed; when it was the last, the share's
    /// repo gives way to a fresh one, and its documents to storage.
    async fn unlink(&self, at: usize) {
        let mut share = self.shares[at].lock().await;
        share.links -= 1;
        if share.links > 0 || share.asked.is_empty() || self.closed.load(Ordering::SeqCst) {
            return;
        }
        let fresh = match (self.build)().await {
            Ok(fresh) => fresh,
            Err(error) => {
                return tracing::warn!(share = at, %error, "could not start a repo to release a share's documents");
            }
        };
        let released = std::mem::replace(&mut share.repo, fresh);
        let documents = std::mem::take(&mut share.asked).len();
        // Under the share's lock, so that no client's first sync of a document reads
        // storage before the released repo has flushed it.
        released.end().await;
        drop(share);
        return_free_memory();
        tracing::debug!(
            share = at,
            documents,
            "released the documents of a share no connection syncs"
        );
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
    use futures::future::ready;
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

    async fn eventually<F, Fut>(what: &str, check: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        for _ in 0..200 {
            if check().await {
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
            made.iter().map(|h| shards.share_of(&h.document_id().to_string())).collect();
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
            eventually("the reader has the title", || ready(title(&found).is_some())).await;
            assert_eq!(title(&found), title(handle), "document {at}");
            handle.with_document(|doc| {
                let mut tx = doc.transaction();
                tx.put(ROOT, "title", format!("changed {at}")).unwrap();
                tx.commit();
            });
            let wanted = format!("\"changed {at}\"");
            eventually("the change reaches the reader", || {
                ready(title(&found).as_deref() == Some(wanted.as_str()))
            })
            .await;
        }
        shards.stop().await;
    }

    /// When a share's last connection closes, its repo hands what it holds to storage and
    /// gives way to a fresh one, which a later client's `find` loads the document into.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repo_whose_last_connection_closed_releases_its_documents_to_storage() {
        let policy = ShareConfig::read_write().with_announce(false);
        let shards = Shards::load(2, InMemoryStorage::new(), policy, "memory://router").await;
        let shards = Arc::new(shards.expect("the repos"));
        let writer = client(&shards).await;
        let mut doc = Automerge::new();
        let mut tx = doc.transaction();
        tx.put(ROOT, "title", "kept").unwrap();
        tx.commit();
        let made = writer.create(doc).await.expect("created");
        let id = made.document_id().clone();
        let held = || async { shards.holding(&id.to_string()).await.is_some() };
        // The writer's first sync message only announces the document; its content
        // follows, and must have reached the server's repo before the writer goes.
        let synced = || async {
            let Some(repo) = shards.holding(&id.to_string()).await else { return false };
            let found = tokio::time::timeout(Duration::from_secs(1), repo.find(id.clone())).await;
            matches!(found, Ok(Ok(Some(handle))) if title(&handle).is_some())
        };
        eventually("the repo holds the new document's title", synced).await;
        writer.stop().await;
        eventually("the document is released", || async { !held().await }).await;
        let reader = client(&shards).await;
        let found = tokio::time::timeout(Duration::from_secs(10), reader.find(id.clone()))
            .await
            .expect("found within 10 s")
            .expect("the repo runs")
            .expect("available from storage");
        eventually("the reader has the title", || ready(title(&found).is_some())).await;
        assert_eq!(title(&found).as_deref(), Some("\"kept\""));
        assert!(held().await, "the fresh repo holds the document again");
        shards.stop().await;
    }
}
