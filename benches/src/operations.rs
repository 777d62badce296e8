//! The names of the SQL benches' groups: the `operation` of a result row, by which the
//! benches name their groups (`sql/<operation>`) and the goals find what they judge. The
//! writes a JS client sends are named by [`ClientWrite::operation`](crate::ClientWrite).

pub const READ_TITLE: &str = "read title";
pub const TO_JSONB: &str = "to jsonb";
pub const CONTAINMENT: &str = "containment";
pub const NESTED_PATH: &str = "nested path";
pub const HEADS: &str = "heads";
pub const CHANGE_COUNT: &str = "change count";
pub const EQUALITY: &str = "equality";
pub const HASH: &str = "hash";
pub const HAS_ITS_HEADS: &str = "has its heads";
pub const HISTORY: &str = "history";
/// `automerge_changes` since the document's heads, as a client that is up to date asks.
pub const CHANGES_SINCE_ITS_HEADS: &str = "changes since its heads";
pub const SPANS: &str = "spans";
pub const MERGE_AGG: &str = "merge_agg";
pub const INCREMENTAL_WRITE: &str = "incremental write";
pub const GENERATED_COLUMN_WRITE: &str = "generated column write";
pub const UPSERT_FULL_SAVE: &str = "upsert full save";
pub const TEXT_EDIT_THEN_READ: &str = "text edit then read";
