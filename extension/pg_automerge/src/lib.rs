//! pg_automerge: Automerge CRDT documents as a PostgreSQL column type.
//!
//! This crate is a thin adapter: each module turns functions of `pg_automerge_core` into
//! SQL. The Automerge logic itself, and its tests, live in the core crate.

mod casts;
mod compaction;
mod conflicts;
mod datum;
mod diff;
mod edit_changes;
mod edits;
mod equality;
mod errors;
mod gucs;
mod history;
mod html;
mod io;
mod jsonb;
mod kept_json;
mod loading;
mod markdown;
mod memory;
mod merge_agg;
mod merge_state;
mod notify;
mod repair;
mod spans;
mod storage;
mod writes;

::pgrx::pg_module_magic!(name, version);

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
    compaction::init();
    memory::init();
    pg_automerge_core::interrupts::install(|| {
        pgrx::check_for_interrupts!();
    });
}

#[cfg(any(test, feature = "pg_test"))]
mod test_support;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
