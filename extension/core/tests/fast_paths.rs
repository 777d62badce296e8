//! Fast paths return exactly what the slow paths return. A server copy receives every
//! change the three replicas commit, one write at a time and in commit order, twice: once
//! with the defaults (changes appended without a load when they follow the stored
//! document, kept JSON read without a load) and once the naive way (every write loads,
//! applies and saves; no JSON kept, so every read loads). After each write both copies
//! show the same heads, JSON, spans and history, and the fast copy's kept JSON is its own
//! document's.

use automerge::ChangeHash;
use pg_automerge_core::kept_json::TextJson;
use pg_automerge_core::load::load_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::writes::stored_from_client_bytes;
use pg_automerge_core::{format, history, json, json_reads, spans, writes};
use proptest::prelude::*;

mod support;
use support::{edits, replay};

/// Appends freely, but compacts now and then, so that both kinds of write follow each other.
const FAST: WriteSettings = WriteSettings { append_limit: 5, ..WriteSettings::UNLIMITED };
const NAIVE: WriteSettings =
    WriteSettings { keep_json: false, append_limit: 0, ..WriteSettings::UNLIMITED };

/// Everything a read shows of a stored value, the slow way (from a load).
fn loaded_state(
    stored: &[u8],
) -> (Vec<ChangeHash>, serde_json::Value, serde_json::Value, Vec<String>) {
    let doc = load_stored(&format::decode(stored).unwrap()).unwrap();
    let spans = spans::spans(&doc, &["text".into()], None).unwrap();
    // Changes come in a causal order, not one order: how the value was written may change it.
    let mut history: Vec<String> =
        history::changes(&doc, None).unwrap().iter().map(|change| format!("{change:?}")).collect();
    history.sort();
    (doc.get_heads(), json::document(&doc, None).unwrap(), spans, history)
}

/// What the reads that never load show: heads, change count and the JSON.
fn header_state(stored: &[u8]) -> (Vec<ChangeHash>, u64, serde_json::Value) {
    let summary = format::decode(stored).unwrap().summary;
    let json = serde_json::from_str(
        &json_reads::json_text(&format::decode(stored).unwrap(), &TextJson).unwrap(),
    )
    .unwrap();
    (summary.heads, summary.change_count, json)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn incremental_writes_match_load_apply_save(edits in edits()) {
        let (_, mut base) = replay(&[], |_| {});
        let mut fast = stored_from_client_bytes(&base.save(), FAST).unwrap();
        let mut naive = stored_from_client_bytes(&base.save(), NAIVE).unwrap();
        let mut changes = Vec::new();
        replay(&edits, |change| changes.push(change.to_vec()));
        for change in &changes {
            fast = writes::apply(&fast, change, FAST).unwrap();
            naive = writes::apply(&naive, change, NAIVE).unwrap();
            prop_assert_eq!(header_state(&fast), header_state(&naive));
            prop_assert_eq!(loaded_state(&fast), loaded_state(&naive));
            if let Some(kept) = json_reads::kept(&fast, &TextJson).unwrap() {
                prop_assert_eq!(kept, json::document(&load_stored(&format::decode(&fast).unwrap()).unwrap(), None).unwrap());
            }
        }
        // Sending everything again changes nothing, on either path.
        for change in &changes {
            prop_assert_eq!(writes::apply(&fast, change, FAST).unwrap(), fast.clone());
        }
    }

    #[test]
    fn merges_of_appended_values_match_merges_of_saved_ones(edits in edits(), split in 0.0..1.0f64) {
        let (_, mut base) = replay(&[], |_| {});
        let mut changes = Vec::new();
        replay(&edits, |change| changes.push(change.to_vec()));
        let at = (changes.len() as f64 * split) as usize;
        let base = base.save();
        // Two server copies: one got the first part of the changes, the other all of them.
        let write_all = |changes: &[Vec<u8>], settings| {
            let mut stored = stored_from_client_bytes(&base, settings).unwrap();
            for change in changes {
                stored = writes::apply(&stored, change, settings).unwrap();
            }
            stored
        };
        let (early_fast, all_fast) = (write_all(&changes[..at], FAST), write_all(&changes, FAST));
        let (early_naive, all_naive) = (write_all(&changes[..at], NAIVE), write_all(&changes, NAIVE));
        for (left, right) in [(&early_fast, &all_fast), (&all_fast, &early_fast)] {
            let merged = writes::merge(left, right, FAST).unwrap();
            let merged_naive = writes::merge(&early_naive, &all_naive, NAIVE).unwrap();
            prop_assert_eq!(header_state(&merged), header_state(&merged_naive));
            prop_assert_eq!(loaded_state(&merged), loaded_state(&merged_naive));
        }
    }
}
