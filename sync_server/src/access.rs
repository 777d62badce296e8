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

use std::collections::HashMap;
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
    /// Each connected peer's identity and how many connections it has open.
    peers: Mutex<HashMap<PeerId, (Identity, usize)>>,
    creators: Creators,
    rechecks: broadcast::Sender<Recheck>,
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

    /// The peer no longer syncs the document: a creation it did not make is not its any
    /// more (a `find` of an id no row has leaves nothing behind).
    fn forget(&self, document: &str, peer_id: &PeerId) {
        let mut creators = self.0.lock().expect("not poisoned");
        if creators.get(document).is_some_and(|creator| creator.peer_id == *peer_id) {
            creators.remove(document);
        }
    }
}

/// Held by a decision stream: when samod drops the stream (the peer no longer syncs the
/// document), the peer's pending creation of it is forgotten.
struct Subscription {
    access: Access,
    document: String,
    peer_id: PeerId,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.access.inner.creators.forget(&self.document, &self.peer_id);
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
        let entry = peers.entry(identity.peer_id.clone()).or_insert((identity.clone(), 0));
        entry.0 = identity.clone();
        entry.1 += 1;
        drop(peers);
        // Decisions already made for this peer were made with the older claims.
        let _ = self.inner.rechecks.send(Recheck::Everything);
    }

    pub fn disconnected(&self, peer_id: &PeerId) {
        let mut peers = self.inner.peers.lock().expect("not poisoned");
        if let Some(entry) = peers.get_mut(peer_id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                peers.remove(peer_id);
            }
        }
    }

    pub fn recheck(&self, recheck: Recheck) {
        let _ = self.inner.rechecks.send(recheck);
    }

    /// What `peer_id` may do with `document` now; denied when it is not connected.
    pub async fn decide(&self, document: &str, peer_id: &PeerId) -> Decision {
        let identity =
            self.inner.peers.lock().expect("not poisoned").get(peer_id).map(|e| e.0.clone());
        let Some(identity) = identity else { return Decision::Deny };
        match self.inner.query(document, &identity).await {
            Ok(decision) => {
                if decision == Decision::Create {
                    self.inner.creators.allowed(document, &identity);
                }
                tracing::debug!(document, peer_id = %peer_id, ?decision, "access decided");
                decision
            }
            Err(error) => {
                tracing::warn!(document, peer_id = %peer_id, %error, "access not decided: denied");
                Decision::Deny
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
        let decision = if attempt(&transaction, &self.sql.may_update, document).await? {
            Decision::ReadWrite
        } else if attempt(&transaction, &self.sql.may_select, document).await? {
            Decision::ReadOnly
        } else if attempt(&transaction, &self.sql.may_insert, document).await? {
            Decision::Create
        } else {
            Decision::Deny
        };
        transaction.rollback().await?;
        Ok(decision)
    }
}

/// Whether the statement touches a row as the current role: false when it finds none or
/// Postgres refuses it (a privilege, a policy, a row that exists unseen).
async fn attempt(
    transaction: &deadpool_postgres::Transaction<'_>,
    sql: &str,
    document: &str,
) -> Result<bool, tokio_postgres::Error> {
    transaction.batch_execute("SAVEPOINT access").await?;
    match transaction.execute(sql, &[&document]).await {
        Ok(rows) => {
            transaction.batch_execute("RELEASE SAVEPOINT access").await?;
            Ok(rows > 0)
        }
        Err(error) if error.as_db_error().is_some() => {
            tracing::trace!(document, error = %describe(&error), "access attempt refused");
            transaction.batch_execute("ROLLBACK TO SAVEPOINT access").await?;
            Ok(false)
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
        let subscription =
            Subscription { access: self.clone(), document: document.to_string(), peer_id };
        let state = (subscription, rechecks, true);
        futures::stream::unfold(state, |(subscription, mut rechecks, first)| async move {
            let Subscription { access, document, peer_id } = &subscription;
            if !first && !wait_for_recheck(&mut rechecks, document).await {
                return None;
            }
            let decision = access.decide(document, peer_id).await.share_config();
            Some((decision, (subscription, rechecks, false)))
        })
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
