//! How the bench's connections run the soak's mix, which [`fixtures::load_mix::drive`]
//! drives (each statement kind picked by the soak's weights, the table growing by inserts
//! on its schedule); the incremental writes are the soak's JS-shaped edits. The client keeps
//! a replica of each row it owns, so every answer is checked against what the row must
//! hold: a wrong answer fails the run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use automerge::transaction::Transactable;
use automerge::{AutoCommit, ObjType, ReadDoc, ROOT};
use fixtures::js_edits::{self, counter_key};
use fixtures::load_mix::{self, Growth, Query, Step};
use fixtures::row_documents::{document, sample_index};
use serde_json::Value as Json;
use tokio_postgres::{Client, Statement};

/// Rows of the table when a run begins.
pub const DOCUMENTS: i64 = 256;
/// The text object that `automerge_spans` reads, in the documents that have one.
const TEXT: &str = "content";

/// Which connection of `connections` writes row `id` of the initial rows: contiguous
/// ranges, so that each connection has rows of every sample document.
pub fn owner(id: i64, connections: usize) -> usize {
    ((id - 1) as usize * connections) / DOCUMENTS as usize
}

/// One run's statements of one or all connections: how many, and each kind's latencies;
/// for the whole run, the CPU time each server (or the workers together) used.
#[derive(Default)]
pub struct Run {
    pub statements: usize,
    pub latencies: BTreeMap<Query, Vec<Duration>>,
    pub cpu: BTreeMap<&'static str, Duration>,
}

impl Run {
    pub fn add(&mut self, other: Run) {
        self.statements += other.statements;
        for (query, latencies) in other.latencies {
            self.latencies.entry(query).or_default().extend(latencies);
        }
    }
}

/// A row the connection writes, and what the client knows it holds.
struct Row {
    /// The incremental writes' replica: the row's document and every change sent since.
    fork: AutoCommit,
    /// The upserts' replica: only its own changes, so that its full save brings exactly
    /// one new change (as the soak's upserts do).
    upserts: Option<AutoCommit>,
    changes: usize,
    /// The count under the connection's counter key that the row holds, once written.
    counted: Option<u64>,
    sample: usize,
    /// `doc->>'title'`, which no write of the mix changes.
    title: Option<String>,
}

impl Row {
    fn new(id: i64) -> Result<Row> {
        let mut fork = document(id).fork();
        let json = pg_automerge_core::json::document(fork.document(), None)?;
        let title = json.get("title").map(|title| match title {
            Json::String(text) => text.clone(),
            other => other.to_string(),
        });
        let changes = fork.get_changes(&[]).len();
        Ok(Row { fork, upserts: None, changes, counted: None, sample: sample_index(id), title })
    }

    /// The row's heads, sorted: the fork's and the upserts' replica's, whose changes depend
    /// on nothing of the fork's.
    fn heads(&mut self) -> Vec<String> {
        let mut heads = self.fork.get_heads();
        if let Some(upserts) = &mut self.upserts {
            heads.extend(upserts.get_heads());
        }
        sorted_hex(heads)
    }

    fn has_text(&self) -> bool {
        let text = self.fork.get(ROOT, TEXT).ok().flatten();
        text.is_some_and(|(_, id)| self.fork.object_type(&id) == Ok(ObjType::Text))
    }
}

fn sorted_hex(heads: Vec<automerge::ChangeHash>) -> Vec<String> {
    let mut hex = pg_automerge_core::heads::to_hex(&heads);
    hex.sort();
    hex
}

/// The mix's statements, prepared once per connection.
struct Statements {
    upsert: Statement,
    incremental: Statement,
    title: Statement,
    containment: Statement,
    spans: Statement,
    history: Statement,
    merge: Statement,
}

impl Statements {
    async fn prepare(client: &Client) -> Result<Statements> {
        Ok(Statements {
            upsert: client
                .prepare(
                    "INSERT INTO docs AS t VALUES ($1, $2::bytea) \
                     ON CONFLICT (id) DO UPDATE SET doc = t.doc || EXCLUDED.doc",
                )
                .await?,
            incremental: client
                .prepare("UPDATE docs SET doc = doc || $1::bytea WHERE id = $2")
                .await?,
            title: client.prepare("SELECT doc->>'title' FROM docs WHERE id = $1").await?,
            containment: client
                .prepare("SELECT count(*) FROM docs WHERE doc::jsonb @> $1::text::jsonb")
                .await?,
            spans: client
                .prepare("SELECT automerge_spans(doc, $2::text[])::text FROM docs WHERE id = $1")
                .await?,
            history: client
                .prepare(
                    "SELECT automerge_heads(d.doc), c.changes,
                            automerge_to_jsonb(d.doc, c.first) IS NOT NULL
                     FROM docs d, LATERAL (
                         SELECT count(*) AS changes, (array_agg(hash))[1:1] AS first
                         FROM automerge_changes(d.doc)
                     ) c
                     WHERE d.id = $1",
                )
                .await?,
            merge: client
                .prepare("SELECT automerge_heads(merge_agg(doc)) FROM docs WHERE id = ANY($1)")
                .await?,
        })
    }
}

/// One connection running the mix on its rows.
pub struct Connection {
    worker: usize,
    client: Client,
    statements: Statements,
    rows: BTreeMap<i64, Row>,
    rng: fastrand::Rng,
    writes: u64,
    /// What it ran so far.
    ran: Run,
}

impl Connection {
    /// Connection `worker` of the run, writing `ids`, the rows it owns.
    pub async fn open(conninfo: &str, worker: usize, ids: &[i64]) -> Result<Connection> {
        let (client, connection) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let statements = Statements::prepare(&client).await?;
        let rows = ids.iter().map(|&id| Ok((id, Row::new(id)?))).collect::<Result<_>>()?;
        let rng = fastrand::Rng::with_seed(worker as u64 + 1);
        Ok(Connection { worker, client, statements, rows, rng, writes: 0, ran: Run::default() })
    }

    /// Runs the mix until the run's deadline, then checks that every row holds exactly
    /// the changes the connection sent.
    pub async fn run(mut self, growth: &Growth) -> Result<Run> {
        load_mix::drive(&mut self, growth).await?;
        self.verify_rows().await?;
        Ok(self.ran)
    }

    /// Runs one statement of kind `query` and checks its answer; returns how long the
    /// statement took, or nothing when the connection has no row it applies to.
    async fn statement(&mut self, query: Query) -> Result<Option<Duration>> {
        let latency = match query {
            Query::Incremental => self.incremental().await?,
            Query::Upsert => self.upsert().await?,
            Query::Title => self.title().await?,
            Query::Containment => self.containment().await?,
            Query::Spans => match self.pick(|row| row.has_text()) {
                Some(id) => self.spans(id).await?,
                None => return Ok(None),
            },
            Query::History => self.history().await?,
            Query::MergeAgg => self.merge_agg().await?,
            Query::Insert => unreachable!("inserts follow the growth schedule, not the mix"),
        };
        Ok(Some(latency))
    }

    /// A random row of this connection's that `wanted` accepts.
    fn pick(&mut self, wanted: impl Fn(&Row) -> bool) -> Option<i64> {
        let ids: Vec<i64> =
            self.rows.iter().filter(|(_, row)| wanted(row)).map(|(&id, _)| id).collect();
        (!ids.is_empty()).then(|| ids[self.rng.usize(..ids.len())])
    }

    fn any_row(&mut self) -> i64 {
        self.pick(|_| true).expect("every connection owns rows")
    }

    async fn insert(&mut self, id: i64) -> Result<Duration> {
        let save = document(id).save();
        let started = Instant::now();
        let inserted = self.client.execute(&self.statements.upsert, &[&id, &save]).await?;
        let latency = started.elapsed();
        ensure!(inserted == 1, "the insert of row {id} wrote {inserted} rows");
        self.rows.insert(id, Row::new(id)?);
        Ok(latency)
    }

    async fn incremental(&mut self) -> Result<Duration> {
        let id = self.any_row();
        self.writes += 1;
        let row = self.rows.get_mut(&id).expect("picked from the rows");
        js_edits::edit(&mut row.fork, &mut self.rng, self.worker, self.writes)?;
        row.fork.commit();
        let change = row.fork.get_last_local_change().context("a change was just committed")?;
        let started = Instant::now();
        let updated =
            self.client.execute(&self.statements.incremental, &[&change.raw_bytes(), &id]).await?;
        let latency = started.elapsed();
        ensure!(updated == 1, "doc || change on row {id} updated {updated} rows");
        row.changes += 1;
        row.counted = Some(self.writes);
        Ok(latency)
    }

    async fn upsert(&mut self) -> Result<Duration> {
        let id = self.any_row();
        self.writes += 1;
        let note: String = (0..self.rng.usize(64..512)).map(|_| self.rng.alphanumeric()).collect();
        let row = self.rows.get_mut(&id).expect("picked from the rows");
        // Keys of its own, so that the fork's counter key has one writer.
        let replica = row.upserts.get_or_insert_with(AutoCommit::new);
        replica.put(ROOT, format!("upsert_w{}", self.worker), self.writes as i64)?;
        replica.put(ROOT, format!("upsert_note_w{}", self.worker), note)?;
        replica.commit();
        let save = replica.save();
        let started = Instant::now();
        let upserted = self.client.execute(&self.statements.upsert, &[&id, &save]).await?;
        let latency = started.elapsed();
        ensure!(upserted == 1, "the upsert of row {id} wrote {upserted} rows");
        row.changes += 1;
        Ok(latency)
    }

    async fn title(&mut self) -> Result<Duration> {
        let id = self.any_row();
        let started = Instant::now();
        let title: Option<String> =
            self.client.query_one(&self.statements.title, &[&id]).await?.get(0);
        let latency = started.elapsed();
        ensure!(title == self.rows[&id].title, "row {id}: doc->>'title' is {title:?}");
        Ok(latency)
    }

    /// Looks up a count of this connection's, which only the row it last wrote holds; or,
    /// before the connection wrote anything, a count no row holds.
    async fn containment(&mut self) -> Result<Duration> {
        let (count, expected) = match self.pick(|row| row.counted.is_some()) {
            Some(id) => (self.rows[&id].counted.expect("picked for its count"), 1),
            None => (0, 0),
        };
        let pattern = serde_json::json!({ counter_key(self.worker): count }).to_string();
        let started = Instant::now();
        let found: i64 =
            self.client.query_one(&self.statements.containment, &[&pattern]).await?.get(0);
        let latency = started.elapsed();
        ensure!(found == expected, "{pattern} is in {found} rows, not {expected}");
        Ok(latency)
    }

    async fn spans(&mut self, id: i64) -> Result<Duration> {
        let path = vec![TEXT.to_string()];
        let started = Instant::now();
        let spans: String =
            self.client.query_one(&self.statements.spans, &[&id, &path]).await?.get(0);
        let latency = started.elapsed();
        let row = self.rows.get_mut(&id).expect("picked from the rows");
        let expected = pg_automerge_core::spans::spans(row.fork.document(), &path, None)?;
        ensure!(serde_json::from_str::<Json>(&spans)? == expected, "row {id}: spans {spans}");
        Ok(latency)
    }

    async fn history(&mut self) -> Result<Duration> {
        let id = self.any_row();
        let started = Instant::now();
        let answer = self.client.query_one(&self.statements.history, &[&id]).await?;
        let latency = started.elapsed();
        let (mut heads, changes, as_of): (Vec<String>, i64, bool) =
            (answer.get(0), answer.get(1), answer.get(2));
        heads.sort();
        let row = self.rows.get_mut(&id).expect("picked from the rows");
        ensure!(heads == row.heads(), "row {id}: heads {heads:?}");
        ensure!(
            changes as usize == row.changes,
            "row {id}: {changes} changes, not {}",
            row.changes
        );
        ensure!(as_of, "row {id}: no document as of its first change");
        Ok(latency)
    }

    /// Merges up to three rows made from the same sample: replicas of one document.
    async fn merge_agg(&mut self) -> Result<Duration> {
        let first = self.any_row();
        let sample = self.rows[&first].sample;
        let mut ids = vec![first];
        ids.extend((0..2).filter_map(|_| self.pick(|row| row.sample == sample)));
        ids.sort();
        ids.dedup();
        let started = Instant::now();
        let mut heads: Vec<String> =
            self.client.query_one(&self.statements.merge, &[&ids]).await?.get(0);
        let latency = started.elapsed();
        heads.sort();
        let mut merged = self.rows[&first].fork.clone();
        for id in &ids {
            let row = &self.rows[id];
            for replica in [Some(&row.fork), row.upserts.as_ref()].into_iter().flatten() {
                merged.merge(&mut replica.clone())?;
            }
        }
        ensure!(heads == sorted_hex(merged.get_heads()), "merge_agg of rows {ids:?}: {heads:?}");
        Ok(latency)
    }

    /// Every row the connection wrote holds exactly the changes it sent.
    async fn verify_rows(&mut self) -> Result<()> {
        let ids: Vec<i64> = self.rows.keys().copied().collect();
        let stored = self
            .client
            .query("SELECT id, automerge_heads(doc) FROM docs WHERE id = ANY($1)", &[&ids])
            .await?;
        ensure!(
            stored.len() == ids.len(),
            "{} of {} rows are in the table",
            stored.len(),
            ids.len()
        );
        for answer in stored {
            let (id, mut heads): (i64, Vec<String>) = (answer.get(0), answer.get(1));
            heads.sort();
            let row = self.rows.get_mut(&id).context("a row of another connection")?;
            ensure!(heads == row.heads(), "row {id} holds heads {heads:?} at the end");
        }
        Ok(())
    }
}

impl load_mix::Connection for Connection {
    type Error = anyhow::Error;

    fn rng(&mut self) -> &mut fastrand::Rng {
        &mut self.rng
    }

    /// Runs the step, checks its answer and counts its latency; a statement the connection
    /// has no row for is left out.
    async fn run_step(&mut self, step: Step) -> Result<()> {
        let (query, latency) = match step {
            Step::Insert(id) => (Query::Insert, self.insert(id).await?),
            Step::Statement(query) => {
                let Some(latency) = self.statement(query).await? else { return Ok(()) };
                (query, latency)
            }
        };
        self.ran.latencies.entry(query).or_default().push(latency);
        self.ran.statements += 1;
        Ok(())
    }
}
