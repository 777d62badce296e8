//! Helpers for the #[pg_test]s of every module.

use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode, PgTryBuilder};

/// A named sample document from the fixtures crate.
pub fn sample(name: &str) -> automerge::Automerge {
    fixtures::samples()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no sample named {name}"))
        .doc
}

/// Creates the table `samples (name text, doc automerge)` holding every sample document,
/// for the current test's transaction.
pub fn with_samples() {
    Spi::run("CREATE TABLE samples (name text PRIMARY KEY, doc automerge NOT NULL)").unwrap();
    for sample in fixtures::samples() {
        Spi::run_with_args(
            "INSERT INTO samples VALUES ($1, $2)",
            &[sample.name.into(), sample.doc.save().into()],
        )
        .unwrap();
    }
}

/// The text form of Automerge bytes, as a SQL literal's contents.
pub fn hex_of(bytes: &[u8]) -> String {
    pg_automerge_core::text_form::format(bytes)
}

/// Runs `sql` in a subtransaction and returns the SQLSTATE of the error it raises, or
/// "no error". The subtransaction keeps the test's own transaction usable afterwards,
/// as a PL/pgSQL EXCEPTION block does.
pub fn sqlstate_of(sql: &str) -> String {
    error_of(sql).map_or_else(|| "no error".to_string(), |error| error.sqlstate)
}

/// What an ERROR said.
#[derive(Debug)]
pub struct Raised {
    pub sqlstate: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

/// Runs `sql` in a subtransaction, as [`sqlstate_of`] does, and returns the error it
/// raises, if any.
pub fn error_of(sql: &str) -> Option<Raised> {
    // SAFETY: the subtransaction is begun and ended here, on every path, with the memory
    // context and resource owner restored as PL/pgSQL does around an EXCEPTION block.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        PgTryBuilder::new(|| {
            Spi::run(sql).expect("SPI reports errors by raising them");
            pg_sys::ReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
            None
        })
        .catch_others(|caught| {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
            let report = match &caught {
                CaughtError::PostgresError(report) | CaughtError::ErrorReport(report) => report,
                CaughtError::RustPanic { ereport, .. } => ereport,
            };
            Some(Raised {
                sqlstate: sqlstate_text(report.sql_error_code()),
                message: report.message().to_string(),
                detail: report.detail().map(str::to_string),
                hint: report.hint().map(str::to_string),
            })
        })
        .execute()
    }
}

/// The five characters of a SQLSTATE, unpacked as Postgres' PGUNSIXBIT does.
fn sqlstate_text(code: PgSqlErrorCode) -> String {
    let packed = code as i32;
    (0..5).map(|i| char::from(((packed >> (6 * i)) & 0x3F) as u8 + b'0')).collect()
}
