//! Every `pg_automerge.*` setting, with its getter: what values keep and how writes treat
//! them (`keep_jsonb`, `append_limit`, `document_cache`, `index_cache`), memory (`trim_threshold`,
//! `max_load_memory`), and the background compactor (`compactor_database`,
//! `compactor_naptime`, `compact_after`). docs/operations.md and docs/storage-format.md say
//! what each does.

use std::ffi::CString;
use std::time::Duration;

use pg_automerge_core::settings::{self, LoadLimit, WriteSettings};
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

use crate::kept_json::JSONB;

const MB: u64 = 1 << 20;

static KEEP_JSONB: GucSetting<bool> = GucSetting::<bool>::new(true);
static APPEND_LIMIT: GucSetting<i32> =
    GucSetting::<i32>::new(settings::DEFAULT_APPEND_LIMIT as i32);
static DOCUMENT_CACHE: GucSetting<i32> =
    GucSetting::<i32>::new((settings::DEFAULT_CACHE_BUDGET / MB) as i32);
static INDEX_CACHE: GucSetting<i32> =
    GucSetting::<i32>::new((settings::DEFAULT_INDEX_CACHE_BUDGET / MB) as i32);
static TRIM_THRESHOLD: GucSetting<i32> = GucSetting::<i32>::new(64);
static MAX_LOAD_MEMORY: GucSetting<i32> =
    GucSetting::<i32>::new((settings::DEFAULT_MAX_LOAD_MEMORY / MB) as i32);

static COMPACTOR_DATABASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static COMPACTOR_NAPTIME: GucSetting<i32> = GucSetting::<i32>::new(1000);
static COMPACT_AFTER: GucSetting<i32> = GucSetting::<i32>::new(1);

pub fn init() {
    GucRegistry::define_bool_guc(
        c"pg_automerge.keep_jsonb",
        c"Keep each written document's JSON in the stored value, so that jsonb reads need no load.",
        c"Off stores less and writes faster, but every jsonb read of such a value loads the document.",
        &KEEP_JSONB,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_automerge.append_limit",
        c"How many changes an incremental write may append to a stored document without loading it.",
        c"The write after that many loads the document and saves it anew. 0 makes every incremental write load.",
        &APPEND_LIMIT,
        0,
        1_000_000,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_automerge.document_cache",
        c"Hold the document that client input loaded, for the merge that follows in the transaction, if it keeps at most this much memory.",
        c"An upsert of a full save then loads it once. 0 holds none.",
        &DOCUMENT_CACHE,
        0,
        i32::MAX / 2,
        GucContext::Userset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pg_automerge.index_cache",
        c"Hold the structure indexes of the documents this backend last wrote without a load, up to this much memory.",
        c"The next such write to one of them starts from the held index instead of decoding the stored one. 0 holds none.",
        &INDEX_CACHE,
        0,
        i32::MAX / 2,
        GucContext::Userset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pg_automerge.trim_threshold",
        c"Give freed memory back to the operating system after a transaction that freed more than this.",
        c"-1 never trims. Only superusers can change it.",
        &TRIM_THRESHOLD,
        -1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"pg_automerge.max_load_memory",
        c"Refuse to load client input or a merge result estimated to need more memory than this.",
        c"-1 sets no limit. Reads of stored documents are not limited. Only superusers can change it.",
        &MAX_LOAD_MEMORY,
        -1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    // A postmaster setting can only be defined while the server starts.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_string_guc(
            c"pg_automerge.compactor_database",
            c"The database whose automerge columns the background compactor keeps compacted.",
            c"Empty runs no compactor. Needs pg_automerge in shared_preload_libraries; takes a restart.",
            &COMPACTOR_DATABASE,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"pg_automerge.compactor_naptime",
        c"How long the background compactor sleeps after a round that found nothing to compact.",
        c"Each round reads the header of every row written since the last one, in tables that were written.",
        &COMPACTOR_NAPTIME,
        10,
        86_400_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_automerge.compact_after",
        c"How many appended changes make the background compactor save a stored value anew.",
        c"Clients load a value with appended changes more slowly than its save alone.",
        &COMPACT_AFTER,
        1,
        1_000_000,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// The settings now in force for writes.
pub fn write_settings() -> WriteSettings {
    WriteSettings {
        load_limit: load_limit(),
        keep_json: KEEP_JSONB.get(),
        json_codec: &JSONB,
        append_limit: APPEND_LIMIT.get().max(0) as u32,
        cache_budget: DOCUMENT_CACHE.get().max(0) as u64 * MB,
        index_cache_budget: INDEX_CACHE.get().max(0) as u64 * MB,
    }
}

/// The load limit now in force (`max_load_memory`).
pub fn load_limit() -> LoadLimit {
    let mb = MAX_LOAD_MEMORY.get();
    LoadLimit((mb >= 0).then(|| mb as u64 * MB))
}

/// How many freed bytes make a transaction's end give memory back (`trim_threshold`);
/// `None` never trims.
pub fn trim_threshold() -> Option<u64> {
    let mb = TRIM_THRESHOLD.get();
    (mb >= 0).then(|| mb as u64 * MB)
}

/// The database the background compactor works in (`compactor_database`); `None` runs none.
pub fn compactor_database() -> Option<String> {
    let database = COMPACTOR_DATABASE.get()?.into_string().ok()?;
    (!database.is_empty()).then_some(database)
}

/// How long the compactor sleeps when it found nothing to do (`compactor_naptime`).
pub fn compactor_naptime() -> Duration {
    Duration::from_millis(COMPACTOR_NAPTIME.get().max(10) as u64)
}

/// How many appended changes make a value worth compacting (`compact_after`).
pub fn compact_after() -> i32 {
    COMPACT_AFTER.get().max(1)
}
