//! The bench's performance goals: reads that never load the document and writes that load
//! it at most once, each with its target, judged on the measurements of a run. The report's
//! Goals table has one line per goal and fixture, in the order `goals` pushes them.
//!
//! To add a goal: its target as a constant below, then a block in `goals` that pushes one
//! `Goal` per fixture it covers (`not measured` where the run lacks the figures), and a case
//! in the test at the end.

use ::fixtures::generated::{Kind, Scale, Spec};

use super::format::{bytes, duration};
use super::{find, Row, NAIVE, OURS};

/// A performance goal, and what this run measured of it.
pub(super) struct Goal {
    pub goal: String,
    pub fixture: String,
    pub measured: String,
    pub target: String,
    /// None when the run did not measure it.
    pub met: Option<bool>,
}

/// The reads the JSON a value keeps answers without a load, as users write them.
const KEPT_JSON_READS: [(&str, &str); 3] = [
    ("read title", "`doc->>'title'`"),
    ("to jsonb", "`doc::jsonb`"),
    ("containment", "GIN containment `@>` (its recheck casts)"),
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

/// The goals of reads that never load and writes that load at most once, each computed
/// from the measurements of a run at `scale`.
pub(super) fn goals(rows: &[Row], scale: &str) -> Vec<Goal> {
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
    for (operation, read) in
        [("heads", "`automerge_heads`"), ("change count", "`automerge_change_count`")]
    {
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
        let operation = "incremental write";
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
        let (measured, met) = match sql("upsert full save", OURS, fixture).and_then(|r| r.loads) {
            Some(loads) => (format!("{loads} loads"), Some(loads <= UPSERT_LOADS_GOAL)),
            None => not_measured(),
        };
        let goal = "an upsert of a full save loads at most once".to_string();
        let target = format!("≤ {UPSERT_LOADS_GOAL} load");
        goals.push(Goal { goal, fixture: fixture.clone(), measured, target, met });
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
    use crate::bench::tests::row;

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
            measured("read title", OURS, 1e6, 4096, 0),
            measured("read title", NAIVE, 2e8, 30 << 20, 1),
            // 50× faster: missed.
            measured("to jsonb", OURS, 4e6, 4096, 0),
            measured("to jsonb", NAIVE, 2e8, 30 << 20, 1),
            measured("heads", OURS, 1e5, 184, 0),
            measured("change count", OURS, 1e5, 184, 1),
            measured("upsert full save", OURS, 1e8, 30 << 20, 2),
        ];
        let goals = goals(&rows, "small");
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
        assert_eq!(find("a small write", "rich-text-small"), None);
        assert_eq!(find("an upsert", "rich-text-small"), Some(false));
        let speedup = goals.iter().find(|g| g.goal.starts_with("`doc->>'title'` against")).unwrap();
        assert_eq!(speedup.measured, "200× (1.00 ms against 200.00 ms)");
    }
}
