//! The state of `merge_agg`: the merge of the documents seen so far, and what loading it
//! is estimated to take, so that the aggregate counts against `max_load_memory` as it
//! grows. Each step checks, before it loads anything, the running estimate of the state
//! plus what loading the incoming document and applying its changes are estimated to take,
//! as a merge of two stored documents does ([`writes::merge`](crate::writes::merge)).

use automerge::{Automerge, ReadDoc};

use crate::estimate::{
    estimate_applied, estimate_client_bytes, estimate_stored, sum, LoadEstimate,
};
use crate::load::{load_client_bytes, load_stored, merge_into};
use crate::settings::LoadLimit;
use crate::{format, Error};

/// The merged document and what loading it is estimated to take.
#[derive(Debug, Clone)]
pub struct MergeState {
    pub doc: Automerge,
    /// Operations of `doc`.
    ops: u64,
    /// The estimate of `doc`: the estimates of the documents merged into it, each in the
    /// share of its operations that were new to the state (a fork merged again adds
    /// little, an unrelated document its whole estimate).
    estimate: LoadEstimate,
}

impl MergeState {
    /// The empty document: what a state is left holding once its merge was moved out.
    pub fn empty() -> MergeState {
        MergeState { doc: Automerge::new(), ops: 0, estimate: sum(&[]) }
    }

    /// The state of a group's first document, loaded within `limit`.
    pub fn first(stored: &[u8], limit: LoadLimit) -> Result<MergeState, Error> {
        let value = format::decode(stored)?;
        let estimate = estimate_stored(&value.summary, value.payload);
        limit.check(&estimate)?;
        Ok(MergeState { doc: load_stored(&value)?, ops: value.summary.op_count, estimate })
    }

    /// The state of a document loaded from saved bytes (a parallel worker's state), within
    /// `limit`.
    pub fn from_saved(bytes: &[u8], limit: LoadLimit) -> Result<MergeState, Error> {
        let estimate = estimate_client_bytes(bytes)?;
        limit.check(&estimate)?;
        let doc = load_client_bytes(bytes)?;
        Ok(MergeState { ops: doc.stats().num_ops, doc, estimate })
    }

    /// What loading the merged document is estimated to take.
    pub fn estimate(&self) -> LoadEstimate {
        self.estimate
    }

    /// Merges a stored document into the state, if the state plus its load and the
    /// application of its changes are within `limit`.
    pub fn add(&mut self, stored: &[u8], limit: LoadLimit) -> Result<(), Error> {
        let value = format::decode(stored)?;
        if value.summary.heads.iter().all(|head| self.doc.get_change_by_hash(head).is_some()) {
            return Ok(());
        }
        let incoming = estimate_stored(&value.summary, value.payload);
        limit.check(&sum(&[self.estimate, incoming, estimate_applied(&incoming)]))?;
        let mut other = load_stored(&value)?;
        self.merge(&mut other, value.summary.op_count, incoming)
    }

    /// Merges another state into this one, within `limit`.
    pub fn combine(&mut self, mut other: MergeState, limit: LoadLimit) -> Result<(), Error> {
        let incoming = other.estimate;
        limit.check(&sum(&[self.estimate, incoming, estimate_applied(&incoming)]))?;
        self.merge(&mut other.doc, other.ops, incoming)
    }

    fn merge(
        &mut self,
        other: &mut Automerge,
        ops: u64,
        incoming: LoadEstimate,
    ) -> Result<(), Error> {
        merge_into(&mut self.doc, other)?;
        let merged = self.doc.stats().num_ops;
        let new_ops = merged.saturating_sub(self.ops).min(ops);
        let share = |n: u64| (u128::from(n) * u128::from(new_ops) / u128::from(ops.max(1))) as u64;
        self.estimate = sum(&[
            self.estimate,
            LoadEstimate {
                ops: share(incoming.ops),
                changes: share(incoming.changes),
                bytes: share(incoming.bytes),
            },
        ]);
        self.ops = merged;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::save::to_stored;
    use crate::settings::{LoadLimit, WriteSettings};
    use automerge::transaction::{CommitOptions, Transactable};
    use automerge::{ActorId, AutoCommit, ROOT};

    /// A fork of one document by `actor`, with `puts` keys of its own, stored.
    fn fork(actor: u8, puts: usize) -> Vec<u8> {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([1; 16]));
        doc.put(ROOT, "title", "shared").unwrap();
        doc.commit_with(CommitOptions::default().with_time(0));
        let mut doc = doc.fork().with_actor(ActorId::from([actor; 16]));
        for i in 0..puts {
            doc.put(ROOT, format!("k{actor}/{i}"), i as i64).unwrap();
        }
        doc.commit_with(CommitOptions::default().with_time(0));
        to_stored(doc.document(), WriteSettings { keep_json: false, ..WriteSettings::UNLIMITED })
            .unwrap()
    }

    #[test]
    fn the_state_grows_with_what_is_new_and_counts_against_the_limit() {
        let unlimited = LoadLimit::NONE;
        let mut state = MergeState::first(&fork(2, 100), unlimited).unwrap();
        let one = state.estimate();
        // The same document again adds nothing.
        state.add(&fork(2, 100), unlimited).unwrap();
        assert_eq!(state.estimate(), one);
        state.add(&fork(3, 100), unlimited).unwrap();
        let two = state.estimate();
        assert!(two.ops > one.ops && two.ops < 2 * one.ops, "{one:?} {two:?}");
        assert!(two.bytes > one.bytes, "{one:?} {two:?}");
        // A limit just above the state alone refuses the next merge, which needs more.
        let limit = LoadLimit(Some(two.peak_bytes()));
        let err = state.add(&fork(4, 100), limit).unwrap_err();
        assert!(matches!(err, Error::LoadTooLarge { .. }), "{err}");
        // A first document above the limit is refused before it loads.
        let err = MergeState::first(&fork(5, 10_000), limit).unwrap_err();
        assert!(matches!(err, Error::LoadTooLarge { .. }), "{err}");
        // Combining states checks both.
        let other = MergeState::from_saved(&fork_saved(6), unlimited).unwrap();
        let err = state.combine(other, limit).unwrap_err();
        assert!(matches!(err, Error::LoadTooLarge { .. }), "{err}");
        let other = MergeState::from_saved(&fork_saved(6), unlimited).unwrap();
        state.combine(other, unlimited).unwrap();
        assert!(state.estimate().ops > two.ops);
    }

    fn fork_saved(actor: u8) -> Vec<u8> {
        let stored = fork(actor, 50);
        load_stored(&format::decode(&stored).unwrap()).unwrap().save()
    }
}
