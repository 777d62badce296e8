//! How writes load and store documents: the limit on a load's estimated memory, what a
//! stored value keeps, how many changes may be appended, and what a backend may hold
//! between statements; with each setting's default. The adapter fills [`WriteSettings`]
//! from the `pg_automerge.*` settings (its `gucs.rs`); tests, benchmarks and tools take
//! [`WriteSettings::UNLIMITED`].

use crate::estimate::LoadEstimate;
use crate::kept_json::{JsonCodec, TextJson};
use crate::Error;

/// The most memory a load may be estimated to take (`pg_automerge.max_load_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadLimit(pub Option<u64>);

impl LoadLimit {
    pub const NONE: LoadLimit = LoadLimit(None);

    /// Refuses a load whose estimated peak is above the limit, before it starts.
    pub fn check(self, estimate: &LoadEstimate) -> Result<(), Error> {
        match self.0 {
            Some(limit) if estimate.peak_bytes() > limit => {
                Err(Error::LoadTooLarge { estimate: estimate.peak_bytes(), limit })
            }
            _ => Ok(()),
        }
    }
}

/// The default of `pg_automerge.max_load_memory`: 2 GiB, as the anchor project's. It admits
/// the largest documents the Operations page calls ordinary, each with room to spare: the
/// 3 MB plain text with its 96,000 changes (the largest estimate of them, see
/// `tests/estimate_peaks.rs` and docs/operations.md), the 1.26 MB rich text and the 1.07 MB
/// list of maps.
pub const DEFAULT_MAX_LOAD_MEMORY: u64 = 2 << 30;

/// How many changes a write may append by default (`pg_automerge.append_limit`).
pub const DEFAULT_APPEND_LIMIT: u32 = 64;

/// How many bytes a held document may keep by default (`pg_automerge.document_cache`):
/// room for the Operations page's largest documents, which keep 10–24 MB once loaded.
pub const DEFAULT_CACHE_BUDGET: u64 = 64 << 20;

/// How many bytes of structure indexes a backend may hold by default
/// (`pg_automerge.index_cache`): the index of a JS client's document of a few hundred
/// kilobytes holds 0.3–1.6 MB, of the Operations page's documents 3–10 MB.
pub const DEFAULT_INDEX_CACHE_BUDGET: u64 = 32 << 20;

/// How writes load and store documents; the adapter fills it from the `pg_automerge.*`
/// settings.
#[derive(Debug, Clone, Copy)]
pub struct WriteSettings {
    /// `max_load_memory`.
    pub load_limit: LoadLimit,
    /// `keep_jsonb`: keep the document's JSON in what is stored, so reads need no load.
    pub keep_json: bool,
    /// How the JSON is kept: PostgreSQL's `jsonb` in the extension, text without it.
    pub json_codec: &'static dyn JsonCodec,
    /// `append_limit`: how many changes may sit appended after the last save before a
    /// write loads and re-saves the document; 0 makes every write load.
    pub append_limit: u32,
    /// `document_cache`: the most bytes the last document loaded from client input may keep
    /// to be held for a merge that follows (see [`cache`](crate::cache)); 0 holds none.
    pub cache_budget: u64,
    /// `index_cache`: the most bytes the structure indexes of documents this backend wrote
    /// without a load may hold for the next such write (see
    /// [`index_cache`](crate::index_cache)); 0 holds none.
    pub index_cache_budget: u64,
}

impl WriteSettings {
    /// The defaults with no load limit: for tests, benchmarks and tools.
    pub const UNLIMITED: WriteSettings = WriteSettings {
        load_limit: LoadLimit::NONE,
        keep_json: true,
        json_codec: &TextJson,
        append_limit: DEFAULT_APPEND_LIMIT,
        cache_budget: DEFAULT_CACHE_BUDGET,
        // Each write decodes the stored index, as a backend's first write of a value does.
        index_cache_budget: 0,
    };
}
