//! Memory you can see and cap.
//!
//! - The Rust heap of every backend is counted (`pg_automerge_core::memory`), and
//!   `automerge_memory_usage()` / `automerge_memory_reset()` show and restart the count.
//! - `pg_automerge.trim_threshold`: at the end of a transaction that freed more than this,
//!   give free memory back to the operating system (`malloc_trim`), so that one large load
//!   does not keep a backend's resident size up for the rest of its life.
//! - `pg_automerge.max_load_memory`: loads of client input and merge results whose
//!   estimated peak is above this are refused before they start.
//! - With the library in `shared_preload_libraries`, every backend publishes its counters
//!   to shared memory at the end of each transaction, and `automerge_memory_backends()`
//!   lists them.

use std::ffi::c_void;

use pg_automerge_core::memory::{self, CountingAllocator};
use pgrx::prelude::*;
use pgrx::{pg_sys, PGRXSharedMemory, PgLwLock, PgSqlErrorCode};

use crate::errors::raise_sqlstate;
use crate::gucs;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// How many backends the shared view can list at once.
const MAX_BACKENDS: usize = 1024;

#[derive(Clone, Copy, Default)]
struct BackendSlot {
    pid: i32,
    allocated: u64,
    peak: u64,
}

// SAFETY: plain integers, no pointers.
unsafe impl PGRXSharedMemory for BackendSlot {}

static BACKENDS: PgLwLock<[BackendSlot; MAX_BACKENDS]> =
    unsafe { PgLwLock::new(c"pg_automerge_backends") };

/// Whether the library was preloaded, so that the shared view exists.
static mut PRELOADED: bool = false;
/// Whether this backend registered the exit callback that frees its slot.
static mut SLOT_RELEASED_AT_EXIT: bool = false;

/// Registers the transaction-end trim and, when preloaded, the shared view.
pub fn init() {
    // SAFETY: called from _PG_init, once per backend, as Postgres expects.
    unsafe {
        pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
        if pg_sys::process_shared_preload_libraries_in_progress {
            PRELOADED = true;
            pgrx::pg_shmem_init!(BACKENDS = [BackendSlot::default(); MAX_BACKENDS]);
        }
    }
}

pub fn preloaded() -> bool {
    // SAFETY: written once in _PG_init, before any SQL runs.
    unsafe { PRELOADED }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(event: pg_sys::XactEvent::Type, _arg: *mut c_void) {
    use pg_sys::XactEvent::*;
    if !matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_PARALLEL_ABORT
    ) {
        return;
    }
    pg_automerge_core::cache::clear();
    pg_automerge_core::index_cache::fit(gucs::write_settings().index_cache_budget);
    let freed = memory::take_freed_since_trim() as u64;
    if gucs::trim_threshold().is_some_and(|threshold| freed > threshold) {
        // SAFETY: malloc_trim only returns free memory to the kernel.
        unsafe { libc::malloc_trim(0) };
    }
    publish();
}

/// Puts this backend's counters in its slot of the shared view, taking a free slot the
/// first time.
fn publish() {
    if !preloaded() {
        return;
    }
    let usage = memory::usage();
    // SAFETY: MyProcPid is set for the life of the backend.
    let pid = unsafe { pg_sys::MyProcPid };
    // SAFETY: a backend runs one thread; the callback is registered once.
    unsafe {
        if !SLOT_RELEASED_AT_EXIT {
            SLOT_RELEASED_AT_EXIT = true;
            pg_sys::before_shmem_exit(Some(release_slot), pg_sys::Datum::from(0));
        }
    }
    let mut slots = BACKENDS.exclusive();
    let slot =
        slots.iter().position(|s| s.pid == pid).or_else(|| slots.iter().position(|s| s.pid == 0));
    if let Some(index) = slot {
        slots[index] = BackendSlot {
            pid,
            allocated: usage.allocated_bytes as u64,
            peak: usage.peak_allocated_bytes as u64,
        };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn release_slot(_code: i32, _arg: pg_sys::Datum) {
    // SAFETY: MyProcPid is set for the life of the backend.
    let pid = unsafe { pg_sys::MyProcPid };
    for slot in BACKENDS.exclusive().iter_mut().filter(|s| s.pid == pid) {
        *slot = BackendSlot::default();
    }
}

/// This backend's resident set size, from /proc.
fn resident_bytes() -> i64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<i64>().ok())
        .unwrap_or(-1);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) }
}

/// This backend's Rust heap: allocated now, the peak since the last reset, how many
/// documents it loaded and how long that took, and its resident size.
#[pg_extern(volatile, parallel_restricted)]
fn automerge_memory_usage() -> TableIterator<
    'static,
    (
        name!(allocated_bytes, i64),
        name!(peak_allocated_bytes, i64),
        name!(loads, i64),
        name!(load_time_ms, f64),
        name!(resident_bytes, i64),
    ),
> {
    let usage = memory::usage();
    TableIterator::once((
        usage.allocated_bytes as i64,
        usage.peak_allocated_bytes as i64,
        usage.loads as i64,
        usage.load_time.as_secs_f64() * 1000.0,
        resident_bytes(),
    ))
}

/// Starts a new measurement: the peak becomes what is allocated now, loads count from zero.
#[pg_extern(volatile, parallel_restricted)]
fn automerge_memory_reset() {
    memory::reset();
}

/// Every backend's Rust heap, as each published it at the end of its last transaction.
/// Needs the library in `shared_preload_libraries`.
#[pg_extern(volatile, parallel_restricted)]
fn automerge_memory_backends() -> TableIterator<
    'static,
    (name!(pid, i32), name!(allocated_bytes, i64), name!(peak_allocated_bytes, i64)),
> {
    if !preloaded() {
        raise_sqlstate(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "automerge_memory_backends() needs pg_automerge in shared_preload_libraries".into(),
            Some(
                "Add pg_automerge to shared_preload_libraries and restart the server; \
                 automerge_memory_usage() shows this backend's own heap without it.",
            ),
            "automerge_memory_backends",
        );
    }
    publish();
    let slots = BACKENDS.share();
    let rows: Vec<_> = slots
        .iter()
        .filter(|s| s.pid != 0)
        .map(|s| (s.pid, s.allocated as i64, s.peak as i64))
        .collect();
    TableIterator::new(rows)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::{error_of, hex_of, sample, sqlstate_of};

    fn usage() -> (i64, i64, i64) {
        Spi::get_three::<i64, i64, i64>(
            "SELECT allocated_bytes, peak_allocated_bytes, loads FROM automerge_memory_usage()",
        )
        .map(|(a, p, l)| (a.unwrap(), p.unwrap(), l.unwrap()))
        .unwrap()
    }

    #[pg_test]
    fn usage_counts_loads_and_reset_restarts_the_count() {
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        let (allocated, peak, loads) = usage();
        assert_eq!(loads, 0);
        assert!(peak >= allocated);
        Spi::run_with_args("SELECT $1::automerge::jsonb", &[sample("project").save().into()])
            .unwrap();
        let (_, peak_after, loads_after) = usage();
        // Input validation loads once; the jsonb cast reads the JSON the value keeps.
        assert_eq!(loads_after, 1);
        assert!(peak_after > peak, "a load raises the peak");
        // A value that keeps no JSON is loaded to be read.
        Spi::run("SET LOCAL pg_automerge.keep_jsonb = off").unwrap();
        Spi::run_with_args("SELECT $1::automerge::jsonb", &[sample("project").save().into()])
            .unwrap();
        assert_eq!(usage().2, 3);
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        assert_eq!(usage().2, 0);
    }

    #[pg_test]
    fn a_load_over_the_limit_is_refused_with_the_estimate() {
        let project = sample("project").save();
        Spi::run("SET LOCAL pg_automerge.max_load_memory = 0").unwrap();
        let insert = format!("SELECT '{}'::automerge", hex_of(&project));
        assert_eq!(sqlstate_of(&insert), "53400");
        Spi::run("SET LOCAL pg_automerge.max_load_memory = -1").unwrap();
        assert_eq!(sqlstate_of(&insert), "no error");
    }

    #[pg_test]
    fn a_refusal_says_the_estimate_the_limit_and_the_setting_that_admits_it() {
        let text = fixtures::generated::generate(fixtures::generated::Spec {
            kind: fixtures::generated::Kind::PlainText,
            scale: fixtures::generated::Scale::Small,
            compacted: false,
        });
        let estimate = pg_automerge_core::estimate::estimate_client_bytes(&text).unwrap();
        let mb = estimate.peak_bytes().div_ceil(1 << 20);
        Spi::run("CREATE TABLE texts (doc automerge)").unwrap();
        let insert = format!("INSERT INTO texts VALUES ('{}')", hex_of(&text));
        let below = mb - 1;
        Spi::run(&format!("SET LOCAL pg_automerge.max_load_memory = '{below}MB'")).unwrap();
        let refused = error_of(&insert).expect("refused below the estimate");
        assert_eq!(refused.sqlstate, "53400");
        assert_eq!(
            refused.message,
            format!(
                "loading this document is estimated to need {mb} MB, above \
                 pg_automerge.max_load_memory ({below} MB)"
            )
        );
        let hint = refused.hint.expect("a hint");
        let admit = format!("SET pg_automerge.max_load_memory = '{mb}MB'");
        assert!(hint.starts_with(&admit), "{hint}");
        // The setting the hint names admits it.
        Spi::run(&admit.replace("SET ", "SET LOCAL ")).unwrap();
        assert!(error_of(&insert).is_none());
    }

    #[pg_test]
    fn the_default_limit_is_the_cores() {
        let shown = Spi::get_one::<String>("SHOW pg_automerge.max_load_memory").unwrap().unwrap();
        let default = pg_automerge_core::settings::DEFAULT_MAX_LOAD_MEMORY;
        assert_eq!(shown, format!("{}GB", default >> 30));
        assert_eq!(crate::gucs::load_limit().0, Some(default));
    }

    #[pg_test]
    fn reads_are_not_limited_but_merges_are() {
        Spi::run_with_args(
            "CREATE TABLE docs AS SELECT $1::bytea::automerge AS a, $2::bytea::automerge AS b",
            &[sample("project").save().into(), sample("todo-list").save().into()],
        )
        .unwrap();
        Spi::run("SET LOCAL pg_automerge.max_load_memory = 0").unwrap();
        let title = Spi::get_one::<String>("SELECT a->>'title' FROM docs").unwrap();
        assert_eq!(title.as_deref(), Some("Launch plan"));
        // Equal heads merge without a load; different ones need one, which is refused.
        assert_eq!(sqlstate_of("SELECT a || a FROM docs"), "no error");
        assert_eq!(sqlstate_of("SELECT a || b FROM docs"), "53400");
        assert_eq!(sqlstate_of("SELECT a || b::bytea FROM docs"), "53400");
    }

    #[pg_test]
    fn the_shared_view_says_it_needs_preloading() {
        assert_eq!(sqlstate_of("SELECT * FROM automerge_memory_backends()"), "55000");
    }
}
