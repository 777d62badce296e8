//! Compaction: `automerge_compact(doc)`, which saves one value anew now, and the
//! background compactor, a worker that saves stored values anew once writes have
//! appended changes to them, so that clients load a save again instead of a save and the
//! changes after it, and writes seldom reach `append_limit`, where they would load the
//! document themselves.
//!
//! It works in `pg_automerge.compactor_database`, on every `automerge` column of a table
//! with a primary key. Each round looks at rows written since the last one (by `xmin`, in
//! tables whose statistics show writes), reading their headers alone. A value with at least
//! `compact_after` appended changes is compacted once no write has come to it for a
//! naptime; one still written, once it holds half of `append_limit`, unless such a
//! compaction of it was overtaken before (a write loaded first: the document takes longer
//! to load than its writes take to reach the limit, and compacting it meanwhile would only
//! take a core from them), after which it is compacted only when quiet. A row is compacted without a lock (the load and save take the time),
//! then locked and given the result with whatever changes were appended meanwhile
//! ([`Compacted::onto`](pg_automerge_core::compaction::Compacted::onto)): writers wait for
//! that short update only. The update fires no triggers (`session_replication_role` is
//! `replica` for it): the document is the same.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pg_automerge_core::compaction::{self, Compacted};
use pg_automerge_core::{format, ErrorKind};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiTupleTable;
use pgrx::{PgAtomic, PgSqlErrorCode};

use crate::datum::StoredDoc;
use crate::errors::{raise_sqlstate, OrRaise};
use crate::gucs;
use crate::memory::preloaded;

/// How many rows the compactor left as they are because no safe save of them could be
/// made (see [`Outcome::LeftUnsafe`]), cluster-wide, for `automerge_compactor_status()`.
static ROWS_LEFT_UNSAFE: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"pg_automerge_rows_left") };
/// How many values the compactor saved anew since the server started.
static COMPACTED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"pg_automerge_compacted") };

/// Registers the worker and its counters, when the library is preloaded and a database is
/// set.
pub fn init() {
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    pgrx::pg_shmem_init!(ROWS_LEFT_UNSAFE);
    pgrx::pg_shmem_init!(COMPACTED);
    if gucs::compactor_database().is_none() {
        return;
    }
    BackgroundWorkerBuilder::new("pg_automerge compactor")
        .set_type("pg_automerge compactor")
        .set_library("pg_automerge")
        .set_function("automerge_compactor_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(10)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn automerge_compactor_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(database) = gucs::compactor_database() else { return };
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    log!("pg_automerge compactor started in database \"{database}\"");
    let mut seen = HashMap::new();
    let mut nap = Duration::ZERO;
    while !stopping() && BackgroundWorker::wait_latch(Some(nap)) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        // A round that compacted something goes on at once: a hot row may have more.
        nap = match round(&mut seen) {
            0 => gucs::compactor_naptime(),
            _ => Duration::ZERO,
        };
    }
}

/// Whether the server asked the worker to stop (SIGTERM). Read without clearing it, unlike
/// `BackgroundWorker::sigterm_received`, so that the main loop sees it too.
fn stopping() -> bool {
    unsafe { (&raw const pg_sys::ShutdownRequestPending).read_volatile() != 0 }
}

/// A table with `automerge` columns, as the catalog describes it.
struct Table {
    oid: u32,
    /// Its schema-qualified, quoted name.
    name: String,
    /// Its `automerge` columns, quoted.
    columns: Vec<String>,
    /// Its primary key's columns, quoted, with their types.
    key: Vec<(String, String)>,
    /// Inserts and updates so far, from the statistics.
    writes: i64,
}

/// A row's value: its column, and its primary key as text.
type RowKey = (String, Vec<String>);

/// What the last round saw of a table: its writes, the oldest transaction that may have
/// written a row it did not look at, and the rows it left waiting because writes were
/// still coming to them.
#[derive(Default)]
struct Seen {
    writes: Option<i64>,
    horizon: Option<String>,
    waiting: HashMap<RowKey, Waiting>,
    /// Rows whose compaction while they were written was overtaken by a write that saved
    /// them anew (their load takes longer than their writers take to reach
    /// `append_limit`): compacted only once quiet from then on.
    overtaken: HashSet<RowKey>,
    /// Rows left as they are because no safe save of them could be made: each is warned
    /// about once, and counted.
    left_unsafe: HashSet<RowKey>,
}

/// A value left with appended changes while writes still came to it.
struct Waiting {
    /// How many it held (`None`: unknown, after a compaction a write overtook).
    appended: Option<i32>,
    /// When a round last found it written.
    written_at: Instant,
}

/// What became of one row's compaction.
enum Outcome {
    Compacted,
    /// A write saved the value anew while it was being compacted.
    Overtaken,
    /// Nothing to compact.
    Left,
    /// A value whose new save would not load, or that does not load itself (a change an
    /// older version stored; `automerge_repair` mends it): left as it is, and why.
    LeftUnsafe(String),
}

/// One round over the tables; how many values it compacted. A value with at least
/// `compact_after` appended changes is compacted once no write has come to it for a
/// naptime (it went quiet), or at once when it holds half of `append_limit`, before a write
/// would load to fold them in.
fn round(seen: &mut HashMap<u32, Seen>) -> usize {
    let Some((tables, type_oid, function)) = BackgroundWorker::transaction(catalog) else {
        return 0;
    };
    let (compact_after, naptime, now) =
        (gucs::compact_after(), gucs::compactor_naptime(), Instant::now());
    let hot_after = compact_after.max((gucs::write_settings().append_limit / 2) as i32);
    let mut compacted = 0;
    for table in tables.iter().filter(|table| !table.key.is_empty()) {
        let state = seen.entry(table.oid).or_default();
        // Unchanged statistics mean no new writes, unless rows wait: statistics lag.
        let written = if state.writes == Some(table.writes) && state.waiting.is_empty() {
            continue;
        } else if state.writes == Some(table.writes) {
            HashMap::new()
        } else {
            let (written, horizon) = BackgroundWorker::transaction(AssertUnwindSafe(|| {
                written_since(table, &function, state.horizon.as_deref())
            }));
            state.writes = Some(table.writes);
            state.horizon = Some(horizon);
            written
        };
        // Each row due, and whether it is still being written.
        let mut due: HashMap<RowKey, bool> = HashMap::new();
        let mut waiting = HashMap::new();
        for (row, left) in state.waiting.drain() {
            match written.get(&row) {
                Some(&appended) if Some(appended) != left.appended => {
                    waiting.insert(row, Waiting { appended: Some(appended), written_at: now });
                }
                _ if now.duration_since(left.written_at) < naptime => {
                    waiting.insert(row, left);
                }
                // Quiet: worth compacting unless a write that loaded left it with fewer.
                _ if left.appended.is_none_or(|appended| appended >= compact_after) => {
                    due.insert(row, false);
                }
                _ => {}
            }
        }
        for (row, appended) in written {
            if appended < compact_after || due.contains_key(&row) {
                continue;
            }
            if appended >= hot_after && !state.overtaken.contains(&row) {
                waiting.remove(&row);
                due.insert(row, true);
            } else {
                waiting.entry(row).or_insert(Waiting { appended: Some(appended), written_at: now });
            }
        }
        for (row, hot) in due {
            if stopping() {
                return compacted;
            }
            let outcome = BackgroundWorker::transaction(AssertUnwindSafe(|| {
                compact_row(table, &row.0, &row.1, type_oid)
            }));
            if !matches!(outcome, Outcome::LeftUnsafe(_)) {
                state.left_unsafe.remove(&row);
            }
            match outcome {
                Outcome::Compacted => {
                    compacted += 1;
                    COMPACTED.get().fetch_add(1, Ordering::Relaxed);
                }
                Outcome::LeftUnsafe(why) => {
                    if state.left_unsafe.insert(row.clone()) {
                        warning!(
                            "pg_automerge compactor: {} {:?} left as it is: {why}",
                            table.name,
                            row.1
                        );
                    }
                }
                Outcome::Overtaken if hot => {
                    waiting.insert(
                        row.clone(),
                        Waiting { appended: None, written_at: Instant::now() },
                    );
                    state.overtaken.insert(row);
                }
                Outcome::Overtaken | Outcome::Left => {}
            }
        }
        state.waiting = waiting;
    }
    let left: usize = seen.values().map(|state| state.left_unsafe.len()).sum();
    ROWS_LEFT_UNSAFE.get().store(left as u64, Ordering::Relaxed);
    compacted
}

/// What the background compactor did since the server started: how many values it saved
/// anew, and how many rows it left as they are because no save of them that loads could be
/// made (each named once in a WARNING in the server log). Needs the library in
/// `shared_preload_libraries`.
#[pg_extern(volatile, parallel_restricted)]
fn automerge_compactor_status(
) -> TableIterator<'static, (name!(compacted, i64), name!(rows_left_unsafe, i64))> {
    if !preloaded() {
        raise_sqlstate(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "automerge_compactor_status() needs pg_automerge in shared_preload_libraries".into(),
            Some("Add pg_automerge to shared_preload_libraries and restart the server."),
            "automerge_compactor_status",
        );
    }
    let count = |counter: &PgAtomic<AtomicU64>| counter.get().load(Ordering::Relaxed) as i64;
    TableIterator::once((count(&COMPACTED), count(&ROWS_LEFT_UNSAFE)))
}

/// The document saved anew in the current format, with its JSON when `keep_jsonb` is on:
/// what a write that loads stores. For values written by an older version, with appended
/// changes, or without JSON.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_compact(doc: StoredDoc<'_>) -> StoredDoc<'static> {
    let compacted = format::decode(doc.stored())
        .and_then(|value| compaction::compact(&value, gucs::write_settings()));
    match compacted {
        Ok(compacted) => StoredDoc::owned(compacted),
        // Its new save would not load, or it does not load itself (a change an older
        // version stored): the value stays as clients load it, and `UPDATE t SET doc =
        // automerge_compact(doc)` goes on to the other rows.
        Err(err) if err.kind() == ErrorKind::DataCorrupted => {
            warning!("automerge_compact left the value as it is: {err}");
            StoredDoc::owned(doc.stored().to_vec())
        }
        Err(err) => Err(err).or_raise("automerge_compact"),
    }
}

/// The tables with `automerge` columns, the type's oid and the qualified name of
/// `automerge_appended_changes`; `None` when the extension is not installed, or its SQL is
/// of a version before that function (said once: `ALTER EXTENSION pg_automerge UPDATE`).
fn catalog() -> Option<(Vec<Table>, pg_sys::Oid, String)> {
    static SAID_OUTDATED: AtomicBool = AtomicBool::new(false);
    Spi::connect(|client| {
        let extension = client
            .select(
                "SELECT t.oid, e.extversion,
                        (SELECT format('%s.%s', e.extnamespace::regnamespace, p.proname)
                         FROM pg_proc p
                         WHERE p.pronamespace = e.extnamespace
                           AND p.proname = 'automerge_appended_changes')
                 FROM pg_extension e JOIN pg_type t ON t.typnamespace = e.extnamespace
                 WHERE e.extname = 'pg_automerge' AND t.typname = 'automerge'",
                None,
                &[],
            )
            .ok()?
            .first();
        let type_oid = extension.get::<pg_sys::Oid>(1).ok()??;
        let Some(function) = extension.get::<String>(3).ok()? else {
            if !SAID_OUTDATED.swap(true, Ordering::Relaxed) {
                let version = extension.get::<String>(2).ok().flatten().unwrap_or_default();
                warning!(
                    "pg_automerge compactor: the extension's SQL in this database is version \
                     {version}, older than the library; it compacts nothing until \
                     ALTER EXTENSION pg_automerge UPDATE"
                );
            }
            return None;
        };
        let rows = client
            .select(
                "WITH keys AS (
                     SELECT x.indrelid,
                            array_agg(quote_ident(k.attname::text) ORDER BY i.n) AS names,
                            array_agg(format_type(k.atttypid, k.atttypmod) ORDER BY i.n) AS types
                     FROM pg_index x
                     CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS i(attnum, n)
                     JOIN pg_attribute k ON k.attrelid = x.indrelid AND k.attnum = i.attnum
                     WHERE x.indisprimary
                     GROUP BY x.indrelid)
                 SELECT c.oid::int8, format('%I.%I', n.nspname, c.relname),
                        array_agg(quote_ident(a.attname::text) ORDER BY a.attnum),
                        coalesce(keys.names, '{}'), coalesce(keys.types, '{}'),
                        pg_stat_get_tuples_inserted(c.oid) + pg_stat_get_tuples_updated(c.oid)
                 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN keys ON keys.indrelid = c.oid
                 WHERE a.atttypid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'
                 GROUP BY c.oid, n.nspname, c.relname, keys.names, keys.types",
                None,
                &[type_oid.into()],
            )
            .ok()?;
        let tables = rows
            .filter_map(|row| {
                let key_names: Vec<String> = row.get(4).ok()??;
                let key_types: Vec<String> = row.get(5).ok()??;
                Some(Table {
                    oid: row.get::<i64>(1).ok()?? as u32,
                    name: row.get(2).ok()??,
                    columns: row.get(3).ok()??,
                    key: key_names.into_iter().zip(key_types).collect(),
                    writes: row.get(6).ok()??,
                })
            })
            .collect();
        Some((tables, type_oid, function))
    })
}

/// `table`'s primary key matched against the text array `$1`.
fn key_match(table: &Table) -> String {
    let (names, values): (Vec<_>, Vec<_>) = table
        .key
        .iter()
        .enumerate()
        .map(|(i, (name, type_name))| (name.clone(), format!("$1[{}]::{type_name}", i + 1)))
        .unzip();
    format!("({}) = ({})", names.join(", "), values.join(", "))
}

/// The rows of `table` written since `horizon` (a transaction id; every row when `None`),
/// each with how many changes its value holds appended; and the horizon for the next round.
fn written_since(
    table: &Table,
    function: &str,
    horizon: Option<&str>,
) -> (HashMap<RowKey, i32>, String) {
    Spi::connect(|client| {
        let next_horizon = client
            .select(
                "SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::int8 % 4294967296)::text",
                None,
                &[],
            )
            .and_then(|rows| rows.first().get::<String>(1))
            .ok()
            .flatten()
            .unwrap_or_default();
        let keys = table.key.iter().map(|(name, _)| format!("{name}::text")).collect::<Vec<_>>();
        let mut rows = HashMap::new();
        for column in &table.columns {
            let sql = format!(
                "SELECT ARRAY[{}], {function}({column}) FROM {} \
                 WHERE {column} IS NOT NULL AND ($1::xid IS NULL OR age(xmin) <= age($1::xid))",
                keys.join(", "),
                table.name,
            );
            let Ok(found) = client.select(&sql, None, &[horizon.map(str::to_string).into()]) else {
                continue;
            };
            rows.extend(found.filter_map(|row| {
                let key = row.get::<Vec<String>>(1).ok()??;
                Some(((column.clone(), key), row.get::<i32>(2).ok()??))
            }));
        }
        (rows, next_horizon)
    })
}

/// Compacts one row's value, then puts the result onto the value as it is by then.
fn compact_row(table: &Table, column: &str, key: &[String], type_oid: pg_sys::Oid) -> Outcome {
    let matched = key_match(table);
    let key_arg = || -> DatumWithOid<'static> { key.to_vec().into() };
    let select = format!("SELECT {column} FROM {} WHERE {matched}", table.name);
    let read = Spi::connect(|client| client.select(&select, Some(1), &[key_arg()]).map(stored));
    let Ok(Some(read)) = read else { return Outcome::Left };
    let compacted = match Compacted::of(&read, gucs::write_settings()) {
        Ok(Some(compacted)) => compacted,
        Ok(None) => return Outcome::Left,
        Err(err) if err.kind() == ErrorKind::DataCorrupted => {
            return Outcome::LeftUnsafe(err.to_string())
        }
        Err(err) => {
            warning!("pg_automerge compactor: {} {key:?}: {err}", table.name);
            return Outcome::Left;
        }
    };
    drop(read);
    Spi::connect_mut(|client| {
        let locked = format!("{select} FOR UPDATE");
        let Ok(Some(current)) = client.update(&locked, Some(1), &[key_arg()]).map(stored) else {
            return Outcome::Left;
        };
        let put = match compacted.onto(&current) {
            Ok(Some(put)) => put,
            Ok(None) => return Outcome::Overtaken,
            Err(err) => {
                warning!("pg_automerge compactor: {} {key:?}: {err}", table.name);
                return Outcome::Left;
            }
        };
        // SAFETY: the oid is the `automerge` type's, which a `StoredDoc` is.
        let value = unsafe { DatumWithOid::new(StoredDoc::owned(put), type_oid) };
        let update = format!("UPDATE {} SET {column} = $2 WHERE {matched}", table.name);
        let updated =
            client.update("SET LOCAL session_replication_role = replica", None, &[]).is_ok()
                && client.update(&update, None, &[key_arg(), value]).is_ok();
        if updated {
            Outcome::Compacted
        } else {
            Outcome::Left
        }
    })
}

/// The stored form of the value a query selected, copied out of SPI's memory.
fn stored(rows: SpiTupleTable<'_>) -> Option<Vec<u8>> {
    let doc = rows.first().get::<StoredDoc<'_>>(1).ok()??;
    Some(doc.stored().to_vec())
}
