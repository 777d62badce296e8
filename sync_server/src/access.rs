//! Who may sync what, decided by Postgres: samod asks the share policy about each
//! (document, peer) pair, and the answer is the documents table's own privileges and
//! row-level security policies, queried as PostgREST does, in a transaction that is
//! rolled back: `set_config('role', <the token's role>, true)` (`SET LOCAL ROLE`) and
//! `set_config('request.jwt.claims', <the claims>, true)`, then
//!
//! - read-write when `SELECT … FOR KEY SHARE` returns the row: a locking read needs the
//!   UPDATE privilege, and row-level security applies the UPDATE policies' `USING`
//!   clauses to it beside the SELECT policies', so it sees exactly the rows the user may
//!   both read and update (the weakest lock, which no merge waits for);
//! - read-only when a plain `SELECT` returns it;
//! - read-write when no row has the id and an `INSERT` of it is allowed (the peer may
//!   create the document: the storage inserts its row as that peer, see `storage`);
//! - denied otherwise, and when Postgres cannot be asked (fail closed).
//!
//! A decision is a stream (see `samod::SharePolicy`): every NOTIFY about the document's
//! row, and every notification on the access channel (a sharing table's trigger, a
//! policy change), asks again, so a revoked peer stops at the next answer.
//!
//! samod asks about every (open document, connected peer) pair, not only the documents a
//! peer syncs. A pair stays undecided (samod shares nothing and holds the peer's messages
//! about the document) until the peer sends its first message about the document, which
//! the connection reports (`syncs`): Postgres is asked only about what peers sync, and a
//! bystander never becomes the creator of a document another peer is creating.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use futures::Stream;
use samod::{DocumentId, PeerId, ShareConfig, SharePolicy};
use tokio::sync::broadcast;

use crate::auth::Identity;
use crate::storage::describe;

/// What makes decisions be taken again.
#[derive(Clone, Debug, PartialEq)]
pub enum Recheck {
    /// The row of this document id changed.
    Document(String),
    /// Anything may have changed (a sharing table, a policy): every pair asks again.
    Everything,
}

/// How many rechecks may queue before a slow decision stream misses some (it then
/// decides again, as for `Everything`).
const RECHECK_QUEUE: usize = 4096;

/// The share policy, and the connected peers' identities it decides for.
#[derive(Clone)]
pub struct Access {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    sql: Statements,
    peers: Mutex<HashMap<PeerId, Peer>>,
    creators: Creators,
    rechecks: broadcast::Sender<Recheck>,
}

/// A connected peer.
struct Peer {
    identity: Identity,
    /// How many connections it has open.
    connections: usize,
    /// The documents it has sent messages about (at most
    /// `--max-documents-per-connection` per connection).
    documents: HashSet<String>,
}

/// The peers that were allowed to create a document that has no row yet, by document
/// id: the storage inserts the row as the first of them.
#[derive(Clone, Default)]
pub struct Creators(Arc<Mutex<HashMap<String, Identity>>>);

impl Creators {
    pub fn get(&self, document: &str) -> Option<Identity> {
        self.0.lock().expect("not poisoned").get(document).cloned()
    }

    pub fn created(&self, document: &str) {
        self.0.lock().expect("not poisoned").remove(document);
    }

    fn allowed(&self, document: &str, identity: &Identity) {
        self.0
            .lock()
            .expect("not poisoned")
            .entry(document.to_string())
            .or_insert_with(|| identity.clone());
    }

    /// The peer's last connection closed: the creations it did not make are not its any
    /// more (`find`s of ids no row has leave nothing behind).
    fn forget(&self, peer_id: &PeerId) {
        self.0.lock().expect("not poisoned").retain(|_, creator| creator.peer_id != *peer_id);
    }
}

struct Statements {
    may_update: String,
    may_select: String,
    may_insert: String,
}

/// Becomes the peer: `SET LOCAL ROLE` and `request.jwt.claims`, as PostgREST does.
pub const BECOME: &str =
    "SELECT set_config('role', $1, true), set_config('request.jwt.claims', $2, true)";

/// Back to the server's own role within the transaction.
pub const BECOME_SERVER: &str = "RESET ROLE; SELECT set_config('request.jwt.claims', '', true)";

/// What a peer may do with a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    ReadWrite,
    ReadOnly,
    Create,
    Deny,
}

impl Decision {
    fn share_config(self) -> ShareConfig {
        // Documents are not announced: a client syncs those it asks for (see `server`).
        match self {
            Decision::ReadWrite | Decision::Create => ShareConfig::read_write(),
            Decision::ReadOnly => ShareConfig::read_only(),
            Decision::Deny => ShareConfig::none(),
        }
        .with_announce(false)
    }
}

impl Access {
    pub fn new(pool: Pool, documents: &str, creators: Creators) -> Access {
        let sql = Statements {
            may_update: format!("SELECT 1 FROM {documents} WHERE id = $1 FOR KEY SHARE"),
            may_select: format!("SELECT 1 FROM {documents} WHERE id = $1"),
            may_insert: format!("INSERT INTO {documents} (id, doc) VALUES ($1, '\\x'::automerge)"),
        };
        let (rechecks, _) = broadcast::channel(RECHECK_QUEUE);
        let peers = Mutex::new(HashMap::new());
        Access { inner: Arc::new(Inner { pool, sql, peers, creators, rechecks }) }
    }

    /// A connection of `identity` opened: its peer is decided for with these claims
    /// (a newer token of the same peer replaces the older one's).
    pub fn connected(&self, identity: &Identity) {
        let mut peers = self.inner.peers.lock().expect("not poisoned");
        let peer = peers.entry(identity.peer_id.clone()).or_insert_with(|| Peer {
            identity: identity.clone(),
            connections: 0,
            documents: HashSet::new(),
        });
        peer.identity = identity.clone();
        peer.connections += 1;
        drop(peers);
        // Decisions already made for this peer were made with the older claims.
        let _ = self.inner.rechecks.send(Recheck::Everything);
    }

    pub fn disconnected(&self, peer_id: &PeerId) {
        let mut peers = self.inner.peers.lock().expect("not poisoned");
        if let Some(peer) = peers.get_mut(peer_id) {
            peer.connections -= 1;
            if peer.connections == 0 {
                peers.remove(peer_id);
                self.inner.creators.forget(peer_id);
            }
        }
    }

    /// The peer sent its first message about `document` on one of its connections.
    pub fn syncs(&self, peer_id: &PeerId, document: &str) {
        if let Some(peer) = self.inner.peers.lock().expect("not poisoned").get_mut(peer_id) {
            peer.documents.insert(document.to_string());
        }
        // Its pair waits undecided (see `decide`).
        self.recheck(Recheck::Document(document.to_string()));
    }

    pub fn recheck(&self, recheck: Recheck) {
        let _ = self.inner.rechecks.send(recheck);
    }

    /// What `peer_id` may do with `document` now; denied when it is not connected. None
    /// (undecided) while the peer has sent nothing about the document.
    pub async fn decide(&self, document: &str, peer_id: &PeerId) -> Option<Decision> {
        let peer = self
            .inner
            .peers
            .lock()
            .expect("not poisoned")
            .get(peer_id)
            .map(|peer| (peer.identity.clone(), peer.documents.contains(document)));
        let Some((identity, syncs)) = peer else { return Some(Decision::Deny) };
        if !syncs {
            return None;
        }
        match self.inner.query(document, &identity).await {
            Ok(decision) => {
                if decision == Decision::Create {
                    self.inner.creators.allowed(document, &identity);
                }
                tracing::debug!(document, peer_id = %peer_id, ?decision, "access decided");
                Some(decision)
            }
            Err(error) => {
                tracing::warn!(document, peer_id = %peer_id, %error, "access not decided: denied");
                Some(Decision::Deny)
            }
        }
    }
}

impl Inner {
    async fn query(&self, document: &str, identity: &Identity) -> anyhow::Result<Decision> {
        let mut client = self.pool.get().await?;
        let transaction = client.transaction().await?;
        let claims = identity.claims.to_string();
        if let Err(error) = transaction.execute(BECOME, &[&identity.role, &claims]).await {
            anyhow::bail!("becoming role {:?}: {}", identity.role, describe(&error));
        }
        // Each attempt under a savepoint: a missing privilege is an error, not an answer.
        // An INSERT that finds the row committed meanwhile (its creator's first change
        // being stored) looks again: each statement sees what committed before it.
        let mut looks = 0;
        let decision = loop {
            looks += 1;
            if attempt(&transaction, &self.sql.may_update, document).await? == Attempt::Rows {
                break Decision::ReadWrite;
            }
            if attempt(&transaction, &self.sql.may_select, document).await? == Attempt::Rows {
                break Decision::ReadOnly;
            }
            match attempt(&transaction, &self.sql.may_insert, document).await? {
                Attempt::Rows => break Decision::Create,
                Attempt::Exists if looks < 3 => continue,
                _ => break Decision::Deny,
            }
        };
        transaction.rollback().await?;
        Ok(decision)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// The statement touched a row.
    Rows,
    /// It touched none, or Postgres refused it (a privilege, a policy).
    Nothing,
    /// A row with the id exists (a unique violation).
    Exists,
}

/// What a statement does as the current role.
async fn attempt(
    transaction: &deadpool_postgres::Transaction<'_>,
    sql: &str,
    document: &str,
) -> Result<Attempt, tokio_postgres::Error> {
    transaction.batch_execute("SAVEPOINT access").await?;
    match transaction.execute(sql, &[&document]).await {
        Ok(rows) => {
            transaction.batch_execute("RELEASE SAVEPOINT access").await?;
            Ok(if rows > 0 { Attempt::Rows } else { Attempt::Nothing })
        }
        Err(error) if error.as_db_error().is_some() => {
            tracing::trace!(document, error = %describe(&error), "access attempt refused");
            transaction.batch_execute("ROLLBACK TO SAVEPOINT access").await?;
            let exists = error.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION);
            Ok(if exists { Attempt::Exists } else { Attempt::Nothing })
        }
        Err(error) => Err(error),
    }
}

impl SharePolicy for Access {
    fn share(
        &self,
        document: DocumentId,
        peer_id: PeerId,
    ) -> impl Stream<Item = ShareConfig> + Send + 'static {
        // Subscribed before the first decision, so no change after it is missed.
        let rechecks = self.inner.rechecks.subscribe();
        let state = (self.clone(), rechecks, document.to_string(), peer_id, true);
        futures::stream::unfold(
            state,
            |(access, mut rechecks, document, peer_id, first)| async move {
                let mut wait = !first;
                loop {
                    if wait && !wait_for_recheck(&mut rechecks, &document).await {
                        return None;
                    }
                    wait = true;
                    if let Some(decision) = access.decide(&document, &peer_id).await {
                        let state = (access, rechecks, document, peer_id, false);
                        return Some((decision.share_config(), state));
                    }
                }
            },
        )
    }
}

/// Waits until a recheck concerns `document`, then takes what else is queued (one
/// decision answers them all). False when the server is stopping.
async fn wait_for_recheck(rechecks: &mut broadcast::Receiver<Recheck>, document: &str) -> bool {
    loop {
        match rechecks.recv().await {
            Ok(Recheck::Document(id)) if id != document => continue,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => break,
            Err(broadcast::error::RecvError::Closed) => return false,
        }
    }
    while !matches!(
        rechecks.try_recv(),
        Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
    ) {}
    true
}
