//! The documents the soak table holds: the fixtures, most of them small and about a tenth
//! large (the Operations page's sizes).

use automerge::Automerge;
use serde::{Deserialize, Serialize};

/// Which documents a run writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DocumentSet {
    /// Only the small sample documents: for the short soak of `cargo xtask test`, which runs
    /// a debug build of the extension.
    Small,
    /// Small documents and, for every tenth row, a large one.
    WithLarge,
}

/// One document the table can hold, as a client would upload it.
pub struct Document {
    pub name: String,
    pub save: Vec<u8>,
    /// Its heads and number of changes, which every row made from it starts with.
    pub heads: Vec<String>,
    pub changes: usize,
    pub large: bool,
    /// The path of a text object with marks, for `automerge_spans`.
    pub text_path: Option<Vec<String>>,
}

impl Document {
    fn new(name: &str, doc: &Automerge, large: bool, text_path: Option<&[&str]>) -> Document {
        Document {
            name: name.to_string(),
            save: doc.save(),
            heads: doc.get_heads().iter().map(|h| h.to_string()).collect(),
            changes: doc.get_changes(&[]).len(),
            large,
            text_path: text_path.map(|p| p.iter().map(|s| s.to_string()).collect()),
        }
    }
}

pub struct Catalogue {
    small: Vec<Document>,
    large: Vec<Document>,
}

impl Catalogue {
    pub fn new(set: DocumentSet) -> Catalogue {
        let samples = fixtures::samples();
        let small = samples
            .iter()
            .filter(|sample| sample.name != "empty")
            .map(|sample| {
                let text = (sample.name == "meeting-notes").then_some(&["content"][..]);
                Document::new(sample.name, &sample.doc, false, text)
            })
            .collect();
        let large = match set {
            DocumentSet::Small => Vec::new(),
            DocumentSet::WithLarge => Vec::new(),
        };
        Catalogue { small, large }
    }

    /// The document row `id` is made from: every tenth row a large one, when the set has
    /// large ones.
    pub fn for_id(&self, id: i64) -> &Document {
        let id = id as usize;
        if id % 10 == 0 && !self.large.is_empty() {
            &self.large[(id / 10) % self.large.len()]
        } else {
            &self.small[id % self.small.len()]
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &Document> {
        self.small.iter().chain(&self.large)
    }
}
