//! History: heads and change count (read from the stored header, without loading), whether
//! the document has given changes, the changes themselves, and the bytes a client needs to
//! catch up.

use pg_automerge_core::{heads, history};
use pgrx::prelude::*;

use crate::datum::{DocHeader, LazyDoc, StoredDoc};
use crate::errors::OrRaise;
use crate::stored;

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
    let heads = stored::parse_heads(&heads, FUNCTION);
    pg_automerge_core::document::has_changes(&doc, &heads).or_raise(FUNCTION)
}

/// Every change of the document in causal order or, given `since`, only those that a
/// replica whose heads are `since` lacks.
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
    let loaded = stored::load(&doc, FUNCTION);
    let since = since.map(|texts| stored::parse_heads(&texts, FUNCTION));
    let changes = history::changes(&loaded, since.as_deref()).or_raise(FUNCTION);
    TableIterator::new(changes.into_iter().map(|c| {
        let micros = c.time_ms.saturating_sub(POSTGRES_EPOCH_MS).saturating_mul(1000);
        // A client's clock can say anything: times outside Postgres' range are infinite.
        let time = TimestampWithTimeZone::try_from(micros).unwrap_or_else(|_| {
            if micros < 0 {
                TimestampWithTimeZone::negative_infinity()
            } else {
                TimestampWithTimeZone::positive_infinity()
            }
        });
        let (seq, start_op, op_count) = (c.seq as i64, c.start_op as i64, c.op_count as i64);
        (c.hash, c.actor, seq, start_op, op_count, time, c.message, c.deps, c.bytes)
    }))
}

/// What a client whose heads are `since` loads (`loadIncremental`) to catch up.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_save_since(doc: StoredDoc<'_>, since: Vec<String>) -> Vec<u8> {
    const FUNCTION: &str = "automerge_save_since";
    let loaded = stored::load(&doc, FUNCTION);
    let since = stored::parse_heads(&since, FUNCTION);
    history::catch_up(&loaded, &since).or_raise(FUNCTION)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::Automerge;
    use pgrx::prelude::*;

    use crate::test_support::{hex_of, sample, sqlstate_of};

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
