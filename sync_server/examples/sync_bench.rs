//! The benchmark's clients (samod, in one process), run by `cargo xtask bench --sync`
//! against a server it starts; each phase prints one JSON line of measurements.
//!
//!   sync_bench seed --url ws://… --documents N --ids FILE [--secret FILE]
//!   sync_bench first-sync --url ws://… --ids FILE [--secret FILE]
//!   sync_bench latency --url ws://… --pairs C --rounds R [--secret FILE]
//!
//! With `--secret`, each client connects with a token of its own signed with it (role
//! `bench_user`), as to a server with access control.
//!
//! `seed` creates N documents and waits until the server has every change of them;
//! `first-sync` has a fresh client find them all (documents per second); `latency` runs C
//! writer/reader pairs, each pair on its own document, all writers changing at once each
//! round, and times each change from the writer's commit until its reader has it (through
//! the server and its storage).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use automerge::transaction::Transactable;
use automerge::{AutoCommit, ObjType, ReadDoc, ROOT};
use futures::StreamExt;
use samod::{ConnectionId, DocHandle, DocumentId, PeerId, Repo};
use sync_server::auth::mint;
use sync_server::client::connect_as;
use sync_server::config::MintToken;

/// A change still not at its reader after this long counts as lost, and the run fails
/// with the round it was in. Generous: at 100 pairs a round takes seconds on a busy
/// machine (samod's hub is busy: see docs/sync-server.md).
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one step of setting up a pair (connect, create, the server's ack, the reader's
/// find) may take: later pairs wait behind samod's cost of the connections before them.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);
/// How many documents the first sync asks for at once.
const FIND_CONCURRENCY: usize = 50;
/// How many writer/reader pairs connect at once.
const SETUP_CONCURRENCY: usize = 10;

fn arg(args: &[String], name: &str) -> Result<String> {
    let at = args.iter().position(|a| a == name).with_context(|| format!("{name} is missing"))?;
    args.get(at + 1).cloned().with_context(|| format!("{name} needs a value"))
}

/// The server, and the secret its clients' tokens are signed with, if it checks them.
struct Server {
    url: String,
    secret: Option<String>,
}

impl Server {
    /// A client named `name` (its peer id, and its token's `sub`).
    async fn connect(&self, name: &str) -> Result<(Repo, ConnectionId)> {
        let Some(secret) = &self.secret else { return connect_as(&self.url, None).await };
        let token = mint(&MintToken {
            jwt_secret_file: secret.into(),
            sub: name.to_string(),
            role: "bench_user".to_string(),
            audience: None,
            expires_in_seconds: 3600,
        })?;
        connect_as(&format!("{}/?token={token}", self.url), Some(PeerId::from(name))).await
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server = Server { url: arg(&args, "--url")?, secret: arg(&args, "--secret").ok() };
    match args.first().map(String::as_str) {
        Some("seed") => {
            seed(&server, arg(&args, "--documents")?.parse()?, &arg(&args, "--ids")?).await
        }
        Some("first-sync") => first_sync(&server, &arg(&args, "--ids")?).await,
        Some("latency") => {
            let (pairs, rounds) = (arg(&args, "--pairs")?.parse()?, arg(&args, "--rounds")?);
            latency(&server, pairs, rounds.parse()?).await
        }
        other => bail!("unknown phase {other:?}: seed, first-sync or latency"),
    }
}

/// A small note-like document: a title, a text of a few hundred characters, tags.
fn document(n: usize) -> AutoCommit {
    let mut doc = AutoCommit::new();
    let title = doc.put_object(ROOT, "title", ObjType::Text).unwrap();
    doc.splice_text(&title, 0, 0, &format!("Document {n}")).unwrap();
    let body = doc.put_object(ROOT, "body", ObjType::Text).unwrap();
    doc.splice_text(&body, 0, 0, &"Lorem ipsum dolor sit amet. ".repeat(12)).unwrap();
    let tags = doc.put_object(ROOT, "tags", ObjType::List).unwrap();
    for (i, tag) in ["bench", "sync", "postgres"].into_iter().enumerate() {
        doc.insert(&tags, i, tag).unwrap();
    }
    doc
}

async fn seed(server: &Server, documents: usize, ids: &str) -> Result<()> {
    let (repo, connection) = server.connect("seed").await?;
    let started = Instant::now();
    let mut made = Vec::with_capacity(documents);
    for n in 0..documents {
        let handle = repo.create(document(n).document().clone()).await?;
        made.push(handle);
    }
    for handle in &made {
        tokio::time::timeout(ROUND_TIMEOUT, handle.they_have_our_changes(connection))
            .await
            .with_context(|| {
                format!("the server did not take a seeded document within {ROUND_TIMEOUT:?}")
            })?;
    }
    let list: Vec<String> = made.iter().map(|h| h.document_id().to_string()).collect();
    std::fs::write(ids, list.join("\n"))?;
    println!(
        r#"{{"phase":"seed","documents":{documents},"seconds":{}}}"#,
        started.elapsed().as_secs_f64()
    );
    repo.stop().await;
    Ok(())
}

async fn first_sync(server: &Server, ids: &str) -> Result<()> {
    let ids: Vec<DocumentId> = std::fs::read_to_string(ids)?
        .lines()
        .map(|line| line.parse().map_err(|_| anyhow::anyhow!("bad document id {line}")))
        .collect::<Result<_>>()?;
    let (repo, _) = server.connect("first-sync").await?;
    let started = Instant::now();
    let found: Vec<Result<bool>> = futures::stream::iter(ids.iter().cloned())
        .map(|id| {
            let repo = repo.clone();
            async move {
                let handle = tokio::time::timeout(ROUND_TIMEOUT, repo.find(id)).await??;
                Ok(handle.is_some_and(|h| h.with_document(|d| d.get(ROOT, "title").is_ok())))
            }
        })
        .buffer_unordered(FIND_CONCURRENCY)
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let missing = found.iter().filter(|f| !matches!(f, Ok(true))).count();
    if missing > 0 {
        bail!("{missing} of {} documents were not found", ids.len());
    }
    println!(r#"{{"phase":"first-sync","documents":{},"seconds":{seconds}}}"#, ids.len());
    repo.stop().await;
    Ok(())
}

/// A writer with a new document, and a reader that found it.
async fn pair(server: &Server, n: usize) -> Result<((Repo, DocHandle), (Repo, DocHandle))> {
    let (writer, connection) = server.connect(&format!("writer-{n}")).await?;
    let handle = writer.create(document(n).document().clone()).await?;
    tokio::time::timeout(SETUP_TIMEOUT, handle.they_have_our_changes(connection))
        .await
        .with_context(|| {
            format!("the server did not take pair {n}'s document within {SETUP_TIMEOUT:?}")
        })?;
    let (reader, _) = server.connect(&format!("reader-{n}")).await?;
    let found = tokio::time::timeout(SETUP_TIMEOUT, reader.find(handle.document_id().clone()))
        .await
        .with_context(|| {
            format!("pair {n}'s reader did not find its document within {SETUP_TIMEOUT:?}")
        })??
        .context("a reader did not find its pair's document")?;
    Ok(((writer, handle), (reader, found)))
}

async fn latency(server: &Server, pairs: usize, rounds: usize) -> Result<()> {
    // Every pair's writer and reader is a repo of its own, with its own connection; pairs
    // are set up a few at a time.
    let made: Vec<Result<_>> = futures::stream::iter(0..pairs)
        .map(|n| pair(server, n))
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    let (mut writers, mut readers) = (Vec::new(), Vec::new());
    for made in made {
        let (writer, reader) = made?;
        writers.push(writer);
        readers.push(reader);
    }
    let mut samples_ms = Vec::with_capacity(pairs * rounds);
    for round in 0..rounds {
        // Each reader waits for this round's value before its writer writes it.
        let waits: Vec<_> = readers
            .iter()
            .map(|(_, handle)| {
                let handle = handle.clone();
                let mut changes = handle.changes();
                tokio::spawn(async move {
                    let arrived = |round: usize| {
                        handle.with_document(|d| {
                            d.get(ROOT, "round").ok().flatten().and_then(|(v, _)| v.as_i64())
                                == Some(round as i64)
                        })
                    };
                    while !arrived(round) {
                        changes.next().await?;
                    }
                    Some(Instant::now())
                })
            })
            .collect();
        let mut sent = Vec::with_capacity(pairs);
        for (_, handle) in &writers {
            let started = Instant::now();
            handle.with_document(|d| {
                let mut tx = d.transaction();
                tx.put(ROOT, "round", round as i64).unwrap();
                tx.commit();
            });
            sent.push(started);
        }
        let arrived = tokio::time::timeout(ROUND_TIMEOUT, futures::future::join_all(waits)).await;
        let Ok(arrived) = arrived else {
            bail!("round {round} of {pairs} pairs: changes still missing after {ROUND_TIMEOUT:?}");
        };
        for (started, arrived) in sent.iter().zip(arrived) {
            let arrived = arrived?.context("a reader's change stream ended")?;
            samples_ms.push(arrived.duration_since(*started).as_secs_f64() * 1000.0);
        }
    }
    let samples: Vec<String> = samples_ms.iter().map(|ms| format!("{ms:.3}")).collect();
    println!(
        r#"{{"phase":"latency","pairs":{pairs},"rounds":{rounds},"samples_ms":[{}]}}"#,
        samples.join(",")
    );
    for (repo, _) in writers.into_iter().chain(readers) {
        repo.stop().await;
    }
    Ok(())
}
