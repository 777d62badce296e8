//! History without a load: every change of a stored save rebuilt from its columns is the
//! automerge crate's, byte for byte and in the crate's order, on every generated fixture
//! (with their history and compacted; small ones, and those of the scales
//! `FIXTURE_SCALES` lists, such as `small,medium`) and, when `JS_FIXTURES` names a
//! directory of them, on documents made by the JS client; and listing them loads nothing.
//! `cargo xtask test` runs it again in release with both set, on documents it makes with
//! `@automerge/automerge` 3.

use std::path::PathBuf;

use automerge::{Automerge, ChangeHash};
use fixtures::generated::{cached, Kind, Scale, Spec};
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{format, history, memory};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The saves to check: the generated fixtures, then the JS-made ones if any.
fn saves() -> Vec<(String, Vec<u8>)> {
    let mut saves = Vec::new();
    let scales = std::env::var("FIXTURE_SCALES").unwrap_or_else(|_| "small".to_string());
    let scales =
        Scale::ALL.into_iter().filter(|scale| scales.split(',').any(|s| s == scale.name()));
    for scale in scales {
        for kind in Kind::ALL {
            for compacted in [false, true] {
                let spec = Spec { kind, scale, compacted };
                let save = cached(&workspace().join("target/fixtures"), spec).unwrap();
                saves.push((spec.name(), save));
            }
        }
    }
    if let Some(dir) = std::env::var_os("JS_FIXTURES").map(|dir| workspace().join(dir)) {
        let before = saves.len();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "automerge") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                saves.push((name, std::fs::read(&path).unwrap()));
            }
        }
        assert!(saves.len() > before, "no JS-made documents in {}", dir.display());
    }
    saves
}

#[test]
fn every_change_of_every_fixture_is_listed_as_a_load_lists_it_without_a_load() {
    let settings = WriteSettings { append_limit: 0, ..WriteSettings::UNLIMITED };
    for (name, save) in saves() {
        let stored = stored_from_client_bytes(&save, settings).unwrap();
        let value = format::decode(&stored).unwrap();
        let loaded = Automerge::load(&save).unwrap();
        let all = history::changes(&loaded, None).unwrap();
        // Since nothing, since a change halfway through, since the document's heads.
        let halfway: Vec<ChangeHash> = vec![all[all.len() / 2].meta.hash.parse().unwrap()];
        for since in [None, Some(&halfway[..]), Some(&loaded.get_heads()[..])] {
            let loads = memory::usage().loads;
            let ours = history::stored_changes(&value, since).unwrap();
            let ours_meta = history::stored_changes_meta(&value, since).unwrap();
            assert_eq!(memory::usage().loads, loads, "{name}: listing the changes loaded");
            let theirs = history::changes(&loaded, since).unwrap();
            assert!(ours == theirs, "{name} since {since:?}: the changes differ from a load's");
            assert_eq!(ours_meta, history::changes_meta(&loaded, since).unwrap(), "{name}");
        }
        let last = &all[all.len() - 1];
        let hash: ChangeHash = last.meta.hash.parse().unwrap();
        assert_eq!(history::stored_change(&value, &hash).unwrap().as_ref(), Some(&last.bytes));
    }
}
