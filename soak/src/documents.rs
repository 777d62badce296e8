//! The documents the soak table holds: the fixtures, most of them small and about a tenth
//! large (the Operations page's sizes).

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use automerge::{ActorId, AutoCommit, Automerge};
use fixtures::generated::{Kind, Scale, Spec};
use serde::{Deserialize, Serialize};

/// Which documents a run writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DocumentSet {
    /// Only documents of a few kB: for the short soak of `cargo xtask test`, which runs a
    /// debug build of the extension.
    Small,
    /// Those, and of every ten rows one medium (a tenth of the large, 58 to 317 kB) and one
    /// large: the 1.26 MB rich text or the 1.07 MB list of 23,000 maps.
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
    /// The document loaded once, for connections to fork: a fork copies it in memory
    /// instead of parsing the save again.
    loaded: OnceLock<Mutex<AutoCommit>>,
}

impl Document {
    fn new(
        name: &str,
        doc: &Automerge,
        save: Vec<u8>,
        large: bool,
        text_path: Option<&[&str]>,
    ) -> Document {
        Document {
            name: name.to_string(),
            save,
            heads: doc.get_heads().iter().map(|h| h.to_string()).collect(),
            changes: doc.get_changes(&[]).len(),
            large,
            text_path: text_path.map(|p| p.iter().map(|s| s.to_string()).collect()),
            loaded: OnceLock::new(),
        }
    }

    /// A replica of the document as a client opens it, editing under `actor`.
    pub fn fork(&self, actor: ActorId) -> AutoCommit {
        let loaded = self.loaded.get_or_init(|| {
            Mutex::new(AutoCommit::load(&self.save).expect("the catalogue's saves load"))
        });
        loaded.lock().unwrap().fork().with_actor(actor)
    }
}

pub struct Catalogue {
    small: Vec<Document>,
    medium: Vec<Document>,
    large: Vec<Document>,
}

impl Catalogue {
    /// Generates the fixtures it needs, or reads them from target/fixtures where an earlier
    /// run kept them.
    pub fn new(set: DocumentSet) -> std::io::Result<Catalogue> {
        let mut small: Vec<Document> = fixtures::samples()
            .iter()
            .filter(|sample| sample.name != "empty")
            .map(|sample| {
                let text = (sample.name == "meeting-notes").then_some(&["content"][..]);
                Document::new(sample.name, &sample.doc, sample.doc.save(), false, text)
            })
            .collect();
        let mut medium = Vec::new();
        for kind in Kind::ALL {
            for compacted in [false, true] {
                small.push(generated(Spec { kind, scale: Scale::Small, compacted }, false)?);
                if set == DocumentSet::WithLarge {
                    medium.push(generated(Spec { kind, scale: Scale::Medium, compacted }, false)?);
                }
            }
        }
        let large = match set {
            DocumentSet::Small => Vec::new(),
            DocumentSet::WithLarge => [Kind::RichText, Kind::MapList]
                .into_iter()
                .map(|kind| {
                    generated(Spec { kind, scale: Scale::Operations, compacted: false }, true)
                })
                .collect::<std::io::Result<_>>()?,
        };
        Ok(Catalogue { small, medium, large })
    }

    /// The document row `id` is made from: of every ten rows, one large and one medium
    /// when the set has them, the others small.
    pub fn for_id(&self, id: i64) -> &Document {
        let id = id as usize;
        if id.is_multiple_of(10) && !self.large.is_empty() {
            &self.large[(id / 10) % self.large.len()]
        } else if id % 10 == 5 && !self.medium.is_empty() {
            &self.medium[(id / 10) % self.medium.len()]
        } else {
            &self.small[id % self.small.len()]
        }
    }

    /// The first row id made from each document, among `1..=rows`.
    pub fn one_row_each(&self, rows: i64) -> Vec<i64> {
        let mut seen = std::collections::HashSet::new();
        (1..=rows).filter(|&id| seen.insert(self.for_id(id).name.clone())).collect()
    }
}

fn generated(spec: Spec, large: bool) -> std::io::Result<Document> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fixtures");
    let bytes = fixtures::generated::cached(&dir, spec)?;
    let doc = Automerge::load(&bytes).map_err(std::io::Error::other)?;
    // Both text kinds keep their text under `content`.
    let text = (spec.kind != Kind::MapList).then_some(&["content"][..]);
    Ok(Document::new(&spec.name(), &doc, bytes, large, text))
}
