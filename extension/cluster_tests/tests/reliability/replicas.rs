//! Copies of the primary's documents: a hot standby made by pg_basebackup, logical
//! subscribers in text and binary mode, and a custom-format dump restored into a new
//! database must each read exactly as the primary does; a promoted standby and its old
//! primary edit one document, and the copies merge.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use cluster_tests::server::Server;
use cluster_tests::{RELIABILITY_STANDBY, RELIABILITY_SUBSCRIBER};

use crate::{primary, same_output_between, wait_for_same_output, wait_until, DATABASE, READS};

/// Takes a base backup of the primary, starts it as a hot standby, writes once more on the
/// primary, and waits until every read on the standby answers as on the primary.
#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn hot_standby_from_pg_basebackup_reads_what_the_primary_reads() -> Result<()> {
    let (primary, standby) = (primary()?, Server::from_env(RELIABILITY_STANDBY));
    standby.base_backup_of(&primary)?;
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
    wait_for_same_output(&primary, &standby, DATABASE, READS)
        .context("once the standby replays the last write")
}

const LOGICAL_PUBLISHER: &str = "\
CREATE TABLE replicated (id int NOT NULL, doc automerge NOT NULL);
ALTER TABLE replicated REPLICA IDENTITY FULL;
INSERT INTO replicated SELECT id, doc FROM documents;
CREATE PUBLICATION documents_publication FOR TABLE replicated;
";

#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn logical_replication_in_binary_mode_delivers_identical_documents() -> Result<()> {
    logical_replication(true)
}

#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn logical_replication_in_text_mode_delivers_identical_documents() -> Result<()> {
    logical_replication(false)
}

/// The publication of `replicated`, made by the first subscriber's test.
fn publisher() -> Result<Server> {
    let primary = primary()?;
    let published = primary.psql(
        DATABASE,
        "\\t on\nSELECT 1 FROM pg_publication WHERE pubname = 'documents_publication';",
    )?;
    if published.trim().is_empty() {
        primary.psql(DATABASE, LOGICAL_PUBLISHER)?;
    }
    Ok(primary)
}

/// Subscribes a database of the subscriber to the primary's publication, in text or binary
/// mode, then updates and deletes rows on the primary. The table has no key on either side,
/// so with REPLICA IDENTITY FULL the subscriber finds each old row by comparing every column
/// with `=`.
fn logical_replication(binary: bool) -> Result<()> {
    let (primary, subscriber) = (publisher()?, Server::from_env(RELIABILITY_SUBSCRIBER));
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
    wait_for_same_output(&primary, &subscriber, database, compare).context("initial copy")?;
    // A merge that changes a document, one that changes nothing, and a delete.
    primary.psql(
        DATABASE,
        "UPDATE replicated SET doc = doc || (SELECT doc FROM documents WHERE name = 'meeting-notes') WHERE id = 1;\n\
         UPDATE replicated SET doc = doc || doc WHERE id = 2;\n\
         DELETE FROM replicated WHERE id = 3;",
    )?;
    wait_for_same_output(&primary, &subscriber, database, compare)
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
#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn pg_dump_and_pg_restore_give_byte_identical_documents_generated_columns_and_gin_indexes(
) -> Result<()> {
    let primary = primary()?;
    // Beside the data directory, where the cluster user (who runs pg_dump) may write.
    let archive = primary.data_dir.with_file_name("reliability.dump");
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
    same_output_between(&primary, DATABASE, &primary, "restored", &format!("{READS}{indexed}"))?;
    let bytes = "SELECT id, encode(doc::bytea, 'hex'), doc_json FROM documents ORDER BY id;";
    same_output_between(&primary, DATABASE, &primary, "restored", bytes)
}

/// A standby promoted while its old primary goes on: both edit one document from SQL, and
/// the two copies merge. Each backend draws an actor of its own (nothing of it is in the WAL
/// the standby replayed), so the two edits never share an actor and sequence number: the
/// merge keeps both, as concurrent changes, and loads.
#[test]
#[ignore = "needs the clusters that `cargo xtask test --only reliability` provisions"]
fn promoted_standby_and_its_old_primary_edit_one_document_and_the_copies_merge() -> Result<()> {
    let (primary, standby) = (primary()?, Server::from_env(RELIABILITY_STANDBY));
    let edit = |server: &Server, value: &str| {
        server.psql(
            DATABASE,
            &format!(
                "UPDATE documents SET doc = automerge_set(doc, '{{edited}}', '\"{value}\"', \
                 message => 'split') WHERE name = 'todo-list';"
            ),
        )
    };
    let answer = |server: &Server, sql: &str| -> Result<String> {
        Ok(server.psql(DATABASE, &format!("\\t on\n\\a\n{sql}"))?.trim().to_string())
    };
    edit(&primary, "before the promotion")?;
    standby.stop()?;
    standby.base_backup_of(&primary)?;
    standby.start()?;
    let edited = "SELECT doc->>'edited' FROM documents WHERE name = 'todo-list';";
    wait_until(
        Duration::from_secs(30),
        || Ok(answer(&standby, edited)? == "before the promotion"),
    )?;
    standby.psql(DATABASE, "SELECT pg_promote();")?;
    ensure!(answer(&standby, "SELECT pg_is_in_recovery();")? == "f", "the standby is not promoted");

    edit(&primary, "on the old primary")?;
    edit(&standby, "on the promoted standby")?;
    let copy = answer(
        &standby,
        "SELECT encode(doc::bytea, 'hex') FROM documents WHERE name = 'todo-list';",
    )?;
    standby.stop()?;
    let merged = answer(
        &primary,
        &format!(
            "WITH merged AS (SELECT doc || '\\x{copy}'::bytea::automerge AS doc \
                             FROM documents WHERE name = 'todo-list') \
             SELECT automerge_loads(doc), cardinality(automerge_heads(doc)), \
                    (SELECT count(DISTINCT actor) FROM automerge_changes(doc) WHERE message = 'split') \
             FROM merged;"
        ),
    )?;
    // Loads; two heads, one per copy; the three edits by three backends' actors.
    ensure!(merged == "t|2|3", "the merged copies: {merged}");
    Ok(())
}
