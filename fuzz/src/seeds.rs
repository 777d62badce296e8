//! Where the fuzzer starts: the bytes real clients send, taken from the fixtures, in
//! every form Automerge writes them, and the committed regression inputs.

use std::path::{Path, PathBuf};

use automerge::Automerge;

/// A named input.
#[derive(Debug, Clone)]
pub struct Seed {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// The directory of regression inputs: every input that once broke an oracle.
pub fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

/// Every regression input, sorted by name.
pub fn regressions() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = std::fs::read_dir(regressions_dir())
        .expect("the regressions directory is committed")
        .map(|entry| entry.expect("listing regressions").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "bin"))
        .map(|path| Seed {
            name: path.file_stem().unwrap().to_string_lossy().into_owned(),
            bytes: std::fs::read(&path).expect("reading a regression input"),
        })
        .collect();
    seeds.sort_by(|a, b| a.name.cmp(&b.name));
    seeds
}

/// The fixtures' documents, hostile ones included, each as a save, an uncompressed save,
/// its changes (raw and, where Automerge deflates them, deflated), an incremental save, a
/// bundle and a save followed by a change; then the regression inputs.
pub fn all() -> Vec<Seed> {
    let mut documents: Vec<(String, Automerge)> =
        fixtures::samples().into_iter().map(|s| (s.name.to_string(), s.doc)).collect();
    documents.push(("deeply-nested".into(), fixtures::hostile::deeply_nested(40)));
    documents.push(("repeated-text".into(), fixtures::hostile::repeated_text(2000)));
    documents.push(("overlapping-marks".into(), fixtures::hostile::overlapping_marks(60, 12)));
    documents.push(("huge-change".into(), fixtures::hostile::huge_change(300)));
    documents.push(("deep-block".into(), fixtures::hostile::deep_block(30)));
    // The generated editing histories (small scale): many actors' changes, blocks and marks.
    for spec in fixtures::generated::Spec::all()
        .into_iter()
        .filter(|s| s.scale == fixtures::generated::Scale::Small)
    {
        let doc = Automerge::load(&fixtures::generated::generate(spec)).expect("fixtures load");
        documents.push((spec.name(), doc));
    }

    let mut seeds = Vec::new();
    for (name, doc) in &documents {
        let mut add = |form: &str, bytes: Vec<u8>| {
            seeds.push(Seed { name: format!("{name}/{form}"), bytes });
        };
        add("save", doc.save());
        add("save-uncompressed", doc.save_nocompress());
        let changes = doc.get_changes(&[]);
        for (i, change) in changes.iter().enumerate() {
            add(&format!("change-{i}"), change.raw_bytes().to_vec());
            let mut deflatable = change.clone();
            if deflatable.bytes().len() != change.raw_bytes().len() {
                add(&format!("change-{i}-deflated"), deflatable.bytes().into_owned());
            }
        }
        if let Some(first) = changes.first() {
            add("save-after-first", doc.save_after(&[first.hash()]));
            let mut save_and_change = doc.save();
            save_and_change.extend_from_slice(changes.last().unwrap().raw_bytes());
            add("save-and-change", save_and_change);
        }
        let hashes = changes.iter().map(|c| c.hash());
        if let Ok(bundle) = doc.bundle(hashes) {
            add("bundle", bundle.bytes().to_vec());
        }
    }
    seeds.extend(regressions());
    seeds
}
