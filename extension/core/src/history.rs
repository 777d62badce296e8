//! A document's history: its changes, and what a client needs to catch up.

use automerge::{Automerge, ChangeHash};

use crate::guard::no_panic;
use crate::{heads, Error};

/// One change, as `automerge_changes` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeInfo {
    pub hash: String,
    pub actor: String,
    pub seq: u64,
    pub start_op: u64,
    pub op_count: u64,
    /// Milliseconds since the Unix epoch, as the author's clock said.
    pub time_ms: i64,
    pub message: Option<String>,
    pub deps: Vec<String>,
    pub bytes: Vec<u8>,
}

/// Every change of `doc` in causal order, or only those that `since` does not contain.
pub fn changes(doc: &Automerge, since: Option<&[ChangeHash]>) -> Result<Vec<ChangeInfo>, Error> {
    let since = since.unwrap_or(&[]);
    heads::require_known(doc, since)?;
    let changes = no_panic(|| doc.get_changes(since)).map_err(Error::CorruptStoredValue)?;
    Ok(changes
        .into_iter()
        .inspect(|_change| {
            crate::interrupts::check();
        })
        .map(|change| ChangeInfo {
            hash: change.hash().to_string(),
            actor: change.actor_id().to_hex_string(),
            seq: change.seq(),
            start_op: change.start_op().get(),
            op_count: change.len() as u64,
            time_ms: change.timestamp(),
            message: change.message().map(str::to_string),
            deps: heads::to_hex(change.deps()),
            bytes: change.raw_bytes().to_vec(),
        })
        .collect())
}

/// The bytes a client that has `since` needs to catch up: the changes it lacks, as an
/// incremental save it can load with `loadIncremental`.
pub fn catch_up(doc: &Automerge, since: &[ChangeHash]) -> Result<Vec<u8>, Error> {
    heads::require_known(doc, since)?;
    no_panic(|| doc.save_after(since)).map_err(Error::CorruptStoredValue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::{CommitOptions, Transactable};
    use automerge::{ActorId, AutoCommit, ROOT};

    fn two_changes() -> (AutoCommit, Vec<ChangeHash>) {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([9; 16]));
        doc.put(ROOT, "a", 1_i64).unwrap();
        doc.commit_with(CommitOptions::default().with_message("first").with_time(1000));
        let first = doc.get_heads();
        doc.put(ROOT, "b", 2_i64).unwrap();
        doc.commit_with(CommitOptions::default().with_time(2000));
        (doc, first)
    }

    #[test]
    fn lists_changes_with_their_metadata() {
        let (mut doc, first) = two_changes();
        let all = changes(doc.document(), None).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].hash, first[0].to_string());
        assert_eq!(all[0].actor, "09".repeat(16));
        assert_eq!((all[0].seq, all[0].start_op, all[0].op_count), (1, 1, 1));
        assert_eq!(all[0].message.as_deref(), Some("first"));
        assert_eq!(all[0].time_ms, 1000);
        assert!(all[0].deps.is_empty());
        assert_eq!(all[1].deps, vec![all[0].hash.clone()]);
        assert_eq!((all[1].seq, all[1].start_op), (2, 2));

        let since = changes(doc.document(), Some(&first)).unwrap();
        assert_eq!(since, all[1..].to_vec());
    }

    #[test]
    fn catching_up_gives_what_a_client_lacks() {
        let (mut doc, first) = two_changes();
        let mut client = Automerge::new();
        client.load_incremental(&catch_up(doc.document(), &[]).unwrap()).unwrap();
        assert_eq!(client.get_heads(), doc.get_heads());

        let mut behind =
            AutoCommit::load(&doc.document().save()).unwrap().document().fork_at(&first).unwrap();
        behind.load_incremental(&catch_up(doc.document(), &first).unwrap()).unwrap();
        assert_eq!(behind.get_heads(), doc.get_heads());
    }

    #[test]
    fn unknown_heads_are_refused() {
        let (mut doc, _) = two_changes();
        let unknown = [ChangeHash([1; 32])];
        assert!(matches!(changes(doc.document(), Some(&unknown)), Err(Error::UnknownHeads(_))));
        assert!(matches!(catch_up(doc.document(), &unknown), Err(Error::UnknownHeads(_))));
    }
}
