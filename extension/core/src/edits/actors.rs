//! The actors of edits made from SQL, and the rule that keeps them from colliding.
//!
//! A change is named by its actor and sequence number; two different changes with one
//! name make a document that no longer loads once both reach it. Server edits therefore
//! take their actor from the backend that makes them: each backend draws random actor ids
//! and remembers, for each, the last sequence number it issued. An edit continues an actor
//! only when the document holds that actor's last issued change (the document is where
//! the backend's previous edit left it); any other document (a copy edited elsewhere, an
//! older version, an edit whose transaction rolled back) gets a fresh actor. So:
//!
//! - concurrent transactions run in different backends, whose actors differ;
//! - a statement re-evaluated on a newer row version (READ COMMITTED) finds its actor's
//!   last change in it, or takes a fresh actor;
//! - a document copied into two rows continues the actor in the first row edited and gets
//!   a fresh one in the other, and the two merge;
//! - a promoted standby's backends are new, with actors of their own;
//! - many edits of one document by one backend share one actor.
//!
//! The registry is bounded: the actors used longest ago are forgotten, and a document
//! whose actor was forgotten gets a fresh one, which is always safe.

use std::cell::RefCell;

use automerge::ActorId;
use rustc_hash::FxHashMap;

use crate::format::ActorClock;

/// How many actors a backend remembers: one per document it edited, up to this many.
const REMEMBERED: usize = 4096;

#[derive(Default)]
struct Registry {
    /// Each actor's last issued sequence number, and when it was issued (a count).
    issued: FxHashMap<ActorId, (u64, u64)>,
    issues: u64,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// The actor and sequence number for the next edit of a document whose actor clock is
/// `clock`.
pub fn next(clock: &ActorClock) -> (ActorId, u64) {
    REGISTRY.with(|registry| {
        let registry = registry.borrow();
        clock
            .iter()
            .find(|(actor, (seq, _))| {
                registry.issued.get(*actor).is_some_and(|(issued, _)| issued == seq)
            })
            .map(|(actor, (seq, _))| (actor.clone(), seq + 1))
            .unwrap_or_else(|| (ActorId::random(), 1))
    })
}

/// Records that `seq` of `actor` was issued, whether or not its transaction commits.
pub fn issued(actor: &ActorId, seq: u64) {
    REGISTRY.with(|registry| {
        let mut registry = registry.borrow_mut();
        registry.issues += 1;
        let stamp = registry.issues;
        registry.issued.insert(actor.clone(), (seq, stamp));
        if registry.issued.len() > REMEMBERED {
            let oldest = registry.issued.iter().min_by_key(|(_, (_, stamp))| *stamp);
            if let Some(oldest) = oldest.map(|(actor, _)| actor.clone()) {
                registry.issued.remove(&oldest);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::ChangeHash;

    fn clock_of(entries: &[(&ActorId, u64)]) -> ActorClock {
        entries.iter().map(|(actor, seq)| ((*actor).clone(), (*seq, ChangeHash([0; 32])))).collect()
    }

    #[test]
    fn an_actor_continues_only_where_its_last_issued_change_is() {
        let (first, seq) = next(&ActorClock::default());
        assert_eq!(seq, 1);
        issued(&first, 1);
        // The document the edit made: the actor continues.
        assert_eq!(next(&clock_of(&[(&first, 1)])), (first.clone(), 2));
        // The document before the edit (a copy, or a rolled-back edit): a fresh actor.
        let (other, seq) = next(&ActorClock::default());
        assert_ne!(other, first);
        assert_eq!(seq, 1);
        issued(&first, 2);
        // A document holding an older change of the actor than the last issued.
        let (again, _) = next(&clock_of(&[(&first, 1)]));
        assert_ne!(again, first);
    }

    #[test]
    fn forgotten_actors_are_never_continued() {
        let (first, _) = next(&ActorClock::default());
        issued(&first, 1);
        for _ in 0..REMEMBERED {
            issued(&ActorId::random(), 1);
        }
        assert_ne!(next(&clock_of(&[(&first, 1)])).0, first);
    }
}
