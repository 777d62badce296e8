//! History: heads and change count (read from the stored header, without loading), whether
//! the document has given changes or contains another document or changes, the changes
//! themselves or their metadata, one change by its hash, and the bytes a client needs to
//! catch up.

use pg_automerge_core::{format, heads, history};
use pgrx::prelude::*;

use crate::datum::{DocHeader, LazyDoc, StoredDoc};
use crate::errors::OrRaise;
use crate::loading;

/// Milliseconds from the Unix epoch to Postgres' epoch, 2000-01-01.
const POSTGRES_EPOCH_MS: i64 = 946_684_800_000;

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_heads(doc: DocHeader<'_>) -> Vec<String> {
    heads::to_hex(&doc.summary.heads)
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_change_count(doc: DocHeader<'_>) -> i64 {
    doc.summary.change_count as i64
}

/// Whether the document has every change in `heads`: answered from the stored header and
/// actor table (the value's first TOAST chunk, as a rule) when the changes are its heads or
/// its actors' latest changes, else from a load.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_has_changes(doc: LazyDoc<'_>, heads: Vec<String>) -> bool {
    const FUNCTION: &str = "automerge_has_changes";
    let heads = loading::parse_heads(&heads, FUNCTION);
    pg_automerge_core::history::has_changes(&doc, &heads).or_raise(FUNCTION)
}

/// Every change of the document in causal order or, given `since`, only those that a
/// replica whose heads are `since` lacks: read from the changes appended since the last
/// save, without a load, when `since` has the whole save (a client that synced since).
// pgrx reads the result's column names from the `name!` types spelled out here: an alias
// would hide them.
#[allow(clippy::type_complexity)]
#[pg_extern(immutable, parallel_safe)]
fn automerge_changes(
    doc: Option<StoredDoc<'_>>,
    since: default!(Option<Vec<String>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(hash, String),
        name!(actor, String),
        name!(seq, i64),
        name!(start_op, i64),
        name!(op_count, i64),
        name!(time, TimestampWithTimeZone),
        name!(message, Option<String>),
        name!(deps, Vec<String>),
        name!(bytes, Vec<u8>),
    ),
> {
    const FUNCTION: &str = "automerge_changes";
    let Some(doc) = doc else { return TableIterator::new(Vec::new()) };
    let value = format::decode(doc.stored()).or_raise(FUNCTION);
    let since = since.map(|texts| loading::parse_heads(&texts, FUNCTION));
    let changes = history::stored_changes(&value, since.as_deref()).or_raise(FUNCTION);
    TableIterator::new(changes.into_iter().map(|c| {
        let (m, bytes) = (c.meta, c.bytes);
        let (seq, start_op, op_count) = (m.seq as i64, m.start_op as i64, m.op_count as i64);
        (m.hash, m.actor, seq, start_op, op_count, timestamp(m.time_ms), m.message, m.deps, bytes)
    }))
}

/// What [`automerge_changes`] lists, without each change's bytes.
#[allow(clippy::type_complexity)]
#[pg_extern(immutable, parallel_safe)]
fn automerge_changes_meta(
    doc: Option<StoredDoc<'_>>,
    since: default!(Option<Vec<String>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(hash, String),
        name!(actor, String),
        name!(seq, i64),
        name!(start_op, i64),
        name!(op_count, i64),
        name!(time, TimestampWithTimeZone),
        name!(message, Option<String>),
        name!(deps, Vec<String>),
    ),
> {
    const FUNCTION: &str = "automerge_changes_meta";
    let Some(doc) = doc else { return TableIterator::new(Vec::new()) };
    let value = format::decode(doc.stored()).or_raise(FUNCTION);
    let since = since.map(|texts| loading::parse_heads(&texts, FUNCTION));
    let changes = history::stored_changes_meta(&value, since.as_deref()).or_raise(FUNCTION);
    TableIterator::new(changes.into_iter().map(|m| {
        let (seq, start_op, op_count) = (m.seq as i64, m.start_op as i64, m.op_count as i64);
        (m.hash, m.actor, seq, start_op, op_count, timestamp(m.time_ms), m.message, m.deps)
    }))
}

/// A change's time, from milliseconds since the Unix epoch. A client's clock can say
/// anything: times outside Postgres' range are infinite.
fn timestamp(time_ms: i64) -> TimestampWithTimeZone {
    let micros = time_ms.saturating_sub(POSTGRES_EPOCH_MS).saturating_mul(1000);
    TimestampWithTimeZone::try_from(micros).unwrap_or_else(|_| {
        if micros < 0 {
            TimestampWithTimeZone::negative_infinity()
        } else {
            TimestampWithTimeZone::positive_infinity()
        }
    })
}

/// The bytes of the change `hash`, or NULL when the document does not have it: a change
/// appended since the last save is read without a load.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_get_change(doc: StoredDoc<'_>, hash: String) -> Option<Vec<u8>> {
    const FUNCTION: &str = "automerge_get_change";
    let hash = loading::parse_heads(std::slice::from_ref(&hash), FUNCTION);
    let value = format::decode(doc.stored()).or_raise(FUNCTION);
    history::stored_change(&value, &hash[0]).or_raise(FUNCTION)
}

/// Whether merging `other` into `doc` would add nothing: `other`'s header alone is read, and
/// `doc`'s header answers when `other`'s heads are among its heads or actors' latest changes.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_contains(doc: LazyDoc<'_>, other: DocHeader<'_>) -> bool {
    history::contains_document(&doc, &other.summary.heads).or_raise("automerge_contains")
}

/// Whether applying the Automerge bytes `changes` to `doc` (`doc || changes`) would add
/// nothing.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_contains")]
fn automerge_contains_changes(doc: LazyDoc<'_>, changes: &[u8]) -> bool {
    history::contains_changes(&doc, changes, crate::gucs::load_limit())
        .or_raise("automerge_contains")
}

/// What a client whose heads are `since` loads (`loadIncremental`) to catch up: without a
/// load when it has the whole last save, as [`automerge_changes`] reads it.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_save_since(doc: StoredDoc<'_>, since: Vec<String>) -> Vec<u8> {
    const FUNCTION: &str = "automerge_save_since";
    let value = format::decode(doc.stored()).or_raise(FUNCTION);
    let since = loading::parse_heads(&since, FUNCTION);
    history::stored_catch_up(&value, &since).or_raise(FUNCTION)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, Automerge, ROOT};
    use pgrx::prelude::*;

    use crate::test_support::{hex_of, sample, sqlstate_of, with_samples};

    fn project_sql() -> String {
        format!("'{}'::automerge", hex_of(&sample("project").save()))
    }

    #[pg_test]
    fn heads_and_change_count_come_from_the_header() {
        let doc = sample("project");
        let heads =
            Spi::get_one::<Vec<String>>(&format!("SELECT automerge_heads({})", project_sql()));
        assert_eq!(heads.unwrap().unwrap(), pg_automerge_core::heads::to_hex(&doc.get_heads()));
        let count =
            Spi::get_one::<i64>(&format!("SELECT automerge_change_count({})", project_sql()));
        assert_eq!(count.unwrap(), Some(3));
        let empty = Spi::get_one::<Vec<String>>("SELECT automerge_heads('\\x'::automerge)");
        assert_eq!(empty.unwrap(), Some(vec![]));
    }

    #[pg_test]
    fn lists_changes_with_their_metadata() {
        let doc = sample("project");
        let changes = doc.get_changes(&[]);
        let rows = Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM automerge_changes({}) c \
             WHERE c.actor = repeat('01', 16) AND c.time = '2026-01-01T00:00:00Z' \
               AND c.message IS NULL AND c.op_count > 0",
            project_sql()
        ));
        assert_eq!(rows.unwrap(), Some(changes.len() as i64));
        let first = Spi::get_one::<String>(&format!(
            "SELECT hash FROM automerge_changes({}) WHERE seq = 1",
            project_sql()
        ));
        assert_eq!(first.unwrap(), Some(changes[0].hash().to_string()));
        let bytes = Spi::get_one::<Vec<u8>>(&format!(
            "SELECT bytes FROM automerge_changes({}) WHERE seq = 3",
            project_sql()
        ));
        assert_eq!(bytes.unwrap(), Some(changes[2].raw_bytes().to_vec()));
        let deps = Spi::get_one::<Vec<String>>(&format!(
            "SELECT deps FROM automerge_changes({}) WHERE seq = 2",
            project_sql()
        ));
        assert_eq!(deps.unwrap(), Some(vec![changes[0].hash().to_string()]));
    }

    #[pg_test]
    fn changes_since_heads_and_catch_up_bytes() {
        let doc = sample("project");
        let first = doc.get_changes(&[])[0].hash().to_string();
        let since = Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM automerge_changes({}, ARRAY['{first}'])",
            project_sql()
        ));
        assert_eq!(since.unwrap(), Some(2));
        let catch_up = Spi::get_one::<Vec<u8>>(&format!(
            "SELECT automerge_save_since({}, ARRAY['{first}'])",
            project_sql()
        ))
        .unwrap()
        .unwrap();
        let mut client = Automerge::new();
        client.load_incremental(doc.get_changes(&[])[0].raw_bytes()).unwrap();
        client.load_incremental(&catch_up).unwrap();
        assert_eq!(client.get_heads(), doc.get_heads());
    }

    #[pg_test]
    fn changes_since_the_last_save_are_read_without_a_load() {
        let mut doc = AutoCommit::load(&sample("project").save()).unwrap();
        let (oldest, saved) = (doc.get_changes(&[])[0].hash(), doc.get_heads());
        Spi::run(&format!(
            "CREATE TABLE notes (doc automerge); INSERT INTO notes VALUES ({})",
            project_sql()
        ))
        .unwrap();
        let mut appended = Vec::new();
        for (key, value) in [("owner", "ana"), ("reviewer", "bo")] {
            doc.put(ROOT, key, value).unwrap();
            let change = doc.get_last_local_change().unwrap().clone();
            Spi::run(&format!(
                "UPDATE notes SET doc = doc || '{}'::bytea",
                hex_of(change.raw_bytes())
            ))
            .unwrap();
            appended.push(change);
        }
        let [first, second] = [&appended[0], &appended[1]].map(|change| change.hash().to_string());
        let saved = format!("ARRAY['{}']", saved[0]);
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        let listed = Spi::get_one::<Vec<String>>(&format!(
            "SELECT array_agg(hash) FROM notes, automerge_changes(doc, {saved})"
        ));
        assert_eq!(listed.unwrap(), Some(vec![first.clone(), second.clone()]));
        let meta = Spi::get_one::<Vec<String>>(&format!(
            "SELECT array_agg(hash) FROM notes, automerge_changes_meta(doc, ARRAY['{first}'])"
        ));
        assert_eq!(meta.unwrap(), Some(vec![second.clone()]));
        let none = Spi::get_one::<i64>(
            "SELECT count(*) FROM notes, automerge_changes(doc, automerge_heads(doc))",
        );
        assert_eq!(none.unwrap(), Some(0));
        let catch_up = Spi::get_one::<Vec<u8>>(&format!(
            "SELECT automerge_save_since(doc, {saved}) FROM notes"
        ));
        assert_eq!(
            catch_up.unwrap(),
            Some([appended[0].raw_bytes(), appended[1].raw_bytes()].concat())
        );
        let one = Spi::get_one::<Vec<u8>>(&format!(
            "SELECT automerge_get_change(doc, '{second}') FROM notes"
        ));
        assert_eq!(one.unwrap(), Some(appended[1].raw_bytes().to_vec()));
        let loads =
            || Spi::get_one::<i64>("SELECT loads FROM automerge_memory_usage()").unwrap().unwrap();
        assert_eq!(loads(), 0, "every read above came from the appended changes");
        // A replica that lacks part of the save: only a load can tell which changes.
        let older = Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM notes, automerge_changes(doc, ARRAY['{oldest}'])"
        ));
        assert_eq!(older.unwrap(), Some(4));
        assert!(loads() > 0, "what an older replica lacks comes from a load");
    }

    #[pg_test]
    fn metadata_is_what_automerge_changes_lists_without_the_bytes() {
        with_samples();
        let matching = Spi::get_one::<i64>(
            "SELECT count(*) FROM samples s, automerge_changes(s.doc) c \
             JOIN automerge_changes_meta(s.doc) m \
               USING (hash, actor, seq, start_op, op_count, time, deps) \
             WHERE c.message IS NOT DISTINCT FROM m.message",
        );
        let all =
            Spi::get_one::<i64>("SELECT sum(automerge_change_count(doc))::bigint FROM samples");
        assert_eq!(matching.unwrap(), all.unwrap());
        let first = sample("project").get_changes(&[])[0].hash().to_string();
        let since = Spi::get_one::<Vec<i64>>(&format!(
            "SELECT array_agg(seq ORDER BY seq) FROM automerge_changes_meta({}, ARRAY['{first}'])",
            project_sql()
        ));
        assert_eq!(since.unwrap(), Some(vec![2, 3]));
        let null_doc = Spi::get_one::<i64>("SELECT count(*) FROM automerge_changes_meta(NULL)");
        assert_eq!(null_doc.unwrap(), Some(0));
    }

    #[pg_test]
    fn one_change_by_its_hash_or_null() {
        let doc = sample("project");
        let second = &doc.get_changes(&[])[1];
        let bytes = Spi::get_one::<Vec<u8>>(&format!(
            "SELECT automerge_get_change({}, '{}')",
            project_sql(),
            second.hash()
        ));
        assert_eq!(bytes.unwrap(), Some(second.raw_bytes().to_vec()));
        let absent = Spi::get_one::<Vec<u8>>(&format!(
            "SELECT automerge_get_change({}, repeat('ab', 32))",
            project_sql()
        ));
        assert_eq!(absent.unwrap(), None);
        let malformed = format!("SELECT automerge_get_change({}, 'xyz')", project_sql());
        assert_eq!(sqlstate_of(&malformed), "22023");
    }

    #[pg_test]
    fn contains_documents_and_changes_that_add_nothing() {
        let doc = sample("project");
        let first = doc.get_changes(&[])[0].hash().to_string();
        let project = project_sql();
        let contains = |sql: &str| Spi::get_one::<bool>(sql).unwrap().unwrap();
        let older = format!("automerge_get_change({project}, '{first}')::automerge");
        assert!(contains(&format!("SELECT automerge_contains({project}, {project})")));
        assert!(contains(&format!("SELECT automerge_contains({project}, {older})")));
        assert!(!contains(&format!("SELECT automerge_contains({older}, {project})")));
        let other = format!("'{}'::automerge", hex_of(&sample("todo-list").save()));
        assert!(!contains(&format!("SELECT automerge_contains({project}, {other})")));
        assert!(contains(&format!(
            "SELECT automerge_contains({project}, automerge_save_since({project}, ARRAY['{first}']))"
        )));
        assert!(!contains(&format!(
            "SELECT automerge_contains({older}, automerge_save_since({project}, ARRAY['{first}']))"
        )));
        assert!(contains(&format!("SELECT automerge_contains({project}, '\\x'::bytea)")));
        let garbage = format!("SELECT automerge_contains({project}, '\\x0102'::bytea)");
        assert_eq!(sqlstate_of(&garbage), "22P03");
    }

    #[pg_test]
    fn unknown_or_malformed_heads_are_refused() {
        let unknown = "cd".repeat(32);
        for sql in [
            format!("SELECT * FROM automerge_changes({}, ARRAY['{unknown}'])", project_sql()),
            format!("SELECT automerge_save_since({}, ARRAY['xyz'])", project_sql()),
        ] {
            assert_eq!(sqlstate_of(&sql), "22023", "{sql}");
        }
    }
}
