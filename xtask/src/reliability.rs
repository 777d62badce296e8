//! `cargo xtask test`'s reliability step, per major: scenarios that need more than one
//! cluster, or a cluster that dies. Writers keep writing while a backend and then the
//! postmaster are killed with SIGKILL; a hot standby made by pg_basebackup, and logical
//! subscribers in text and binary mode, must serve the primary's documents; a custom-format
//! dump must restore byte-identical; and the frozen install scripts of released versions
//! must install and upgrade to what a fresh install of the current version creates.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ReadDoc, ROOT};
use tokio_postgres::NoTls;
use xshell::Shell;

use crate::cluster::Cluster;
use crate::install;
use crate::postgres::PgMajor;
use crate::util::{note, Checks, Counts};
use cluster_tests::line_differences;
use cluster_tests::server::sigkill;
use cluster_tests::versions;

/// The database the scenarios write in, on the primary.
const DATABASE: &str = "reliability";

/// What the step found: the checks' counts, and how many crashes the cluster came back from
/// with every acknowledged write in place.
pub struct Outcome {
    pub counts: Counts,
    pub crashes_survived: usize,
    pub upgrades: usize,
}

pub fn run(sh: &Shell, major: PgMajor) -> Result<Outcome> {
    let primary =
        Cluster::new(sh, major, "reliability-primary")?.with_setting("wal_level", "logical");
    // What the standby must show is what it replays: its own durability is not under test,
    // and without fsync it skips syncing the copied data directory as it starts.
    let standby = Cluster::new(sh, major, "reliability-standby")?.with_setting("fsync", "off");
    let subscriber = Cluster::new(sh, major, "reliability-subscriber")?;
    let outcome = scenarios(&primary, &standby, &subscriber);
    for cluster in [&subscriber, &standby, &primary] {
        cluster.stop()?;
    }
    outcome
}

fn scenarios(primary: &Cluster, standby: &Cluster, subscriber: &Cluster) -> Result<Outcome> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    primary.wipe()?;
    primary.init()?;
    primary.start()?;
    primary.psql("postgres", &format!("CREATE DATABASE {DATABASE};"))?;
    primary.psql(DATABASE, &documents_script())?;

    let mut checks = Checks::default();
    let mut crashes_survived = 0;
    checks.run("a backend killed with SIGKILL mid-write loses no acknowledged write", || {
        runtime.block_on(writes_survive(primary, Crash::Backend))?;
        crashes_survived += 1;
        Ok(())
    });
    checks.run("the postmaster killed with SIGKILL mid-write loses no acknowledged write", || {
        runtime.block_on(writes_survive(primary, Crash::Postmaster))?;
        crashes_survived += 1;
        Ok(())
    });
    checks.run("every document loads after the crashes", || every_document_loads(primary));
    checks.run("a hot standby from pg_basebackup reads what the primary reads", || {
        hot_standby(primary, standby)
    });
    subscriber.wipe()?;
    subscriber.init()?;
    subscriber.start()?;
    primary.psql(DATABASE, LOGICAL_PUBLISHER)?;
    for binary in [false, true] {
        checks.run(
            &format!("logical replication (binary = {binary}, REPLICA IDENTITY FULL) delivers identical documents"),
            || logical_replication(primary, subscriber, binary),
        );
    }
    checks.run("pg_dump -Fc and pg_restore give byte-identical documents, generated columns and GIN indexes", || {
        dump_and_restore(primary)
    });
    // The version checks run where they apply, and are not counted where they do not.
    let current = versions::current()?;
    let released = versions::released();
    if released.contains(&current) {
        checks.run("the frozen install script of the current version creates what CREATE EXTENSION creates", || {
            frozen_script_matches(primary, &current)
        });
    } else {
        note(format!("not checked: {current} is not released, so it has no frozen script yet"));
    }
    let older: Vec<&String> = released.iter().filter(|v| **v != current).collect();
    let mut upgrades = 0;
    if older.is_empty() {
        note(format!(
            "not checked: {current} is the only release, so there is nothing to upgrade from yet"
        ));
    } else {
        checks.run(
            "each older release upgrades to the current one, and its documents read and merge",
            || {
                upgrades = upgrade_from_releases(primary, &current, &older)?;
                Ok(())
            },
        );
    }
    Ok(Outcome { counts: checks.counts, crashes_survived, upgrades })
}

/// The sample documents, in a table with a generated jsonb column and GIN indexes, which
/// the standby, the dump and the upgrade check read too.
fn documents_script() -> String {
    let rows: Vec<String> = fixtures::samples()
        .iter()
        .enumerate()
        .map(|(i, sample)| {
            format!("({i}, '{}', '\\x{}')", sample.name, hex::encode(sample.doc.save()))
        })
        .collect();
    format!(
        "CREATE EXTENSION pg_automerge;\n\
         CREATE TABLE documents (\n\
             id int PRIMARY KEY, name text NOT NULL, doc automerge NOT NULL,\n\
             doc_json jsonb GENERATED ALWAYS AS (doc::jsonb) STORED);\n\
         CREATE INDEX documents_json ON documents USING gin (doc_json);\n\
         CREATE INDEX documents_paths ON documents USING gin ((doc::jsonb) jsonb_path_ops);\n\
         INSERT INTO documents (id, name, doc) VALUES\n  {};\n\
         CREATE TABLE written (id int PRIMARY KEY, doc automerge NOT NULL);\n",
        rows.join(",\n  ")
    )
}

/// What every reader of `documents` and `written` must see alike: per row, the heads, a
/// digest of the stored bytes, the jsonb and (for text) the spans.
const READS: &str = "\
SELECT id, automerge_heads(doc), encode(sha256(doc::bytea), 'hex') AS bytes, doc::jsonb,
       doc_json = doc::jsonb AS generated_agrees,
       CASE WHEN doc ? 'content' THEN automerge_spans(doc, '{content}') END AS spans
FROM documents ORDER BY id;
SELECT id, automerge_heads(doc), encode(sha256(doc::bytea), 'hex') AS bytes, doc::jsonb
FROM written ORDER BY id;
";

const WRITERS: usize = 4;
/// Each writer's document carries this many pseudo-random letters: compressed, it is still
/// larger than a page, so every write goes through TOAST and so does the crash.
const PAYLOAD_LETTERS: usize = 32 * 1024;
/// Writes each writer gets acknowledged before the crash, and again after it.
const WRITES_AROUND_CRASH: usize = 25;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Crash {
    Backend,
    Postmaster,
}

/// Shared between the writers and the task that crashes the server.
#[derive(Default)]
struct Progress {
    acknowledged: AtomicUsize,
    /// Writes that failed with the crash and were sent again.
    resent: AtomicUsize,
    stop: AtomicBool,
    backend_pids: Mutex<Vec<i32>>,
}

/// Runs `WRITERS` writers, each applying one-change writes to its own row (a client's
/// incremental write: the changes since the heads the server last acknowledged), kills a
/// backend or the postmaster while they write, and checks afterwards that each row holds
/// exactly the changes its writer made: every acknowledged write, and the write in flight at
/// the crash, which the writer sent again after reconnecting.
async fn writes_survive(primary: &Cluster, crash: Crash) -> Result<()> {
    let conninfo = primary.conninfo(DATABASE);
    let first_id = if crash == Crash::Backend { 0 } else { WRITERS };
    let progress = Arc::new(Progress::default());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (conninfo, progress) = (conninfo.clone(), progress.clone());
        writers.push(tokio::spawn(write_until_stopped(conninfo, (first_id + w) as i32, progress)));
    }
    let wait_for = |target: usize| {
        let progress = progress.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while progress.acknowledged.load(Ordering::SeqCst) < target {
                ensure!(
                    Instant::now() < deadline,
                    "writers stalled at {target} acknowledged writes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(())
        }
    };
    wait_for(WRITERS * WRITES_AROUND_CRASH).await?;
    let before_crash = progress.acknowledged.load(Ordering::SeqCst);
    match crash {
        Crash::Backend => {
            let pid = progress.backend_pids.lock().unwrap()[0];
            sigkill(pid as u32)?;
        }
        Crash::Postmaster => {
            // Writers fail until the server is back: restart it the way an init system would.
            tokio::task::block_in_place(|| {
                primary.kill_postmaster()?;
                primary.start_after_crash()
            })
            .with_context(|| format!("killing and restarting {}", primary.data_dir.display()))?;
        }
    }
    wait_for(before_crash + WRITERS * WRITES_AROUND_CRASH).await?;
    progress.stop.store(true, Ordering::SeqCst);
    let mut expected = Vec::new();
    for writer in writers {
        expected.push(writer.await??);
    }

    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
    tokio::spawn(connection);
    for (w, mut doc) in expected.into_iter().enumerate() {
        let id = (first_id + w) as i32;
        let row = client
            .query_one(
                "SELECT ARRAY(SELECT hash FROM automerge_changes(doc) ORDER BY hash), \
                 automerge_heads(doc), (doc->>'count')::bigint, pg_column_size(doc) \
                 FROM written WHERE id = $1",
                &[&id],
            )
            .await?;
        let stored: Vec<String> = row.get(0);
        let wanted: BTreeSet<String> =
            doc.get_changes(&[]).iter().map(|change| change.hash().to_string()).collect();
        ensure!(
            stored.iter().cloned().collect::<BTreeSet<_>>() == wanted,
            "row {id}: {} changes stored, the writer made {}",
            stored.len(),
            wanted.len()
        );
        let heads: Vec<String> = row.get(1);
        let mut wanted_heads: Vec<String> =
            doc.get_heads().iter().map(ToString::to_string).collect();
        wanted_heads.sort();
        ensure!(
            heads == wanted_heads,
            "row {id}: heads {heads:?}, the writer has {wanted_heads:?}"
        );
        let stored_size: i32 = row.get(3);
        ensure!(stored_size > 8192, "row {id} is stored in {stored_size} bytes, not out of line");
        let count: i64 = row.get(2);
        ensure!(
            Some(count) == counter(&doc),
            "row {id}: count {count}, the writer wrote {:?}",
            counter(&doc)
        );
    }
    note(format!(
        "{} writes acknowledged by {WRITERS} writers, {before_crash} of them before the crash; \
         {} cut off by the crash and sent again",
        progress.acknowledged.load(Ordering::SeqCst),
        progress.resent.load(Ordering::SeqCst)
    ));
    Ok(())
}

/// One writer: inserts its row, then sets `count` to 1, 2, 3… one change per write until
/// told to stop, reconnecting whenever the server goes away. Returns its document.
async fn write_until_stopped(
    conninfo: String,
    id: i32,
    progress: Arc<Progress>,
) -> Result<AutoCommit> {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([id as u8 + 1; 16]));
    doc.put(ROOT, "payload", payload(id as u32))?;
    let mut acknowledged_heads = Vec::new();
    let mut client: Option<tokio_postgres::Client> = None;
    let mut count: i64 = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        ensure!(Instant::now() < deadline, "writer {id} ran out of time");
        let connected = match client.take() {
            Some(connected) if !connected.is_closed() => connected,
            _ => match connect_with_pid(&conninfo).await {
                Ok((connected, pid)) => {
                    progress.backend_pids.lock().unwrap().push(pid);
                    connected
                }
                Err(_) => {
                    // The server is restarting after a crash.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if acknowledged_heads.is_empty() {
            doc.put(ROOT, "count", count)?;
            doc.commit();
            let written = connected
                .execute(
                    "INSERT INTO written VALUES ($1, $2::bytea) \
                     ON CONFLICT (id) DO UPDATE SET doc = written.doc || EXCLUDED.doc",
                    &[&id, &doc.save()],
                )
                .await;
            if written.is_ok() {
                acknowledged_heads = doc.get_heads();
            }
            client = Some(connected);
            continue;
        }
        if doc.get_heads() == acknowledged_heads {
            if progress.stop.load(Ordering::SeqCst) {
                return Ok(doc);
            }
            count += 1;
            doc.put(ROOT, "count", count)?;
            doc.commit();
        }
        // Everything since the last acknowledged write: after a failed write this sends the
        // change again, which the server takes whether or not it committed the first time.
        let changes = doc.save_after(&acknowledged_heads);
        match connected
            .execute("UPDATE written SET doc = doc || $1::bytea WHERE id = $2", &[&changes, &id])
            .await
        {
            Ok(1) => {
                acknowledged_heads = doc.get_heads();
                progress.acknowledged.fetch_add(1, Ordering::SeqCst);
                client = Some(connected);
            }
            Ok(rows) => bail!("writer {id}: the UPDATE changed {rows} rows"),
            // The connection died with its backend: reconnect and send again.
            Err(_) => {
                progress.resent.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Letters from a xorshift generator seeded by `seed`: the same on every run, and
/// incompressible enough to stay large.
fn payload(seed: u32) -> String {
    let mut state = seed.wrapping_mul(2_654_435_761) | 1;
    (0..PAYLOAD_LETTERS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            char::from(b'a' + (state % 26) as u8)
        })
        .collect()
}

/// A connection and its backend's process id.
async fn connect_with_pid(conninfo: &str) -> Result<(tokio_postgres::Client, i32)> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    let pid = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
    Ok((client, pid))
}

fn counter(doc: &AutoCommit) -> Option<i64> {
    match doc.get(ROOT, "count").ok()?? {
        (automerge::Value::Scalar(scalar), _) => match scalar.as_ref() {
            automerge::ScalarValue::Int(count) => Some(*count),
            _ => None,
        },
        _ => None,
    }
}

/// Every document must load (reading it as of its own heads always does), and give the
/// same state as its jsonb cast, whatever the cast reads.
fn every_document_loads(primary: &Cluster) -> Result<()> {
    let output = primary.psql(
        DATABASE,
        "\\t on\n\\a\n\
         SELECT count(*) FILTER (WHERE automerge_to_jsonb(doc, automerge_heads(doc)) = doc::jsonb) || ' of ' || count(*) \
         FROM (SELECT doc FROM documents UNION ALL SELECT doc FROM written) d;",
    )?;
    let rows = fixtures::samples().len() + 2 * WRITERS;
    ensure!(
        output.trim() == format!("{rows} of {rows}"),
        "{} documents load and agree, of {rows}",
        output.trim()
    );
    Ok(())
}

/// Takes a base backup of the primary, starts it as a hot standby, writes once more on the
/// primary, and waits until every read on the standby answers as on the primary.
fn hot_standby(primary: &Cluster, standby: &Cluster) -> Result<()> {
    standby.base_backup_of(primary)?;
    standby.start()?;
    primary.psql(
        DATABASE,
        "UPDATE documents SET doc = doc || (SELECT doc FROM documents WHERE name = 'project') \
         WHERE name = 'todo-list';",
    )?;
    ensure!(
        standby.psql(DATABASE, "\\t on\nSELECT pg_is_in_recovery();")?.trim() == "t",
        "the standby is not in recovery"
    );
    wait_for_same_output(primary, standby, DATABASE, READS)
        .context("once the standby replays the last write")
}

const LOGICAL_PUBLISHER: &str = "\
CREATE TABLE replicated (id int NOT NULL, doc automerge NOT NULL);
ALTER TABLE replicated REPLICA IDENTITY FULL;
INSERT INTO replicated SELECT id, doc FROM documents;
CREATE PUBLICATION documents_publication FOR TABLE replicated;
";

/// Subscribes a database of the subscriber to the primary's publication, in text or binary
/// mode, then updates and deletes rows on the primary. The table has no key on either side,
/// so with REPLICA IDENTITY FULL the subscriber finds each old row by comparing every column
/// with `=`.
fn logical_replication(primary: &Cluster, subscriber: &Cluster, binary: bool) -> Result<()> {
    let database = if binary { "subscribed_binary" } else { "subscribed_text" };
    subscriber.psql("postgres", &format!("CREATE DATABASE {database};"))?;
    subscriber.psql(
        database,
        &format!(
            "CREATE EXTENSION pg_automerge;\n\
             CREATE TABLE replicated (id int NOT NULL, doc automerge NOT NULL);\n\
             CREATE SUBSCRIPTION {database} CONNECTION '{}' PUBLICATION documents_publication \
             WITH (binary = {binary});",
            primary.conninfo(DATABASE)
        ),
    )?;
    let compare =
        "SELECT id, automerge_heads(doc), encode(doc::bytea, 'hex') FROM replicated ORDER BY id;";
    wait_for_same_output(primary, subscriber, database, compare).context("initial copy")?;
    // A merge that changes a document, one that changes nothing, and a delete.
    primary.psql(
        DATABASE,
        "UPDATE replicated SET doc = doc || (SELECT doc FROM documents WHERE name = 'meeting-notes') WHERE id = 1;\n\
         UPDATE replicated SET doc = doc || doc WHERE id = 2;\n\
         DELETE FROM replicated WHERE id = 3;",
    )?;
    wait_for_same_output(primary, subscriber, database, compare)
        .context("after updates and a delete")?;
    let rows = subscriber.psql(database, "\\t on\nSELECT count(*) FROM replicated;")?;
    ensure!(
        rows.trim() == (fixtures::samples().len() - 1).to_string(),
        "the subscriber has {} rows",
        rows.trim()
    );
    subscriber.psql(database, &format!("DROP SUBSCRIPTION {database};"))?;
    Ok(())
}

/// Dumps the primary's database in the custom format, restores it into a new database, and
/// compares every read, the generated column, and the answers the GIN indexes give.
fn dump_and_restore(primary: &Cluster) -> Result<()> {
    let archive = primary.dir.join("reliability.dump");
    let archive_arg = archive.display().to_string();
    primary.run_client("pg_dump", DATABASE, &["--format", "custom", "--file", &archive_arg])?;
    primary.psql("postgres", "DROP DATABASE IF EXISTS restored; CREATE DATABASE restored;")?;
    // The publication's subscribers are gone by now; the restore needs no slot.
    primary.run_client(
        "pg_restore",
        "restored",
        &["--exit-on-error", "--no-publications", &archive_arg],
    )?;
    let indexed = "SET enable_seqscan = off;\n\
        EXPLAIN (COSTS OFF) SELECT id FROM documents WHERE doc_json @> '{\"status\": \"review\"}';\n\
        SELECT id FROM documents WHERE doc_json @> '{\"status\": \"review\"}' ORDER BY id;\n\
        SELECT id FROM documents WHERE doc::jsonb @> '{\"title\": \"Launch plan\"}' ORDER BY id;\n\
        SELECT indexrelid::regclass, indisvalid FROM pg_index WHERE indrelid = 'documents'::regclass ORDER BY 1;\n";
    let plan = primary.psql("restored", indexed)?;
    ensure!(
        plan.contains("Bitmap Index Scan on documents_json"),
        "the restored GIN index is not used:\n{plan}"
    );
    same_output_between(primary, DATABASE, primary, "restored", &format!("{READS}{indexed}"))?;
    let bytes = "SELECT id, encode(doc::bytea, 'hex'), doc_json FROM documents ORDER BY id;";
    same_output_between(primary, DATABASE, primary, "restored", bytes)
}

/// What the extension defines, one line per object, in a form that two databases can be
/// compared by: every function (with its full definition, or an aggregate's parts), operator,
/// type, cast and operator class in schema `public` (row types of tables left out).
const CATALOG: &str = "\\t on
\\a
SELECT line FROM (
  SELECT CASE WHEN p.prokind = 'a' THEN format(
           'aggregate %s(%s) sfunc %s stype %s combine %s serial %s deserial %s final %s parallel %s',
           p.proname, pg_get_function_identity_arguments(p.oid), a.aggtransfn, a.aggtranstype::regtype,
           a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggfinalfn, p.proparallel)
         ELSE pg_get_functiondef(p.oid) || format(' secdef %s', p.prosecdef) END AS line
  FROM pg_proc p LEFT JOIN pg_aggregate a ON a.aggfnoid = p.oid
  WHERE p.pronamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('operator %s(%s, %s) -> %s %s com %s neg %s rest %s join %s merges %s hashes %s',
           oprname, oprleft::regtype, oprright::regtype, oprresult::regtype, oprcode,
           oprcom::regoperator, oprnegate::regoperator, oprrest, oprjoin, oprcanmerge, oprcanhash)
  FROM pg_operator WHERE oprnamespace = 'public'::regnamespace
  UNION ALL
  SELECT format('type %s %s len %s byval %s align %s storage %s in %s out %s recv %s send %s elem %s category %s',
           t.typname, t.typtype, t.typlen, t.typbyval, t.typalign, t.typstorage, t.typinput,
           t.typoutput, t.typreceive, t.typsend, t.typelem::regtype, t.typcategory)
  FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem
  WHERE t.typnamespace = 'public'::regnamespace AND t.typrelid = 0 AND coalesce(e.typrelid, 0) = 0
  UNION ALL
  SELECT format('cast %s -> %s %s context %s method %s', castsource::regtype, casttarget::regtype,
           castfunc::regprocedure, castcontext, castmethod)
  FROM pg_cast WHERE castsource::regtype::text = 'automerge' OR casttarget::regtype::text = 'automerge'
  UNION ALL
  SELECT format('opclass %s %s default %s for %s: %s; %s', c.opcname, m.amname, c.opcdefault,
           c.opcintype::regtype,
           (SELECT string_agg(format('%s %s', o.amopstrategy, o.amopopr::regoperator), ', ' ORDER BY o.amopstrategy)
              FROM pg_amop o WHERE o.amopfamily = c.opcfamily),
           (SELECT string_agg(format('%s %s', r.amprocnum, r.amproc::regprocedure), ', ' ORDER BY r.amprocnum)
              FROM pg_amproc r WHERE r.amprocfamily = c.opcfamily))
  FROM pg_opclass c JOIN pg_am m ON m.oid = c.opcmethod WHERE c.opcnamespace = 'public'::regnamespace
) catalog ORDER BY line;
";

/// The current version's catalog, from a fresh `CREATE EXTENSION` in a database of its own.
fn fresh_catalog(primary: &Cluster) -> Result<String> {
    primary.psql(
        "postgres",
        "DROP DATABASE IF EXISTS fresh_install; CREATE DATABASE fresh_install;",
    )?;
    primary.psql("fresh_install", "CREATE EXTENSION pg_automerge;")?;
    primary.psql("fresh_install", CATALOG)
}

/// When the current version is a release, its frozen script (run by hand, as CREATE
/// EXTENSION would) must define exactly what the script pgrx generates from the code does:
/// otherwise the SQL changed without a new version and an upgrade script.
fn frozen_script_matches(primary: &Cluster, current: &str) -> Result<()> {
    let fresh = fresh_catalog(primary)?;
    primary.psql(
        "postgres",
        "DROP DATABASE IF EXISTS frozen_script; CREATE DATABASE frozen_script;",
    )?;
    let script =
        versions::install_script(current)?.replace("MODULE_PATHNAME", "$libdir/pg_automerge");
    primary.psql("frozen_script", &format!("BEGIN;\n{script}\nCOMMIT;"))?;
    let frozen = primary.psql("frozen_script", CATALOG)?;
    ensure!(
        frozen == fresh,
        "the SQL of version {current} changed since it was released: give the workspace a new \
         version and add {}. Differences (- frozen, + current):\n{}",
        versions::upgrade_script_name(current, "<new version>"),
        line_differences(&frozen, &fresh)
    );
    Ok(())
}

/// For each older release: installs it from its frozen
/// script, writes documents, runs ALTER EXTENSION … UPDATE, and checks that the catalog
/// equals a fresh install's and that the old documents read and merge. Returns how many
/// versions it upgraded from.
fn upgrade_from_releases(primary: &Cluster, current: &str, older: &[&String]) -> Result<usize> {
    let fresh = fresh_catalog(primary)?;
    let upgrades = versions::upgrades()?;
    let extension_dir = primary.install.extension_dir()?;
    for version in older {
        // pgrx installs the current version's script and the upgrade scripts, not the
        // install scripts of older versions: put the frozen one beside them.
        let chain = versions::upgrade_path(version, current, &upgrades)
            .with_context(|| format!("no upgrade scripts lead from {version} to {current}"))?;
        note(format!("upgrading through {}", chain.join(" -> ")));
        let name = versions::install_script_name(version);
        let script = versions::install_script(version)?;
        install::write_file(&extension_dir.join(&name), script.as_bytes(), None)
            .with_context(|| format!("installing {name}"))?;
        let database = format!("upgrade_from_{}", version.replace(['.', '-'], "_"));
        primary.psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database};"),
        )?;
        let samples: Vec<String> = fixtures::samples()
            .iter()
            .map(|sample| format!("('{}', '\\x{}')", sample.name, hex::encode(sample.doc.save())))
            .collect();
        primary.psql(
            &database,
            &format!(
                "CREATE EXTENSION pg_automerge VERSION '{version}';\n\
                 CREATE TABLE old_documents (name text PRIMARY KEY, doc automerge NOT NULL);\n\
                 INSERT INTO old_documents VALUES {};\n\
                 UPDATE old_documents SET doc = doc || (SELECT doc FROM old_documents WHERE name = 'project') \
                 WHERE name = 'todo-list';",
                samples.join(", ")
            ),
        )?;
        let before = primary.psql(&database, OLD_DOCUMENT_READS)?;
        primary.psql(&database, "ALTER EXTENSION pg_automerge UPDATE;")?;
        let installed = primary.psql(
            &database,
            "\\t on\nSELECT extversion FROM pg_extension WHERE extname = 'pg_automerge';",
        )?;
        ensure!(
            installed.trim() == current,
            "{version} updated to {}, not {current}",
            installed.trim()
        );
        let upgraded = primary.psql(&database, CATALOG)?;
        ensure!(
            upgraded == fresh,
            "{version} updated to {current} differs from a fresh install (- upgraded, + fresh):\n{}",
            line_differences(&upgraded, &fresh)
        );
        let after = primary.psql(&database, OLD_DOCUMENT_READS)?;
        ensure!(
            before == after,
            "documents written by {version} read differently after the update"
        );
        primary.psql(
            &database,
            "UPDATE old_documents SET doc = doc || (SELECT merge_agg(doc) FROM old_documents) WHERE name = 'empty';",
        )?;
        let merged = primary.psql(
            &database,
            "\\t on\nSELECT automerge_change_count(doc) FROM old_documents WHERE name = 'empty';",
        )?;
        let changes: usize = fixtures::samples().iter().map(|s| s.doc.get_changes(&[]).len()).sum();
        ensure!(
            merged.trim() == changes.to_string(),
            "the merge after the update has {} changes, not {changes}",
            merged.trim()
        );
    }
    Ok(older.len())
}

const OLD_DOCUMENT_READS: &str =
    "SELECT name, automerge_heads(doc), doc::jsonb, encode(sha256(doc::bytea), 'hex') \
    FROM old_documents ORDER BY name;";

fn same_output_between(
    left: &Cluster,
    left_db: &str,
    right: &Cluster,
    right_db: &str,
    sql: &str,
) -> Result<()> {
    let (a, b) = (left.psql(left_db, sql)?, right.psql(right_db, sql)?);
    ensure!(
        a == b,
        "the outputs differ (- {left_db}, + {right_db}):\n{}",
        line_differences(&a, &b)
    );
    Ok(())
}

/// Polls until `database` on a replica answers `sql` as the primary's database does.
fn wait_for_same_output(
    primary: &Cluster,
    replica: &Cluster,
    database: &str,
    sql: &str,
) -> Result<()> {
    let wanted = primary.psql(DATABASE, sql)?;
    let mut last = String::new();
    wait_until(Duration::from_secs(30), || {
        last = replica.psql(database, sql)?;
        Ok(last == wanted)
    })
    .with_context(|| {
        format!("the replica differs (- primary, + replica):\n{}", line_differences(&wanted, &last))
    })
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !done()? {
        ensure!(Instant::now() < deadline, "gave up after {}s", limit.as_secs());
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
