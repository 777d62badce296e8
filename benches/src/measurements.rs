//! What a bench run measured, as `cargo xtask bench` reads it back from criterion's
//! estimates and the files the benches write: one row per benchmark, the storage
//! measurements, and the names of the `client` level's operations. The goals
//! ([`crate::goals`]) judge these; xtask's report prints them.

/// One benchmark: an operation on a fixture by one variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// `core`, `sql` or `client`.
    pub level: String,
    pub operation: String,
    pub variant: String,
    pub fixture: String,
    pub median_ns: f64,
    /// Median absolute deviation.
    pub spread_ns: f64,
    pub peak_bytes: Option<u64>,
    /// How many documents the extension loaded in one run (SQL level).
    pub loads: Option<u64>,
}

impl Row {
    /// A row of `rich-text-small` whose spread is a tenth of its median, nothing else
    /// measured: what the tests of the goals and of the report build on.
    pub fn example(level: &str, operation: &str, variant: &str, median_ns: f64) -> Row {
        Row {
            level: level.into(),
            operation: operation.into(),
            variant: variant.into(),
            fixture: "rich-text-small".into(),
            median_ns,
            spread_ns: median_ns / 10.0,
            peak_bytes: None,
            loads: None,
        }
    }
}

/// A measurement that is not a time: a stored size or the WAL of a write, of one variant's
/// value of a fixture.
#[derive(Clone, Debug, PartialEq)]
pub struct StorageMeasure {
    pub fixture: String,
    pub variant: String,
    /// `column_bytes`, `wal_upsert_bytes`…, as the SQL benches record them.
    pub measure: String,
    /// None where the variant has no such thing (no JSON kept).
    pub value: Option<i64>,
}

/// The row of `operation` by `variant` on `fixture` at `level`, if the run measured it.
pub fn find<'a>(
    rows: &'a [Row],
    level: &str,
    operation: &str,
    variant: &str,
    fixture: &str,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.level == level && r.operation == operation && r.variant == variant && r.fixture == fixture
    })
}

/// The `client` level's operation: a load of what a read returns after `appended` changes.
pub fn client_load(appended: u32) -> String {
    format!("load after {appended} appended")
}

/// The `client` level's operation: a load of what a read returns once the background
/// compactor has folded the most appended changes into a new save.
pub const CLIENT_LOAD_COMPACTED: &str = "load after compaction";

/// How many appended changes a `client` level operation loads, as [`client_load`] names it.
pub fn appended_of(operation: &str) -> Option<u32> {
    operation.strip_prefix("load after ")?.strip_suffix(" appended")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_load_operations_give_back_their_count() {
        assert_eq!(appended_of(&client_load(64)), Some(64));
        assert_eq!(appended_of("load, by allocator"), None);
    }
}
