//! Raising errors as Postgres ERRORs, each with its SQLSTATE: the core crate's, and the
//! few of the adapter's own. Every ERROR the extension reports is built here.

use pg_automerge_core::{Error, ErrorKind};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// The SQLSTATE of each kind of error (documented in docs/sql-reference.md).
fn sqlstate(kind: ErrorKind) -> PgSqlErrorCode {
    match kind {
        ErrorKind::InvalidText => PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
        ErrorKind::InvalidBinary => PgSqlErrorCode::ERRCODE_INVALID_BINARY_REPRESENTATION,
        ErrorKind::InvalidParameter => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        ErrorKind::WrongObjectType => PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
        ErrorKind::IndexOutOfRange => PgSqlErrorCode::ERRCODE_ARRAY_ELEMENT_ERROR,
        ErrorKind::TextRangeOutOfBounds => PgSqlErrorCode::ERRCODE_SUBSTRING_ERROR,
        ErrorKind::ConfigurationLimitExceeded => {
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED
        }
        ErrorKind::TooComplex => PgSqlErrorCode::ERRCODE_STATEMENT_TOO_COMPLEX,
        ErrorKind::DataCorrupted => PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        ErrorKind::FeatureNotSupported => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
    }
}

/// Raises `err` as an ERROR; does not return.
pub fn raise(err: Error, function: &'static str) -> ! {
    report(sqlstate(err.kind()), err.to_string(), err.detail(), err.hint().as_deref(), function)
}

/// Raises an ERROR of the adapter's own, which no core `Error` describes (a trigger
/// created the wrong way, a column that is not there); does not return.
pub fn raise_sqlstate(
    code: PgSqlErrorCode,
    message: String,
    hint: Option<&str>,
    function: &'static str,
) -> ! {
    report(code, message, None, hint, function)
}

fn report(
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<&str>,
    function: &'static str,
) -> ! {
    let mut report = ErrorReport::new(code, message, function);
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// `result.or_raise("fn_name")`: the value, or the error raised as an ERROR.
pub trait OrRaise<T> {
    fn or_raise(self, function: &'static str) -> T;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self, function: &'static str) -> T {
        self.unwrap_or_else(|err| raise(err, function))
    }
}
