//! Inputs shared by the benchmarks.

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ObjType, ReadDoc, ROOT};

/// A text of 2,000 edits by two actors: a load that makes many allocations of every size.
pub fn edited_text() -> Vec<u8> {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([1; 16]));
    let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
    for i in 0..2_000 {
        if i % 2 == 1 {
            doc.set_actor(ActorId::from([2; 16]));
        } else {
            doc.set_actor(ActorId::from([1; 16]));
        }
        let len = doc.length(&text);
        doc.splice_text(&text, (i * 7) % (len + 1), 0, "edit ").unwrap();
        doc.commit();
    }
    doc.save()
}

/// The benchmark body both allocator benches run: load the document.
pub fn load(bytes: &[u8]) -> automerge::Automerge {
    automerge::Automerge::load(bytes).unwrap()
}
