//! The goals of the writes that append: the writes a JS client sends and the edits from
//! SQL, each against the same write on a `jsonb` column.

use super::Goal;
use crate::figures::duration;
use crate::measurements::{find, Row};
use crate::sql_edits::SqlEdit;
use crate::{ClientWrite, JSONB, OURS};

/// The writes a JS client sends ([`ClientWrite`]) and the edits from SQL ([`SqlEdit`]):
/// each appended with no load, within this many times its counterpart on a plain `jsonb`
/// column.
const APPENDED_WRITE_RATIO_GOAL: f64 = 3.0;
/// Each client write on each fixture it was measured on: within
/// [`APPENDED_WRITE_RATIO_GOAL`] of the jsonb column's, and no load.
pub(super) fn client_writes(rows: &[Row]) -> Vec<Goal> {
    ClientWrite::ALL
        .into_iter()
        .flat_map(|write| {
            let operation = write.operation();
            let what = operation.strip_prefix("client write: ").unwrap_or(operation);
            appended_writes(rows, operation, &format!("{what}, appended, against a `jsonb` column"))
        })
        .collect()
}

/// Each edit from SQL on each fixture it was measured on: within
/// [`APPENDED_WRITE_RATIO_GOAL`] of the `jsonb` write it mirrors, and no load.
pub(super) fn sql_edits(rows: &[Row]) -> Vec<Goal> {
    SqlEdit::ALL
        .into_iter()
        .flat_map(|edit| {
            let goal =
                format!("`{}` against {} on a `jsonb` column", edit.function(), edit.jsonb_twin());
            appended_writes(rows, &edit.operation(), &goal)
        })
        .collect()
}

/// The goal `goal` of `operation` on each fixture it was measured on: pg_automerge's median
/// within [`APPENDED_WRITE_RATIO_GOAL`] of the jsonb column's, with no load.
fn appended_writes(rows: &[Row], operation: &str, goal: &str) -> Vec<Goal> {
    let mut fixtures: Vec<&str> = rows
        .iter()
        .filter(|r| r.level == "sql" && r.operation == operation && r.variant == OURS)
        .map(|r| r.fixture.as_str())
        .collect();
    fixtures.sort();
    fixtures
        .into_iter()
        .map(|fixture| {
            let ours = find(rows, "sql", operation, OURS, fixture);
            let column = find(rows, "sql", operation, JSONB, fixture);
            let (measured, met) = match (ours, column) {
                (Some(ours), Some(column)) => {
                    let ratio = ours.median_ns / column.median_ns;
                    let loads =
                        ours.loads.map_or("loads not counted".into(), |n| format!("{n} loads"));
                    let text = format!(
                        "{ratio:.2}× ({} against {}), {loads}",
                        duration(ours.median_ns),
                        duration(column.median_ns)
                    );
                    (text, Some(ratio <= APPENDED_WRITE_RATIO_GOAL && ours.loads == Some(0)))
                }
                _ => ("not measured".to_string(), None),
            };
            Goal {
                goal: goal.to_string(),
                fixture: fixture.to_string(),
                measured,
                target: format!("≤ {APPENDED_WRITE_RATIO_GOAL}×, 0 loads"),
                met,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_write_goals_need_no_load_within_the_ratio_of_the_jsonb_write() {
        let edit = |variant: &str, fixture: &str, median_ns: f64, loads: Option<u64>| Row {
            fixture: fixture.into(),
            loads,
            ..Row::example("sql", &SqlEdit::Set.operation(), variant, median_ns)
        };
        let rows = vec![
            // 2.5× with no load: met; 2.5× with a load, or 3.5×: missed.
            edit(OURS, "rich-text-small", 2.5e5, Some(0)),
            edit(JSONB, "rich-text-small", 1e5, None),
            edit(OURS, "map-list-small", 2.5e5, Some(1)),
            edit(JSONB, "map-list-small", 1e5, None),
            edit(OURS, "plain-text-small", 3.5e5, Some(0)),
            edit(JSONB, "plain-text-small", 1e5, None),
            // No jsonb row to compare with: not measured.
            edit(OURS, "js-rich-text-medium", 1e5, Some(0)),
        ];
        let goals = sql_edits(&rows);
        let met = |fixture: &str| goals.iter().find(|g| g.fixture == fixture).unwrap().met;
        assert_eq!(goals.len(), 4);
        assert!(
            goals[0].goal.starts_with("`automerge_set` against `jsonb_set`"),
            "{}",
            goals[0].goal
        );
        assert_eq!(met("rich-text-small"), Some(true));
        assert_eq!(met("map-list-small"), Some(false));
        assert_eq!(met("plain-text-small"), Some(false));
        assert_eq!(met("js-rich-text-medium"), None);
    }
}
