//! The altered-change target (issue 35): the input is a stream of choices that picks a
//! stored client document, one of its honest JS-shaped changes, an alteration of one field
//! of that change's header or of one of its operations (`fixtures::wrong_changes::alter`),
//! and an entry point. The oracle is the invariant of issue 14: the write is refused as
//! invalid binary, or accepted with a value whose payload loads, whose kept JSON is the
//! load's and whose next save loads.
//!
//! An execution is cheap on purpose (a campaign runs millions): the documents, their
//! stored values and a pool of honest changes on each are made once per campaign.

use std::panic::{self, AssertUnwindSafe};

use automerge::{AutoCommit, ExpandedChange};
use fixtures::wrong_changes::{
    alter, client_document, honest_change, honest_edit, AlterationContext, Choices,
};
use pg_automerge_core::writes::stored_from_client_bytes;

use crate::targets::Failure;
use crate::wrong_writes::{checked_write, Entry};

/// The name failures and written inputs carry.
pub const TARGET: &str = "altered_changes";

/// Honest changes made on each document, for alterations to start from.
const POOL: usize = 64;

/// A stored client document and honest changes on its heads.
pub struct Base {
    stored: Vec<u8>,
    context: AlterationContext,
    honest: Vec<ExpandedChange>,
}

/// The documents an execution writes to: the client document after 0, 4 and 16 honest
/// edits (texts with marks and blocks, lists, counters, nested maps).
pub fn bases() -> Vec<Base> {
    [0u32, 4, 16]
        .into_iter()
        .map(|edits| {
            let mut doc: AutoCommit = client_document(1);
            for round in 0..edits {
                honest_edit(
                    &mut doc,
                    &mut Choices::new(&round.wrapping_mul(2_654_435_761).to_le_bytes()),
                );
            }
            let stored = stored_from_client_bytes(&doc.save(), crate::wrong_writes::FAST)
                .expect("a client document is stored");
            let context = AlterationContext::of(&mut doc);
            let honest = (0..POOL as u32)
                .filter_map(|n| {
                    let choices = n.wrapping_mul(2_246_822_519).to_le_bytes();
                    honest_change(&mut doc, &mut Choices::new(&choices))
                })
                .collect();
            Base { stored, context, honest }
        })
        .collect()
}

/// Runs `input`: the failure, if the invariant broke or anything panicked, and the
/// outcome of the write (for the campaign's signature); whether the write was accepted.
pub fn run(input: &[u8], bases: &[Base]) -> (Option<Failure>, String, bool) {
    let mut choices = Choices::new(input);
    let base = &bases[choices.below(bases.len())];
    let honest = &base.honest[choices.below(base.honest.len())];
    let entry = Entry::ALL[choices.below(Entry::ALL.len())];
    let written = panic::catch_unwind(AssertUnwindSafe(|| {
        let bytes = alter(honest, &base.context, &mut choices)?;
        Some(checked_write("altered change", entry, &base.stored, &bytes))
    }));
    match written {
        Ok(None) => (None, "not encoded".into(), false),
        Ok(Some(Ok(written))) => {
            let accepted = written.is_some();
            let outcome = if accepted { "accepted" } else { "refused" };
            (None, format!("via {entry:?}: {outcome}"), accepted)
        }
        Ok(Some(Err(broken))) => {
            (Some(Failure { target: TARGET, what: broken }), String::new(), true)
        }
        Err(_) => (Some(Failure { target: TARGET, what: "panicked".into() }), String::new(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every input runs and says what it did; most alterations are refused, some honest
    /// ones (a new message, another value) are accepted and checked.
    #[test]
    fn runs_on_any_input_and_reaches_both_outcomes() {
        let printing_hook = crate::targets::record_panics();
        let bases = bases();
        let (mut accepted, mut refused) = (0, 0);
        for n in 0u32..400 {
            let input = n.wrapping_mul(2_654_435_761).to_le_bytes();
            let (failure, outcome, _) = run(&input, &bases);
            assert!(failure.is_none(), "{failure:?}");
            accepted += usize::from(outcome.ends_with("accepted"));
            refused += usize::from(outcome.ends_with("refused"));
        }
        panic::set_hook(printing_hook);
        assert!(accepted > 0 && refused > 0, "accepted {accepted}, refused {refused}");
    }
}
