//! Every `pg_automerge.*` setting, with its getter: what values keep and how writes treat
//! them (`keep_jsonb`, `append_limit`, `document_cache`), and memory (`trim_threshold`,
//! `max_load_memory`). docs/operations.md and docs/storage-format.md say what each does.

use pg_automerge_core::document::{self, LoadLimit, WriteSettings};
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

use crate::kept_json::JSONB;

const MB: u64 = 1 << 20;

static KEEP_JSONB: GucSetting<bool> = GucSetting::<bool>::new(true);
static APPEND_LIMIT: GucSetting<i32> =
    GucSetting::<i32>::new(document::DEFAULT_APPEND_LIMIT as i32);
static DOCUMENT_CACHE: GucSetting<i32> =
    GucSetting::<i32>::new((document::DEFAULT_CACHE_BUDGET / MB) as i32);
static TRIM_THRESHOLD: GucSetting<i32> = GucSetting::<i32>::new(64);
static MAX_LOAD_MEMORY: GucSetting<i32> =
    GucSetting::<i32>::new((pg_automerge_core::estimate::DEFAULT_MAX_LOAD_MEMORY / MB) as i32);

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
}

/// The settings now in force for writes.
pub fn write_settings() -> WriteSettings {
    WriteSettings {
        load_limit: load_limit(),
        keep_json: KEEP_JSONB.get(),
        json_codec: &JSONB,
        append_limit: APPEND_LIMIT.get().max(0) as u32,
        cache_budget: DOCUMENT_CACHE.get().max(0) as u64 * MB,
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
