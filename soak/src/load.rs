//! The mixed load, as the soak's connections run it: [`fixtures::load_mix::drive`] picks
//! each step (writes and reads by the mix's weights, inserts on the table's growth
//! schedule), and a [`Worker`] runs it on rows any connection may write. Everything that
//! succeeded or failed is logged for the sampler, the checks and the report.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use anyhow::Result;
use automerge::transaction::{CommitOptions, Transactable};
use automerge::{ActorId, AutoCommit, Change, ROOT};
use fixtures::js_edits::{self as edits, counter_key, EditKind};
use fixtures::load_mix::{self, Growth, Step};
use tokio_postgres::Client;

use crate::documents::Catalogue;
use crate::Config;
use statements::Statements;

pub const TABLE: &str = "soak_documents";
pub const CHANNEL: &str = "soak_documents_changed";
pub const GIN_INDEX: &str = "soak_documents_body";
/// Rows that several connections write at once, to have concurrent writers on the same
/// rows (one of them a large document when the set has large ones).
const HOT_ROWS: i64 = 10;
/// How often each connection measures its own backend between statements.
const CONNECTION_MEMORY_EVERY_SECS: f64 = 10.0;
/// How many forks of large documents a connection keeps: each holds the whole document in
/// the client's memory; a row whose fork was dropped gets a new one, under a new actor.
const LARGE_FORKS_KEPT: usize = 1;

pub use fixtures::load_mix::Query;

mod statements;

/// A statement that ran: when (seconds since the load began), how long, on what.
#[derive(Clone, Copy)]
pub struct Timing {
    pub query: Query,
    pub large: bool,
    pub at: f64,
    pub millis: f64,
}

/// A committed incremental write: what it edited, whether the row held changes its
/// client had not seen (another connection's: the change does not depend on the heads),
/// how many loads the backend counted for it, and how long the statement took.
pub struct IncrementalLoads {
    pub kind: EditKind,
    pub large: bool,
    pub concurrent: bool,
    pub loads: i64,
    pub millis: f64,
}

/// A committed write and the changes it put in the row.
pub struct Write {
    pub id: i64,
    pub query: Query,
    pub hashes: Vec<String>,
}

pub struct Failure {
    pub query: Query,
    pub at: f64,
    pub message: String,
}

/// One connection's backend, measured between statements.
pub struct ConnectionMemory {
    pub worker: usize,
    pub at: f64,
    pub heap_bytes: i64,
    pub resident_bytes: i64,
    pub context_bytes: i64,
}

#[derive(Default)]
pub struct Log {
    pub timings: Vec<Timing>,
    pub writes: Vec<Write>,
    pub failures: Vec<Failure>,
    pub connection_memory: Vec<ConnectionMemory>,
    pub incremental_loads: Vec<IncrementalLoads>,
}

pub struct State {
    pub config: Config,
    pub catalogue: Arc<Catalogue>,
    /// The run's clock and the table's growth schedule, from when the load begins.
    growth: OnceLock<Growth>,
    /// Ids whose insert committed, for picking rows to read and write.
    rows: RwLock<Vec<i64>>,
    /// Each connection's count of writes, the value it puts under its key `soak_w<N>`.
    write_counts: Vec<AtomicU64>,
    /// The actors whose changes each row holds besides its document's.
    writers: Mutex<HashMap<i64, HashSet<ActorId>>>,
    pub log: Mutex<Log>,
}

impl State {
    pub fn new(config: Config, catalogue: Arc<Catalogue>) -> State {
        let write_counts = (0..config.connections).map(|_| AtomicU64::new(0)).collect();
        State {
            config,
            catalogue,
            growth: OnceLock::new(),
            rows: RwLock::new(Vec::new()),
            write_counts,
            writers: Mutex::new(HashMap::new()),
            log: Mutex::new(Log::default()),
        }
    }

    /// Inserts the first rows, before the clock starts.
    pub async fn seed_initial(&self, client: &Client) -> Result<()> {
        let statement = client.prepare(&insert_sql()).await?;
        for id in 1..=self.config.initial_documents as i64 {
            let document = self.catalogue.for_id(id);
            client.execute(&statement, &[&id, &document.name, &document.save]).await?;
            self.committed_insert(id);
        }
        Ok(())
    }

    fn committed_insert(&self, id: i64) {
        self.rows.write().unwrap().push(id);
        let hashes = self.catalogue.for_id(id).heads.clone();
        self.log.lock().unwrap().writes.push(Write { id, query: Query::Insert, hashes });
    }

    /// Logs a committed write of `change` by `actor` to row `id`.
    fn committed_write(&self, id: i64, query: Query, change: &Change, actor: &ActorId) {
        let hashes = vec![change.hash().to_string()];
        self.log.lock().unwrap().writes.push(Write { id, query, hashes });
        self.writers.lock().unwrap().entry(id).or_default().insert(actor.clone());
    }

    /// Whether row `id` holds changes of actors other than `actor` besides its document's.
    fn written_by_others(&self, id: i64, actor: &ActorId) -> bool {
        let writers = self.writers.lock().unwrap();
        writers.get(&id).is_some_and(|actors| actors.iter().any(|other| other != actor))
    }

    /// Starts the clock of [`State::seconds`] and the table's growth, when the load begins.
    pub fn start_clock(&self, begun: Instant) {
        let duration = Duration::from_secs(self.config.duration_secs);
        let (initial, last) = (self.config.initial_documents, self.config.final_documents);
        let growth = Growth::new(begun, duration, initial as i64, last as i64);
        assert!(self.growth.set(growth).is_ok(), "the load's clock starts once");
    }

    fn growth(&self) -> &Growth {
        self.growth.get().expect("the load's clock has started")
    }

    /// Seconds since the load began.
    pub fn seconds(&self) -> f64 {
        self.growth.get().map_or(0.0, Growth::seconds)
    }

    pub fn row_count(&self) -> usize {
        self.rows.read().unwrap().len()
    }

    pub fn successful_writes(&self) -> usize {
        self.log.lock().unwrap().writes.len()
    }

    fn random_row(&self, rng: &mut fastrand::Rng) -> i64 {
        let rows = self.rows.read().unwrap();
        rows[rng.usize(..rows.len())]
    }

    /// A row to write: one of the hot rows a quarter of the time.
    fn row_to_write(&self, rng: &mut fastrand::Rng) -> i64 {
        if rng.u32(..4) == 0 {
            rng.i64(1..=HOT_ROWS.min(self.config.initial_documents as i64))
        } else {
            self.random_row(rng)
        }
    }

    /// A random row whose document matches `wanted`, or none after a few tries.
    fn row_where(
        &self,
        rng: &mut fastrand::Rng,
        wanted: impl Fn(&crate::documents::Document) -> bool,
    ) -> Option<i64> {
        (0..32).map(|_| self.random_row(rng)).find(|&id| wanted(self.catalogue.for_id(id)))
    }

    fn record(
        &self,
        query: Query,
        id: Option<i64>,
        started: Instant,
        outcome: Result<(), tokio_postgres::Error>,
    ) -> bool {
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        let at = self.seconds();
        let large = id.is_some_and(|id| self.catalogue.for_id(id).large);
        let mut log = self.log.lock().unwrap();
        log.timings.push(Timing { query, large, at, millis });
        match outcome {
            Ok(()) => true,
            Err(error) => {
                let message = match error.as_db_error() {
                    Some(db) => {
                        format!("{} ({}): {}", db.severity(), db.code().code(), db.message())
                    }
                    None => error.to_string(),
                };
                log.failures.push(Failure { query, at, message });
                false
            }
        }
    }
}

/// Commits the replica's pending edit as one change, timed now, and returns it.
fn commit(doc: &mut AutoCommit) -> Change {
    let now_ms = chrono::Utc::now().timestamp_millis();
    doc.commit_with(CommitOptions::default().with_time(now_ms));
    doc.get_last_local_change().expect("a change was just committed").clone()
}

/// The row whose fork to drop to make room for one more fork of a large document: the
/// least recently used past [`LARGE_FORKS_KEPT`].
fn large_fork_to_drop(forks: &HashMap<i64, Fork>) -> Option<i64> {
    let large = forks.values().filter(|fork| fork.large).count();
    if large < LARGE_FORKS_KEPT {
        return None;
    }
    let oldest = forks.iter().filter(|(_, fork)| fork.large).min_by_key(|(_, fork)| fork.used);
    oldest.map(|(id, _)| *id)
}

pub fn insert_sql() -> String {
    format!(
        "INSERT INTO {TABLE} (id, kind, doc) VALUES ($1, $2, $3::bytea::automerge) \
         ON CONFLICT (id) DO UPDATE SET doc = {TABLE}.doc || excluded.doc"
    )
}

/// The table, its GIN index, the notification trigger, and pgstattuple for the index's
/// pending list.
pub async fn create_schema(client: &Client, config: &Config) -> Result<()> {
    let fastupdate = if config.gin_fastupdate { "on" } else { "off" };
    client
        .batch_execute(&format!(
            "CREATE EXTENSION pg_automerge;
             CREATE EXTENSION pgstattuple;
             CREATE TABLE {TABLE} (
                 id bigint PRIMARY KEY,
                 kind text NOT NULL,
                 doc automerge NOT NULL,
                 body jsonb GENERATED ALWAYS AS (doc::jsonb) STORED
             );
             CREATE INDEX {GIN_INDEX} ON {TABLE} USING gin (body) WITH (fastupdate = {fastupdate});
             CREATE TRIGGER {TABLE}_notify AFTER INSERT OR UPDATE OR DELETE ON {TABLE}
                 FOR EACH ROW EXECUTE FUNCTION automerge_notify('{CHANNEL}', 'doc', 'id');"
        ))
        .await?;
    Ok(())
}

/// Which of a connection's replicas of a row an actor writes.
#[derive(Clone, Copy)]
enum Role {
    /// The upserts' replica: only the changes it made itself, so that its full save brings
    /// exactly one new change.
    Upsert = 0,
    /// The incremental writes' replica: a fork of the row's document as a client opens it,
    /// which never sees the other connections' changes, so its writes to a row others write
    /// are concurrent with theirs.
    Fork = 1,
}

/// A connection's replicas of the rows it writes, and the generation of each row's actors.
#[derive(Default)]
struct Replicas {
    upserts: HashMap<i64, AutoCommit>,
    forks: HashMap<i64, Fork>,
    generations: HashMap<i64, u32>,
}

impl Replicas {
    /// The generation the row's next new replica writes its actor with.
    fn generation(&mut self, id: i64) -> u32 {
        *self.generations.entry(id).or_insert(0)
    }

    /// Drops the row's fork. Its actor wrote changes up to some seq, and a new fork starts
    /// at seq 1 again, so the row's next replicas take a new generation.
    fn drop_fork(&mut self, id: i64) {
        self.forks.remove(&id);
        *self.generations.entry(id).or_insert(0) += 1;
    }

    /// Drops both replicas of a row whose write failed: the replica holds a change the row
    /// lacks, and the next ones start new actors rather than depend on it.
    fn forget(&mut self, id: i64) {
        self.upserts.remove(&id);
        self.drop_fork(id);
    }
}

/// A fork a connection keeps, and when it last wrote through it.
struct Fork {
    doc: AutoCommit,
    large: bool,
    used: u64,
}

fn actor(role: Role, worker: usize, id: i64, generation: u32) -> ActorId {
    let mut bytes = Vec::with_capacity(17);
    bytes.push(role as u8);
    bytes.extend_from_slice(&(worker as u32).to_be_bytes());
    bytes.extend_from_slice(&id.to_be_bytes());
    bytes.extend_from_slice(&generation.to_be_bytes());
    ActorId::from(bytes)
}

/// A backend's Rust heap between statements once the load stopped.
#[derive(Debug, Clone, Copy)]
pub struct IdleHeap {
    /// As the load left it: the structure indexes it holds for its next writes, and
    /// whatever else stayed.
    pub bytes: i64,
    /// What `pg_automerge.index_cache` lets it hold.
    pub index_cache_bytes: i64,
    /// Once `pg_automerge.index_cache = 0` let the held indexes go: whatever else stayed.
    pub without_indexes: i64,
}

/// One connection of the soak: its backend, its replicas of the rows it writes, and when
/// it next measures its backend.
pub struct Worker {
    worker: usize,
    client: Client,
    state: Arc<State>,
    statements: Statements,
    rng: fastrand::Rng,
    replicas: Replicas,
    next_memory_sample: f64,
}

/// Runs the mix on one connection until the load's deadline; returns the backend's Rust
/// heap between statements at the end.
pub async fn work(worker: usize, client: Client, state: Arc<State>) -> Result<IdleHeap> {
    let statements = Statements::prepare(&client).await?;
    let mut connection = Worker {
        worker,
        client,
        state: state.clone(),
        statements,
        rng: fastrand::Rng::with_seed(worker as u64 + 1),
        replicas: Replicas::default(),
        next_memory_sample: 0.0,
    };
    load_mix::drive(&mut connection, state.growth()).await?;
    connection.idle_heap().await
}

impl Worker {
    /// Measures the backend between statements, every [`CONNECTION_MEMORY_EVERY_SECS`].
    async fn sample_memory(&mut self) -> Result<()> {
        if self.state.seconds() < self.next_memory_sample {
            return Ok(());
        }
        let row = self.client.query_one(&self.statements.memory, &[]).await?;
        self.state.log.lock().unwrap().connection_memory.push(ConnectionMemory {
            worker: self.worker,
            at: self.state.seconds(),
            heap_bytes: row.get(0),
            resident_bytes: row.get(1),
            context_bytes: row.get(2),
        });
        self.next_memory_sample = self.state.seconds() + CONNECTION_MEMORY_EVERY_SECS;
        Ok(())
    }

    async fn insert(&mut self, id: i64) -> Result<()> {
        let document = self.state.catalogue.for_id(id);
        let started = Instant::now();
        let outcome = self
            .client
            .execute(&self.statements.insert, &[&id, &document.name, &document.save])
            .await
            .map(drop);
        if self.state.record(Query::Insert, Some(id), started, outcome) {
            self.state.committed_insert(id);
        }
        Ok(())
    }

    async fn statement(&mut self, query: Query) -> Result<()> {
        match query {
            Query::Incremental => {
                let id = self.state.row_to_write(&mut self.rng);
                let generation = self.replicas.generation(id);
                let document = self.state.catalogue.for_id(id);
                let used = self.state.write_counts[self.worker].fetch_add(1, Ordering::SeqCst) + 1;
                if !self.replicas.forks.contains_key(&id) && document.large {
                    if let Some(dropped) = large_fork_to_drop(&self.replicas.forks) {
                        self.replicas.drop_fork(dropped);
                    }
                }
                let fork = self.replicas.forks.entry(id).or_insert_with(|| Fork {
                    doc: document.fork(actor(Role::Fork, self.worker, id, generation)),
                    large: document.large,
                    used,
                });
                fork.used = used;
                let kind = edits::edit(&mut fork.doc, &mut self.rng, self.worker, used)?;
                let change = commit(&mut fork.doc);
                let concurrent = self.state.written_by_others(id, fork.doc.get_actor());
                let before: i64 = self.client.query_one(&self.statements.loads, &[]).await?.get(0);
                let started = Instant::now();
                let outcome = self
                    .client
                    .execute(&self.statements.incremental, &[&change.raw_bytes(), &id])
                    .await;
                let millis = started.elapsed().as_secs_f64() * 1000.0;
                let updated = outcome.as_ref().is_ok_and(|&rows| rows == 1);
                if self.state.record(query, Some(id), started, outcome.map(drop)) {
                    let after: i64 =
                        self.client.query_one(&self.statements.loads, &[]).await?.get(0);
                    if updated {
                        self.state.committed_write(id, query, &change, fork.doc.get_actor());
                        self.state.log.lock().unwrap().incremental_loads.push(IncrementalLoads {
                            kind,
                            large: document.large,
                            concurrent,
                            loads: after - before,
                            millis,
                        });
                    }
                } else {
                    self.replicas.forget(id);
                }
            }
            Query::Upsert => {
                let id = self.state.row_to_write(&mut self.rng);
                let generation = self.replicas.generation(id);
                let replica = self.replicas.upserts.entry(id).or_insert_with(|| {
                    AutoCommit::new().with_actor(actor(Role::Upsert, self.worker, id, generation))
                });
                let count = self.state.write_counts[self.worker].fetch_add(1, Ordering::SeqCst) + 1;
                replica.put(ROOT, counter_key(self.worker), count as i64)?;
                let note: String =
                    (0..self.rng.usize(64..512)).map(|_| self.rng.alphanumeric()).collect();
                replica.put(ROOT, format!("soak_note_w{}", self.worker), note)?;
                let change = commit(replica);
                let save = replica.save();
                let started = Instant::now();
                let outcome = self
                    .client
                    .execute(
                        &self.statements.insert,
                        &[&id, &self.state.catalogue.for_id(id).name, &save],
                    )
                    .await;
                let updated = outcome.as_ref().is_ok_and(|&rows| rows == 1);
                if self.state.record(query, Some(id), started, outcome.map(drop)) {
                    if updated {
                        self.state.committed_write(id, query, &change, replica.get_actor());
                    }
                } else {
                    self.replicas.forget(id);
                }
            }
            Query::Title => {
                let id = self.state.random_row(&mut self.rng);
                let started = Instant::now();
                let outcome = self.client.query_one(&self.statements.title, &[&id]).await.map(drop);
                self.state.record(query, Some(id), started, outcome);
            }
            Query::Containment => {
                let other = self.rng.usize(..self.state.config.connections);
                let written = self.state.write_counts[other].load(Ordering::SeqCst).max(1);
                let pattern = serde_json::json!({ counter_key(other): self.rng.u64(1..=written) })
                    .to_string();
                let started = Instant::now();
                let outcome = self
                    .client
                    .query_one(&self.statements.containment, &[&pattern])
                    .await
                    .map(drop);
                self.state.record(query, None, started, outcome);
            }
            Query::Spans => {
                let Some(id) =
                    self.state.row_where(&mut self.rng, |document| document.text_path.is_some())
                else {
                    return Ok(());
                };
                let path = self.state.catalogue.for_id(id).text_path.clone();
                let started = Instant::now();
                let outcome =
                    self.client.query_one(&self.statements.spans, &[&id, &path]).await.map(drop);
                self.state.record(query, Some(id), started, outcome);
            }
            Query::History => {
                let id = self.state.random_row(&mut self.rng);
                let started = Instant::now();
                let outcome =
                    self.client.query_one(&self.statements.history, &[&id]).await.map(drop);
                self.state.record(query, Some(id), started, outcome);
            }
            Query::MergeAgg => {
                // Replicas of one document: rows made from the same fixture, each with its own
                // writes. (Unrelated documents may reuse an actor's sequence numbers, which
                // Automerge refuses to merge.)
                let Some(first) = self.state.row_where(&mut self.rng, |document| !document.large)
                else {
                    return Ok(());
                };
                let name = self.state.catalogue.for_id(first).name.clone();
                let mut ids = vec![first];
                ids.extend((0..2).filter_map(|_| {
                    self.state.row_where(&mut self.rng, |document| document.name == name)
                }));
                let started = Instant::now();
                let outcome =
                    self.client.query_one(&self.statements.merge, &[&ids]).await.map(drop);
                self.state.record(query, None, started, outcome);
            }
            Query::Insert => unreachable!("inserts follow the growth schedule, not the mix"),
        }
        Ok(())
    }

    /// The backend's Rust heap between statements once the load stopped.
    async fn idle_heap(self) -> Result<IdleHeap> {
        let bytes: i64 = self.client.query_one(&self.statements.memory, &[]).await?.get(0);
        let index_cache_mb: String = self
            .client
            .query_one(
                "SELECT setting FROM pg_settings WHERE name = 'pg_automerge.index_cache'",
                &[],
            )
            .await?
            .get(0);
        // The SET's transaction end lets the held indexes go.
        self.client.batch_execute("SET pg_automerge.index_cache = 0").await?;
        let without_indexes: i64 =
            self.client.query_one(&self.statements.memory, &[]).await?.get(0);
        Ok(IdleHeap {
            bytes,
            index_cache_bytes: index_cache_mb.parse::<i64>()? << 20,
            without_indexes,
        })
    }
}

impl load_mix::Connection for Worker {
    type Error = anyhow::Error;

    fn rng(&mut self) -> &mut fastrand::Rng {
        &mut self.rng
    }

    async fn run_step(&mut self, step: Step) -> Result<()> {
        self.sample_memory().await?;
        match step {
            Step::Insert(id) => self.insert(id).await,
            Step::Statement(query) => self.statement(query).await,
        }
    }
}
