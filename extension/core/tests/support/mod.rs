//! Random concurrent editing for the properties: three replicas of a base document (a
//! list and a text at the root) put root keys, insert into the list, splice the text and
//! now and then sync with one another; and the samples of accepted values that
//! examples/node-client/load-samples.mjs loads with `@automerge/automerge`.

#![allow(dead_code)] // each test binary uses part of it

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ObjType, ReadDoc, ROOT};
use proptest::prelude::*;

mod loads;
pub use loads::*;

use std::path::PathBuf;

use pg_automerge_core::{json_reads, kept_json};

/// Where accepted payloads are written for the Node.js check, and how many of each label at
/// most.
fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/accepted-samples")
}
const MAX_SAMPLES_PER_LABEL: usize = 100;

/// Writes the payload of an accepted value, named by its heads, now and then, and the
/// JSON it keeps beside it.
pub fn sample(label: &str, stored: &[u8], every: usize, count: &mut usize) {
    *count += 1;
    if !(*count).is_multiple_of(every) {
        return;
    }
    let dir = samples_dir();
    std::fs::create_dir_all(&dir).unwrap();
    // Each label has its own share, so that no test's samples crowd out another's.
    let prefix = format!("{label}-");
    let written = std::fs::read_dir(&dir).map_or(0, |entries| {
        let name = |e: &std::fs::DirEntry| e.file_name().to_string_lossy().to_string();
        entries
            .flatten()
            .filter(|e| name(e).starts_with(&prefix) && name(e).ends_with(".automerge"))
            .count()
    });
    if written >= MAX_SAMPLES_PER_LABEL {
        return;
    }
    let value = pg_automerge_core::format::decode(stored).unwrap();
    let name: String =
        value.summary.heads.iter().map(|h| h.to_string()[..16].to_string()).collect();
    let name = if name.is_empty() { "empty".to_string() } else { name };
    std::fs::write(dir.join(format!("{label}-{name}.automerge")), value.payload).unwrap();
    // The JSON the value keeps, which the JS client's load must show too.
    if let Some(json) = json_reads::kept(stored, &kept_json::TextJson).unwrap() {
        std::fs::write(dir.join(format!("{label}-{name}.json")), json.to_string()).unwrap();
    }
}

/// Asserts the invariant of issue 14 on a stored value (see [`check_loads`]).
#[track_caller]
pub fn assert_loads(stored: &[u8]) {
    if let Err(broken) = check_loads(stored) {
        panic!("a stored value breaks the invariant: {broken}");
    }
}

#[derive(Debug, Clone)]
pub enum Edit {
    Put { replica: usize, key: u8, value: i64 },
    Insert { replica: usize, index: usize, value: String },
    Splice { replica: usize, at: usize, delete: usize, text: String },
    Sync { from: usize, to: usize },
}

pub fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..3usize, 0..4u8, any::<i64>()).prop_map(|(replica, key, value)| Edit::Put {
            replica,
            key,
            value
        }),
        (0..3usize, 0..8usize, "[a-z]{0,4}").prop_map(|(replica, index, value)| Edit::Insert {
            replica,
            index,
            value
        }),
        (0..3usize, 0..16usize, 0..4usize, "[a-zé ]{0,6}")
            .prop_map(|(replica, at, delete, text)| Edit::Splice { replica, at, delete, text }),
        (0..3usize, 0..3usize).prop_map(|(from, to)| Edit::Sync { from, to }),
    ]
}

/// Three replicas forked from one base document, after the edits; and the base's heads.
pub fn replicas(edits: &[Edit]) -> ([AutoCommit; 3], Vec<automerge::ChangeHash>) {
    let (docs, mut base) = replay(edits, |_| {});
    (docs, base.get_heads())
}

/// Runs the edits on three replicas forked from a base document, passing each change to
/// `on_change` as its replica commits it; returns the replicas and the base.
pub fn replay(edits: &[Edit], mut on_change: impl FnMut(&[u8])) -> ([AutoCommit; 3], AutoCommit) {
    let mut base = AutoCommit::new().with_actor(ActorId::from([0; 16]));
    base.put_object(ROOT, "items", ObjType::List).unwrap();
    base.put_object(ROOT, "text", ObjType::Text).unwrap();
    let mut docs = [0u8, 1, 2].map(|i| base.fork().with_actor(ActorId::from([i + 1; 16])));
    for edit in edits {
        match edit {
            Edit::Put { replica, key, value } => {
                docs[*replica].put(ROOT, format!("k{key}"), *value).unwrap();
            }
            Edit::Insert { replica, index, value } => {
                let doc = &mut docs[*replica];
                let items = doc.get(ROOT, "items").unwrap().unwrap().1;
                let index = (*index).min(doc.length(&items));
                doc.insert(&items, index, value.as_str()).unwrap();
            }
            Edit::Splice { replica, at, delete, text } => {
                let doc = &mut docs[*replica];
                let obj = doc.get(ROOT, "text").unwrap().unwrap().1;
                let len = doc.length(&obj);
                let at = (*at).min(len);
                let delete = (*delete).min(len - at) as isize;
                doc.splice_text(&obj, at, delete, text).unwrap();
            }
            Edit::Sync { from, to } if from != to => {
                let mut source = docs[*from].fork();
                docs[*to].merge(&mut source).unwrap();
            }
            Edit::Sync { .. } => {}
        }
        for doc in docs.iter_mut() {
            if let Some(hash) = doc.commit() {
                on_change(doc.get_change_by_hash(&hash).expect("just committed").raw_bytes());
            }
        }
    }
    (docs, base)
}

pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), 0..24)
}
