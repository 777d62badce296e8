//! The bench's performance goals: reads that never load the document and writes that load
//! it at most once, each with its target, judged on the measurements of a run. The report's
//! Goals table has one line per goal and fixture, in the order `goals` pushes them.
//!
//! They live beside the benches they judge and name the benches' groups and variants by the
//! benches' own names (`ClientWrite`, `OURS`, …); `cargo xtask bench` reads them from here
//! for its report.
//!
//! To add a goal: its target as a constant below, then a block in `goals` that pushes one
//! `Goal` per fixture it covers (`not measured` where the run lacks the figures), and a case
//! in the test at the end.

use fixtures::generated::{Kind, Scale, Spec};

use crate::figures::{bytes, duration};
use crate::measurements::{client_load, find, Row, StorageMeasure, CLIENT_LOAD_COMPACTED};
use crate::operations::{
    CHANGES_SINCE_ITS_HEADS, CHANGE_COUNT, CONTAINMENT, EQUALITY, HASH, HAS_ITS_HEADS, HEADS,
    INCREMENTAL_WRITE, NESTED_PATH, READ_TITLE, TO_JSONB, UPSERT_FULL_SAVE,
};
use crate::{JSONB, JS_CLIENT, NAIVE, OURS};

mod appended_writes;

use appended_writes::{client_writes, sql_edits};

/// A performance goal, and what this run measured of it.
pub struct Goal {
    pub goal: String,
    pub fixture: String,
    pub measured: String,
    pub target: String,
    /// None when the run did not measure it.
    pub met: Option<bool>,
}

/// The reads the JSON a value keeps answers without a load, as users write them.
const KEPT_JSON_READS: [(&str, &str); 3] = [
    (READ_TITLE, "`doc->>'title'`"),
    (TO_JSONB, "`doc::jsonb`"),
    (CONTAINMENT, "GIN containment `@>` (its recheck casts)"),
];
/// Those reads on the rich text: at least this many times faster than the naive path…
const READ_SPEEDUP_GOAL: f64 = 100.0;
/// …within this peak heap.
const READ_PEAK_GOAL: u64 = 8 << 20;
/// Reads of the stored header load nothing; their answer takes a few hundred bytes.
const HEADER_READ_PEAK_GOAL: u64 = 64 << 10;
/// A small incremental write at least this many times faster than the naive path.
const WRITE_SPEEDUP_GOAL: f64 = 10.0;
/// An upsert of a full save loads at most this many documents: the client's save.
const UPSERT_LOADS_GOAL: u64 = 1;
/// The reads a plain `jsonb` column answers too, as users write them.
const JSONB_READS: [(&str, &str); 4] = [
    (READ_TITLE, "`doc->>'title'`"),
    (NESTED_PATH, "`doc->'items'->0->>'name'`"),
    (TO_JSONB, "`doc::jsonb`"),
    (CONTAINMENT, "GIN containment `@>` (its recheck casts)"),
];
/// Each at most this many times the same read on a plain `jsonb` column.
const JSONB_READ_RATIO_GOAL: f64 = 1.5;
/// Reads of the header (and actor table): one TOAST chunk, adding at most this much to the
/// client's round trip of the same one-row lookup on the `jsonb` table.
const HEADER_READS: [(&str, &str); 5] = [
    (HEADS, "`automerge_heads`"),
    (CHANGE_COUNT, "`automerge_change_count`"),
    (EQUALITY, "`doc = doc`"),
    (HASH, "`automerge_hash`"),
    (HAS_ITS_HEADS, "`automerge_has_changes` of its heads"),
];
const HEADER_READ_GOAL_NS: f64 = 0.2e6;
/// What a read returns after this many appended changes (the default `append_limit`, the
/// most a value holds before a write folds them into a new save)…
const MOST_APPENDED: u32 = pg_automerge_core::settings::DEFAULT_APPEND_LIMIT;
/// …loads in the JS client within this many times the save alone.
const CLIENT_LOAD_RATIO_GOAL: f64 = 1.1;
/// Stored size and WAL of a write, less what a value keeps beside its Automerge bytes and
/// JSON, at most the Automerge bytes plus a `jsonb` column's, plus this much…
const STORAGE_SLACK: f64 = 1.05;
/// …and what it keeps beside them (the header, the actors' clock, the root table and the
/// structure index that lets writes append) at most this share of the Automerge bytes.
const BESIDE_SHARE_GOAL: f64 = 0.25;

/// The goals of reads that never load and writes that load at most once, each computed
/// from the measurements of a run at `scale`.
pub fn goals(rows: &[Row], storage: &[StorageMeasure], scale: &str) -> Vec<Goal> {
    let sql = |operation: &str, variant: &str, fixture: &str| {
        find(rows, "sql", operation, variant, fixture)
    };
    let not_measured = || ("not measured".to_string(), None);
    let mut goals = Vec::new();
    let rich_text = history_fixture(Kind::RichText, scale);
    for (operation, read) in KEPT_JSON_READS {
        let (fast, naive) = (sql(operation, OURS, &rich_text), sql(operation, NAIVE, &rich_text));
        let (measured, met) = match (fast, naive) {
            (Some(fast), Some(naive)) => {
                let speedup = naive.median_ns / fast.median_ns;
                (speedup_text(fast, naive), Some(speedup >= READ_SPEEDUP_GOAL))
            }
            _ => not_measured(),
        };
        let target = format!("≥ {READ_SPEEDUP_GOAL}× faster");
        let goal = format!("{read} against the naive path");
        goals.push(Goal { goal, fixture: rich_text.clone(), measured, target, met });
        let (measured, met) = match fast.and_then(|f| f.peak_bytes) {
            Some(peak) => (bytes(Some(peak)), Some(peak <= READ_PEAK_GOAL)),
            None => not_measured(),
        };
        let target = format!("≤ {}", bytes(Some(READ_PEAK_GOAL)));
        goals.push(Goal {
            goal: format!("{read}: peak heap"),
            fixture: rich_text.clone(),
            measured,
            target,
            met,
        });
    }
    let fixtures = Kind::ALL.map(|kind| history_fixture(kind, scale));
    for (operation, read) in [
        (HEADS, "`automerge_heads`"),
        (CHANGE_COUNT, "`automerge_change_count`"),
        (CHANGES_SINCE_ITS_HEADS, "`automerge_changes` since its heads"),
    ] {
        for fixture in &fixtures {
            let (measured, met) =
                match sql(operation, OURS, fixture).and_then(|r| Some((r.loads?, r.peak_bytes?))) {
                    Some((loads, peak)) => (
                        format!("{loads} loads, {}", bytes(Some(peak))),
                        Some(loads == 0 && peak <= HEADER_READ_PEAK_GOAL),
                    ),
                    None => not_measured(),
                };
            let target = format!("0 loads, ≤ {}", bytes(Some(HEADER_READ_PEAK_GOAL)));
            goals.push(Goal {
                goal: format!("{read} loads nothing"),
                fixture: fixture.clone(),
                measured,
                target,
                met,
            });
        }
    }
    for fixture in &fixtures {
        let operation = INCREMENTAL_WRITE;
        let (measured, met) = match (sql(operation, OURS, fixture), sql(operation, NAIVE, fixture))
        {
            (Some(fast), Some(naive)) => {
                let speedup = naive.median_ns / fast.median_ns;
                (speedup_text(fast, naive), Some(speedup >= WRITE_SPEEDUP_GOAL))
            }
            _ => not_measured(),
        };
        let target = format!("≥ {WRITE_SPEEDUP_GOAL}× faster");
        let goal = "a small write (`doc || change`, a retitle) against the naive path".to_string();
        goals.push(Goal { goal, fixture: fixture.clone(), measured, target, met });
    }
    for fixture in &fixtures {
        let (measured, met) = match sql(UPSERT_FULL_SAVE, OURS, fixture).and_then(|r| r.loads) {
            Some(loads) => (format!("{loads} loads"), Some(loads <= UPSERT_LOADS_GOAL)),
            None => not_measured(),
        };
        let goal = "an upsert of a full save loads at most once".to_string();
        let target = format!("≤ {UPSERT_LOADS_GOAL} load");
        goals.push(Goal { goal, fixture: fixture.clone(), measured, target, met });
    }
    goals.extend(jsonb_parity(rows, storage));
    goals.extend(client_writes(rows));
    goals.extend(sql_edits(rows));
    goals.extend(client_loads(rows));
    goals
}

/// `measured` against `baseline` as a goal's measure (their ratio of medians, and both), and
/// whether the ratio is at most `goal`; not measured when either is missing.
fn ratio_goal(measured: Option<&Row>, baseline: Option<&Row>, goal: f64) -> (String, Option<bool>) {
    match (measured, baseline) {
        (Some(measured), Some(baseline)) => {
            let ratio = measured.median_ns / baseline.median_ns;
            let text = format!(
                "{ratio:.2}× ({} against {})",
                duration(measured.median_ns),
                duration(baseline.median_ns)
            );
            (text, Some(ratio <= goal))
        }
        _ => ("not measured".to_string(), None),
    }
}

/// On each fixture the clients' loads were measured on: the JS client loads what a read
/// returns with the most appended changes, and the same once the background compactor has
/// saved it anew, within [`CLIENT_LOAD_RATIO_GOAL`] of the save alone, so that appending
/// writes do not make clients slower.
fn client_loads(rows: &[Row]) -> Vec<Goal> {
    let alone = client_load(0);
    let compared = [
        (
            client_load(MOST_APPENDED),
            format!("the JS client's load of `doc::bytea` with {MOST_APPENDED} appended changes against the save alone"),
        ),
        (
            CLIENT_LOAD_COMPACTED.to_string(),
            format!("the JS client's load of `doc::bytea` once the compactor folded {MOST_APPENDED} appended changes in, against the save alone"),
        ),
    ];
    let mut fixtures: Vec<&str> = rows
        .iter()
        .filter(|r| r.level == "client" && r.variant == JS_CLIENT)
        .map(|r| r.fixture.as_str())
        .collect();
    fixtures.sort();
    fixtures.dedup();
    let mut goals = Vec::new();
    for (operation, goal) in &compared {
        for &fixture in &fixtures {
            let (saved, loaded) = (
                find(rows, "client", &alone, JS_CLIENT, fixture),
                find(rows, "client", operation, JS_CLIENT, fixture),
            );
            let (measured, met) = ratio_goal(loaded, saved, CLIENT_LOAD_RATIO_GOAL);
            goals.push(Goal {
                goal: goal.clone(),
                fixture: fixture.to_string(),
                measured,
                target: format!("≤ {CLIENT_LOAD_RATIO_GOAL}×"),
                met,
            });
        }
    }
    goals
}

/// Reads at a `jsonb` column's speed, header reads in one chunk, and storage no bigger than
/// the Automerge bytes plus a `jsonb` column: on every fixture the run stored, ours and
/// those made by the JavaScript client.
fn jsonb_parity(rows: &[Row], storage: &[StorageMeasure]) -> Vec<Goal> {
    // Every fixture the SQL level timed or stored: a run filtered to the storage times none.
    let timed = rows.iter().filter(|r| r.level == "sql").map(|r| r.fixture.as_str());
    let mut fixtures: Vec<&str> = timed.chain(storage.iter().map(|m| m.fixture.as_str())).collect();
    fixtures.sort();
    fixtures.dedup();
    let stored = |fixture: &str, variant: &str, measure: &str| {
        storage
            .iter()
            .find(|m| m.fixture == fixture && m.variant == variant && m.measure == measure)
            .and_then(|m| m.value)
    };
    let not_measured = || ("not measured".to_string(), None);
    let mut goals = Vec::new();
    for (operation, read) in JSONB_READS {
        for &fixture in &fixtures {
            let ours = find(rows, "sql", operation, OURS, fixture);
            let column = find(rows, "sql", operation, JSONB, fixture);
            let (measured, met) = ratio_goal(ours, column, JSONB_READ_RATIO_GOAL);
            goals.push(Goal {
                goal: format!("{read} against a `jsonb` column"),
                fixture: fixture.to_string(),
                measured,
                target: format!("≤ {JSONB_READ_RATIO_GOAL}×"),
                met,
            });
        }
    }
    for (operation, read) in HEADER_READS {
        for &fixture in &fixtures {
            let ours = find(rows, "sql", operation, OURS, fixture);
            let lookup = find(rows, "sql", operation, JSONB, fixture);
            let (measured, met) = match (ours, lookup) {
                (Some(ours), Some(lookup)) => {
                    let added = ours.median_ns - lookup.median_ns;
                    let text = format!(
                        "{} over the lookup's {} ({} in all)",
                        duration(added.max(0.0)),
                        duration(lookup.median_ns),
                        duration(ours.median_ns)
                    );
                    (text, Some(added <= HEADER_READ_GOAL_NS))
                }
                _ => not_measured(),
            };
            goals.push(Goal {
                goal: format!("{read} from the header"),
                fixture: fixture.to_string(),
                measured,
                target: format!("≤ {} over a one-row lookup", duration(HEADER_READ_GOAL_NS)),
                met,
            });
        }
    }
    for &fixture in &fixtures {
        // What a value keeps beside its Automerge bytes and JSON: the naive path's value keeps
        // no JSON, so it is the whole of what it stores beyond the Automerge bytes.
        let automerge = stored(fixture, NAIVE, "payload_bytes");
        let beside = stored(fixture, NAIVE, "stored_bytes").zip(automerge).map(|(s, a)| s - a);
        // The WAL of writing the Automerge bytes alone: the naive path's write, less what its
        // value keeps beside them.
        let wal = "wal_incremental_write_bytes";
        let automerge_wal = stored(fixture, NAIVE, wal).zip(beside).map(|(w, b)| w - b);
        for (measure, what, automerge) in [
            ("column_bytes", "stored size", automerge),
            (wal, "WAL of a small write", automerge_wal),
        ] {
            let parts = (stored(fixture, OURS, measure), beside, automerge);
            let (measured, met) = match (parts, stored(fixture, JSONB, measure)) {
                ((Some(ours), Some(beside), Some(automerge)), Some(column)) => {
                    let bound = (automerge + column) as f64 * STORAGE_SLACK;
                    let text = format!(
                        "{} less {} beside (Automerge {} + `jsonb` {})",
                        bytes(Some(ours as u64)),
                        bytes(Some(beside as u64)),
                        bytes(Some(automerge as u64)),
                        bytes(Some(column as u64))
                    );
                    (text, Some((ours - beside) as f64 <= bound))
                }
                _ => not_measured(),
            };
            goals.push(Goal {
                goal: format!(
                    "{what}, less what is kept beside the Automerge bytes and JSON: at most \
                     the Automerge bytes plus a `jsonb` column's"
                ),
                fixture: fixture.to_string(),
                measured,
                target: format!("≤ {:.0}% of their sum", STORAGE_SLACK * 100.0),
                met,
            });
        }
        let (measured, met) = match (beside, automerge) {
            (Some(beside), Some(automerge)) => {
                let share = beside as f64 / automerge as f64;
                let text = format!(
                    "{:.0}% ({} beside {})",
                    share * 100.0,
                    bytes(Some(beside as u64)),
                    bytes(Some(automerge as u64))
                );
                (text, Some(share <= BESIDE_SHARE_GOAL))
            }
            _ => not_measured(),
        };
        goals.push(Goal {
            goal: "what a value keeps beside its Automerge bytes and JSON (header, actors, root \
                   table, structure index) against the Automerge bytes"
                .to_string(),
            fixture: fixture.to_string(),
            measured,
            target: format!("≤ {:.0}%", BESIDE_SHARE_GOAL * 100.0),
            met,
        });
    }
    goals
}

/// How many times faster `fast` is than `slow`, with both medians.
fn speedup_text(fast: &Row, slow: &Row) -> String {
    let speedup = slow.median_ns / fast.median_ns;
    let speedup =
        if speedup >= 10.0 { format!("{speedup:.0}×") } else { format!("{speedup:.1}×") };
    format!("{speedup} ({} against {})", duration(fast.median_ns), duration(slow.median_ns))
}

/// The fixture of `kind` with its history (the SQL level's) at `scale`, by name.
fn history_fixture(kind: Kind, scale: &str) -> String {
    let scale = Scale::ALL
        .into_iter()
        .find(|s| s.name() == scale)
        .expect("the run's scale is a fixture scale");
    Spec { kind, scale, compacted: false }.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(level: &str, operation: &str, variant: &str, median_ns: f64) -> Row {
        Row::example(level, operation, variant, median_ns)
    }

    #[test]
    fn goals_are_met_or_missed_by_the_measurements_and_unmeasured_without_them() {
        let measured =
            |operation: &str, variant: &str, median_ns: f64, peak: u64, loads: u64| Row {
                peak_bytes: Some(peak),
                loads: Some(loads),
                ..row("sql", operation, variant, median_ns)
            };
        let rows = vec![
            // 200× faster within 8 MB: met.
            measured(READ_TITLE, OURS, 1e6, 4096, 0),
            measured(READ_TITLE, NAIVE, 2e8, 30 << 20, 1),
            // 50× faster: missed.
            measured(TO_JSONB, OURS, 4e6, 4096, 0),
            measured(TO_JSONB, NAIVE, 2e8, 30 << 20, 1),
            measured(HEADS, OURS, 1e5, 184, 0),
            measured(CHANGE_COUNT, OURS, 1e5, 184, 1),
            measured(CHANGES_SINCE_ITS_HEADS, OURS, 1e6, 2048, 0),
            measured(UPSERT_FULL_SAVE, OURS, 1e8, 30 << 20, 2),
        ];
        let goals = goals(&rows, &[], "small");
        let find = |name: &str, fixture: &str| {
            let goal = goals.iter().find(|g| g.goal.starts_with(name) && g.fixture == fixture);
            goal.unwrap_or_else(|| panic!("no goal {name:?} on {fixture}")).met
        };
        assert_eq!(find("`doc->>'title'` against", "rich-text-small"), Some(true));
        assert_eq!(find("`doc->>'title'`: peak", "rich-text-small"), Some(true));
        assert_eq!(find("`doc::jsonb` against", "rich-text-small"), Some(false));
        assert_eq!(find("GIN containment", "rich-text-small"), None);
        assert_eq!(find("`automerge_heads`", "rich-text-small"), Some(true));
        assert_eq!(find("`automerge_heads`", "map-list-small"), None);
        assert_eq!(find("`automerge_change_count`", "rich-text-small"), Some(false));
        assert_eq!(find("`automerge_changes` since its heads", "rich-text-small"), Some(true));
        assert_eq!(find("a small write", "rich-text-small"), None);
        assert_eq!(find("an upsert", "rich-text-small"), Some(false));
        assert_eq!(find("`doc->>'title'` against a `jsonb`", "rich-text-small"), None);
        let speedup = goals.iter().find(|g| g.goal.starts_with("`doc->>'title'` against")).unwrap();
        assert_eq!(speedup.measured, "200× (1.00 ms against 200.00 ms)");
    }

    #[test]
    fn jsonb_parity_goals_compare_with_the_jsonb_column_and_the_automerge_bytes() {
        let rows = vec![
            row("sql", READ_TITLE, OURS, 1.2e6),
            row("sql", READ_TITLE, JSONB, 1e6),
            row("sql", NESTED_PATH, OURS, 2e6),
            row("sql", NESTED_PATH, JSONB, 1e6),
            row("sql", HEADS, OURS, 0.1e6),
            row("sql", HEADS, JSONB, 0.05e6),
            row("sql", HASH, OURS, 0.3e6),
            row("sql", HASH, JSONB, 0.05e6),
            // What a slow round trip takes is the lookup's, not the header read's.
            row("sql", EQUALITY, OURS, 0.3e6),
            row("sql", EQUALITY, JSONB, 0.15e6),
        ];
        let measure = |variant: &str, measure: &str, value: i64| StorageMeasure {
            fixture: "js-rich-text-medium".into(),
            variant: variant.into(),
            measure: measure.into(),
            value: Some(value),
        };
        // The naive value keeps 1000 Automerge bytes and 300 beside them.
        let storage = vec![
            measure(OURS, "column_bytes", 2000),
            measure(NAIVE, "stored_bytes", 1300),
            measure(NAIVE, "payload_bytes", 1000),
            measure(JSONB, "column_bytes", 700),
            measure(OURS, "wal_incremental_write_bytes", 2100),
            measure(NAIVE, "wal_incremental_write_bytes", 1200),
            measure(JSONB, "wal_incremental_write_bytes", 700),
        ];
        let rows: Vec<Row> =
            rows.into_iter().map(|r| Row { fixture: "js-rich-text-medium".into(), ..r }).collect();
        let goals = jsonb_parity(&rows, &storage);
        let met = |name: &str| {
            let goal = goals.iter().find(|g| g.goal.starts_with(name));
            goal.unwrap_or_else(|| panic!("no goal {name:?}")).met
        };
        assert_eq!(met("`doc->>'title'` against a `jsonb` column"), Some(true));
        assert_eq!(met("`doc->'items'->0->>'name'` against"), Some(false));
        assert_eq!(met("`doc::jsonb` against"), None);
        assert_eq!(met("`automerge_heads` from the header"), Some(true));
        assert_eq!(met("`automerge_hash` from the header"), Some(false));
        assert_eq!(met("`doc = doc` from the header"), Some(true));
        assert_eq!(met("`automerge_change_count` from the header"), None);
        assert_eq!(met("stored size"), Some(true), "2000 - 300 ≤ 1.05 × (1000 + 700)");
        assert_eq!(met("WAL of a small write"), Some(false), "2100 - 300 > 1.05 × (900 + 700)");
        assert_eq!(met("what a value keeps beside"), Some(false), "300 > 25% of 1000");
        // A run filtered to the storage times nothing and still judges it.
        let stored_only = jsonb_parity(&[], &storage);
        assert!(stored_only
            .iter()
            .any(|g| g.goal.starts_with("stored size") && g.met == Some(true)));
    }

    #[test]
    fn client_load_goals_set_the_most_appended_against_the_save_alone() {
        let load = |appended: u32, fixture: &str, median_ns: f64| Row {
            fixture: fixture.into(),
            ..row("client", &client_load(appended), JS_CLIENT, median_ns)
        };
        let rows = vec![
            // 5% slower with the most appended: met.
            load(0, "js-rich-text-medium", 1e8),
            load(MOST_APPENDED, "js-rich-text-medium", 1.05e8),
            // Twice as slow: missed.
            load(0, "rich-text-small", 1e8),
            load(1, "rich-text-small", 2e8),
            load(MOST_APPENDED, "rich-text-small", 2e8),
            // The crate's loads are not the JS client's.
            Row { variant: "automerge".into(), ..load(MOST_APPENDED, "map-list-small", 1e8) },
            load(0, "plain-text-small", 1e8),
            // Once compacted: as fast as the save alone.
            Row {
                fixture: "rich-text-small".into(),
                ..row("client", CLIENT_LOAD_COMPACTED, JS_CLIENT, 1.02e8)
            },
        ];
        let met: Vec<_> = client_loads(&rows)
            .into_iter()
            .map(|g| (g.goal.contains("compactor"), g.fixture, g.met))
            .collect();
        assert_eq!(
            met,
            [
                (false, "js-rich-text-medium".to_string(), Some(true)),
                (false, "plain-text-small".to_string(), None),
                (false, "rich-text-small".to_string(), Some(false)),
                (true, "js-rich-text-medium".to_string(), None),
                (true, "plain-text-small".to_string(), None),
                (true, "rich-text-small".to_string(), Some(true)),
            ]
        );
    }
}
