//! Letting the database stop long work: `statement_timeout` and `pg_cancel_backend` take
//! effect where the work checks for them. The extension installs PostgreSQL's check at
//! load; without one (tests, benchmarks) checking does nothing. The check reports a
//! cancel by unwinding, so it is called only between steps of this crate's own loops,
//! never inside a call into Automerge: that work is bounded by the load estimate instead.

use std::sync::OnceLock;

static CHECK: OnceLock<fn()> = OnceLock::new();

/// Installs the check; the first one installed stays.
pub fn install(check: fn()) {
    let _ = CHECK.set(check);
}

/// Runs the installed check, if any.
pub(crate) fn check() {
    if let Some(check) = CHECK.get() {
        check();
    }
}
