//! The wrong-change target (issue 14): the input is a stream of choices driving
//! `fixtures::wrong_changes`. Replicas make honest JS-shaped edits, wrong changes come in
//! between, and every write goes through the next of the server's entry points (`||` with
//! and without the fast paths, INSERT of save+changes and of changes only, merges both
//! ways, compact). The oracle is the invariant of issue 14: every write is refused as
//! invalid binary (22P03), or accepted with a value whose payload loads, whose kept JSON
//! is the load's and whose next save loads.

use std::panic::{self, AssertUnwindSafe};

use crate::targets::Failure;

/// The run and the invariant are the core tests' own (one home for both).
#[path = "../../extension/core/tests/support/loads.rs"]
mod loads;

pub use loads::{check_loads, checked_write, honest_and_wrong_writes, Entry, FAST};

/// The name failures and written inputs carry.
pub const TARGET: &str = "wrong_changes";

/// Runs `input` as a choice stream: the failure, if the invariant broke or anything
/// panicked, and the outcome of each write (for the campaign's signature).
pub fn run(input: &[u8]) -> (Option<Failure>, Vec<String>) {
    match panic::catch_unwind(AssertUnwindSafe(|| honest_and_wrong_writes(input, |_| {}))) {
        Ok(Ok(outcomes)) => (None, outcomes),
        Ok(Err(broken)) => (Some(Failure { target: TARGET, what: broken }), Vec::new()),
        Err(payload) => {
            let what = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            (Some(Failure { target: TARGET, what: format!("panicked: {what}") }), Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The target runs on any bytes and says what it did; whether today's core holds the
    /// invariant is the campaign's to report (and core's tests/wrong_changes.rs's).
    #[test]
    fn runs_on_any_input_and_reports_rather_than_panics() {
        let printing_hook = crate::targets::record_panics();
        let mut writes = 0;
        for input in [&b""[..], &[0; 40], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 100, 7, 3, 9, 1]] {
            let (failure, outcomes) = run(input);
            if let Some(failure) = &failure {
                assert_eq!(failure.target, TARGET);
                assert!(!failure.what.contains("panicked: "), "{}", failure.what);
            }
            writes += outcomes.len() + usize::from(failure.is_some());
        }
        panic::set_hook(printing_hook);
        assert!(writes > 0, "some input made a write");
    }

    /// Honest writes alone hold the invariant today: the target's oracle does not fire on
    /// what every client sends.
    #[test]
    fn honest_writes_alone_do_not_fail() {
        // Choices below 6 in the "what next" slot are honest edits; 0 picks replica 0 and
        // the first edit kind.
        let input = [0u8; 64];
        let (failure, outcomes) = run(&input);
        assert!(failure.is_none(), "{failure:?}");
        assert!(outcomes.iter().all(|o| o.contains("accepted")), "{outcomes:?}");
    }
}
