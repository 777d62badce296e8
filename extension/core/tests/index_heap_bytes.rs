//! What a structure index says it holds (`heap_bytes`, which `pg_automerge.index_cache`
//! budgets) against what the counting allocator counts for it: on the documents the soak
//! writes and the generated ones, edited the JS way (text splices, marks, block splits, list
//! inserts, deletes and moves), an index built from a save, and one grown by appending
//! writes with the count they kept as they went. Every measurement runs in the one test
//! below, because the counters are global.

use automerge::transaction::CommitOptions;
use automerge::AutoCommit;
use fixtures::generated::{generate, Kind, Scale, Spec};
use fixtures::js_edits;
use pg_automerge_core::memory::{self, CountingAllocator};
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::structure::Structure;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{index_cache, writes};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Writes append and hold their index across writes, as a typing client's do.
const HELD: WriteSettings =
    WriteSettings { append_limit: 1000, index_cache_budget: u64::MAX, ..WriteSettings::UNLIMITED };

/// `said` is no less than the heap the index holds (what dropping it frees), and at most
/// a tenth more.
fn assert_counts(name: &str, said: u64, index: Structure) {
    let before = memory::usage().allocated_bytes;
    drop(index);
    let held = (before - memory::usage().allocated_bytes) as u64;
    assert!(said >= held, "{name}: heap_bytes {said} under the {held} bytes held");
    assert!(said <= held + held / 10, "{name}: heap_bytes {said}, far over the {held} held");
}

#[test]
fn heap_bytes_is_what_the_allocator_counts() {
    let mut documents: Vec<(String, AutoCommit)> = fixtures::samples()
        .into_iter()
        .map(|sample| (sample.name.to_string(), AutoCommit::load(&sample.doc.save()).unwrap()))
        .collect();
    for kind in Kind::ALL {
        let save = generate(Spec { kind, scale: Scale::Small, compacted: false });
        documents.push((format!("{kind:?}"), AutoCommit::load(&save).unwrap()));
    }
    let mut rng = fastrand::Rng::with_seed(11);
    for (name, doc) in &mut documents {
        let mut stored = stored_from_client_bytes(&doc.save(), HELD).unwrap();
        for count in 1..=60 {
            js_edits::edit(doc, &mut rng, 2, count).unwrap();
            doc.commit_with(CommitOptions::default());
            let change = doc.get_last_local_change().unwrap().raw_bytes().to_vec();
            stored = writes::apply(&stored, &change, HELD).unwrap();
        }
        // The index the writes grew, handed over by the cache that held it.
        let (grown, kept_count) = index_cache::take(&doc.get_heads())
            .unwrap_or_else(|| panic!("{name}: no index held after the writes"));
        // The writes counted again only what they touched; key strings they shared with
        // other maps move those maps' shares a little.
        let walked = grown.heap_bytes();
        assert!(
            kept_count.abs_diff(walked) <= walked / 100,
            "{name}: the writes counted {kept_count} bytes, a walk {walked}"
        );
        assert_counts(&format!("{name}, grown by writes"), kept_count, grown);
        index_cache::fit(0);
        let built = Structure::of_save(&doc.save()).unwrap().0;
        assert_counts(&format!("{name}, built from its save"), built.heap_bytes(), built);
    }
}
