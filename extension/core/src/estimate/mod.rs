//! Estimating the peak memory of a load before it starts, from the bytes alone.
//!
//! Automerge bytes are a concatenation of chunks (automerge 0.12, `storage/chunk.rs`):
//! four magic bytes, a four-byte checksum, a chunk type (0 document, 1 change, 2 deflated
//! change, 3 bundle) and the uLEB128 length of the data that follows. Documents, changes
//! and bundles describe their operations in columns (`storage/columns/`): a list of
//! (specification, length) pairs, then the column data back to back. A specification packs
//! the column id (`spec >> 4`), a deflate bit (`spec & 8`) and a type (`spec & 7`).
//!
//! What a load costs grows with the number of rows those columns hold, and a few bytes of
//! run-length encoding can describe millions of rows; a few bytes of DEFLATE can inflate to
//! gigabytes. So the estimate reads every column and counts its rows by decoding run
//! lengths only, never values, and inflates deflated data as a stream through a small
//! buffer, counting the bytes it produces and never keeping them. The memory this takes is
//! a few buffers whatever the input; the time is proportional to the column data once
//! inflated.
//!
//! The counts are upper bounds on what a load materializes: every column is counted (not
//! just the one Automerge sizes the others by), the largest count wins, a damaged column
//! counts the rows read before the damage, and actor ids and column specifications, which a
//! load keeps in vectors, count as rows too. What the estimate refuses as malformed
//! (`Error::NotAutomerge`) is malformed chunk structure, which Automerge refuses as well.
//!
//! # Calibration
//!
//! The costs in [`costs`] were fitted to the peaks that automerge 0.12 loads reach,
//! measured with the counting allocator (`tests/estimate_peaks.rs`; with
//! `ESTIMATE_PEAKS_ROWS=1` it prints the counts of every input): our generated rich text,
//! lists of maps and plain text at three scales, with their history and compacted, the
//! same kinds made by `@automerge/automerge` 3, and the shapes and hostile inputs of the
//! other measurements (text edited and deleted at scattered places, counters, conflicts,
//! many small changes, big values, floods of actors, run-length and deflate bombs, the
//! fuzz regressions), each at the sizes the test runs them in debug and release builds. A
//! linear program chose the costs that keep every input at or above its peak and the
//! realistic documents as close to it as it can: 1.0 to 1.5 times their peak.
//!
//! Reading the first chunk as a document keeps its operations in columns: what that costs
//! depends on how well they encode (typed text costs about 92 bytes per operation at the
//! peak, text edited at scattered places 300, a list of small maps 190), on overwritten
//! and deleted operations, on the changes rebuilt to check the heads' hashes (a kilobyte or
//! so each) and on marks. Every other chunk (change chunks, bundles, later documents) is
//! decoded into changes that are applied at once, each operation decoded on the heap (500
//! to 850 bytes at the peak). [`LoadEstimate::ops`] is the sum of those costs, in bytes.
//!
//! One file per part: `readers.rs` reads bytes and their LEB128 numbers from a slice or an
//! inflating stream, `columns.rs` counts the rows of each chunk's columns, `costs.rs` is the
//! cost model that weighs them; the chunk framing is [`crate::chunk`]'s.

mod columns;
pub mod costs;
mod readers;

use crate::chunk::{self, BUNDLE, CHANGE, COMPRESSED_CHANGE, DOCUMENT};
use crate::format::Summary;
use crate::Error;
use columns::{bundle, change_body, document, not_automerge};
use readers::{Bytes, Cursor, Inflate};

pub use costs::{APPLYING_BYTES, BASE_BYTES, BYTES_PER_BYTE, BYTES_PER_CHANGE};

/// What a load is estimated to need; [`LoadEstimate::peak_bytes`] turns it into bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadEstimate {
    /// What the operations cost, in bytes: each row of the operation and change columns
    /// weighed by what it costs the way the load reads it (see the module documentation
    /// and [`costs`]).
    pub ops: u64,
    /// Changes applied as changes: one per change chunk, the rows of the change columns of
    /// a bundle or of a document after the first chunk. (Those of a first document chunk
    /// are in `ops`.)
    pub changes: u64,
    /// Bytes: the input, plus everything its deflated parts inflate to (Automerge inflates
    /// them whole), plus what runs of a repeated string (a key, a mark name, a message)
    /// expand to when every row gets its own copy.
    pub bytes: u64,
}

/// Estimates what `Automerge::load(bytes)` will need, without loading: `bytes` is any
/// concatenation of document, change, deflated change and bundle chunks. Empty input is
/// the empty document. Bytes that are not Automerge chunks are refused.
pub fn estimate_client_bytes(bytes: &[u8]) -> Result<LoadEstimate, Error> {
    client_rows(bytes).map(|counts| counts.estimate())
}

/// What [`estimate_client_bytes`] counts in `bytes`, before weighing.
pub fn client_rows(bytes: &[u8]) -> Result<Counts, Error> {
    let mut counts = Counts { input: bytes.len() as u64, ..Counts::default() };
    let mut rest = bytes;
    let mut first = true;
    while !rest.is_empty() {
        crate::interrupts::check();
        let (chunk_type, body, after) = chunk::split_first(rest)?;
        match chunk_type {
            // Only a first document chunk is loaded as a document; a later one is rebuilt
            // into changes and applied with the other changes.
            DOCUMENT => document(body, first, &mut counts)?,
            CHANGE => change_body(&mut Cursor::new(body), &mut counts)?,
            COMPRESSED_CHANGE => {
                let mut inflate = Inflate::new(body);
                change_body(&mut inflate, &mut counts)?;
                // The extra bytes after the columns are inflated (and kept) too.
                inflate.skip(u64::MAX);
                Counts::add(&mut counts.inflated, inflate.produced());
            }
            BUNDLE => bundle(body, &mut counts)?,
            other => return Err(not_automerge(format!("unknown chunk type {other}"))),
        }
        first = false;
        rest = after;
    }
    Ok(counts)
}

/// The estimate of loading a stored value: [`estimate_client_bytes`] of its payload, which
/// is what a load of it reads (a save, and any changes appended to it). The pass over the
/// payload inflates its deflated columns through a small buffer: milliseconds for the
/// Operations page's documents, against seconds for their load. A payload the estimate
/// cannot read (a corrupted value, which the load refuses) is estimated from the header
/// at the cost of operations applied as changes.
pub fn estimate_stored(summary: &Summary, payload: &[u8]) -> LoadEstimate {
    estimate_client_bytes(payload).unwrap_or(LoadEstimate {
        ops: summary.op_count.saturating_mul(costs::CHANGE_ROW),
        changes: summary.change_count,
        bytes: payload.len() as u64,
    })
}

/// What applying the changes of a stored value to another loaded document adds, as a
/// merge does (`Automerge::merge` decodes the other document's new changes and applies
/// them): its operations at the cost of operations applied as changes (see
/// [`costs::APPLIED_PER_DOCUMENT_BYTE`]), its changes and bytes.
pub fn estimate_applied(stored: &LoadEstimate) -> LoadEstimate {
    LoadEstimate {
        ops: stored.ops.saturating_mul(costs::APPLIED_PER_DOCUMENT_BYTE),
        changes: stored.changes,
        bytes: stored.bytes,
    }
}

/// The sum of several estimates: what loading several inputs into one document takes.
pub fn sum(parts: &[LoadEstimate]) -> LoadEstimate {
    parts.iter().fold(LoadEstimate { ops: 0, changes: 0, bytes: 0 }, |sum, part| LoadEstimate {
        ops: sum.ops.saturating_add(part.ops),
        changes: sum.changes.saturating_add(part.changes),
        bytes: sum.bytes.saturating_add(part.bytes),
    })
}

/// What the chunks add up to. A load reads the first chunk, if it is a document, as a
/// document; it decodes every other chunk into changes and applies them all at once.
/// [`client_rows`] returns it, for calibrating the costs against measured peaks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Rows of the first document chunk's operation columns, its actors and columns.
    pub doc_ops: u64,
    /// Those of them that insert into a list or text.
    pub doc_inserts: u64,
    /// Its successor entries.
    pub doc_succ: u64,
    /// Its dependency entries.
    pub doc_deps: u64,
    /// Operation rows, actors and columns of the chunks applied as changes.
    pub change_ops: u64,
    /// Their predecessor (or successor) entries.
    pub change_preds: u64,
    /// Their dependency entries (of bundles and later documents).
    pub change_deps: u64,
    pub changes: u64,
    /// Bytes that deflated data inflates to.
    pub inflated: u64,
    /// Bytes that runs of repeated strings expand to.
    pub expanded: u64,
    /// Changes of the first document chunk.
    pub doc_changes: u64,
    /// Bytes of the first document chunk's column data, once inflated.
    pub doc_bytes: u64,
    /// Its actors and column specifications (also counted in `doc_ops`).
    pub doc_other: u64,
    /// Bytes of its value columns, once inflated: the rest of `doc_bytes` is structure.
    pub doc_value_bytes: u64,
    /// Bytes of its key columns that reference list and text elements, once inflated.
    pub doc_element_bytes: u64,
    /// Its mark operations, and those that make objects.
    pub doc_marks: u64,
    pub doc_objects: u64,
    /// Bytes of the input.
    pub input: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::{CommitOptions, Transactable};
    use automerge::{ActorId, AutoCommit, ObjType, ROOT};
    use proptest::prelude::*;

    /// A document with text, a list of maps and a counter, committed `changes` times.
    fn doc(changes: usize) -> AutoCommit {
        let mut doc = AutoCommit::new().with_actor(ActorId::from([7; 16]));
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        let list = doc.put_object(ROOT, "items", ObjType::List).unwrap();
        for i in 0..changes {
            doc.splice_text(&text, 0, 0, "hello world, ").unwrap();
            let item = doc.insert_object(&list, 0, ObjType::Map).unwrap();
            doc.put(&item, "n", i as i64).unwrap();
            doc.put(&item, "name", format!("item {i} ").repeat(8)).unwrap();
            if i % 3 == 0 {
                doc.splice_text(&text, 2, 4, "").unwrap();
            }
            doc.commit_with(CommitOptions::default().with_time(1_767_225_600_000));
        }
        doc
    }

    /// Automerge bytes of every kind: a save, a save without deflate, change chunks,
    /// deflated change chunks, a bundle, a save followed by changes.
    fn samples() -> Vec<Vec<u8>> {
        let mut d = doc(40);
        let hashes: Vec<_> = d.get_changes(&[]).iter().map(|c| c.hash()).collect();
        let changes: Vec<u8> =
            d.get_changes(&[]).iter().flat_map(|c| c.raw_bytes().to_vec()).collect();
        let deflated: Vec<u8> =
            d.get_changes(&[]).into_iter().flat_map(|mut c| c.bytes().into_owned()).collect();
        let mut save_and_changes = doc(5).save();
        save_and_changes.extend(&changes);
        vec![
            d.save(),
            d.document().save_nocompress(),
            changes,
            deflated,
            d.document().bundle(hashes).unwrap().bytes().to_vec(),
            save_and_changes,
        ]
    }

    #[test]
    fn empty_input_is_the_empty_document() {
        let estimate = estimate_client_bytes(&[]).unwrap();
        assert_eq!(estimate, LoadEstimate { ops: 0, changes: 0, bytes: 0 });
        assert_eq!(estimate.peak_bytes(), BASE_BYTES);
    }

    #[test]
    fn counts_the_changes_of_every_kind_of_input() {
        let mut d = doc(40);
        for (i, bytes) in samples().into_iter().enumerate() {
            let rows = client_rows(&bytes).unwrap();
            let estimate = rows.estimate();
            let expected = if i == 5 { 45 } else { 40 };
            assert_eq!(rows.changes, expected, "sample {i}");
            // The changes of a first document chunk are in the cost of its operations;
            // those applied as changes count on their own.
            let applied = if i <= 1 { 0 } else { 40 };
            assert_eq!(estimate.changes, applied, "sample {i}");
            assert!(estimate.bytes >= bytes.len() as u64, "sample {i}");
            // Every operation counts at least as a document's row does.
            let ops = d.get_changes(&[]).iter().map(|c| c.len() as u64).sum::<u64>();
            assert!(estimate.ops >= ops * costs::DOCUMENT_ROW, "sample {i}: {estimate:?}");
        }
    }

    #[test]
    fn applying_changes_costs_more_than_reading_a_document() {
        let samples = samples();
        let saved = estimate_client_bytes(&samples[0]).unwrap();
        let changes = estimate_client_bytes(&samples[2]).unwrap();
        assert!(changes.ops > 3 * saved.ops, "{saved:?} {changes:?}");
    }

    #[test]
    fn counts_what_deflated_data_inflates_to() {
        let samples = samples();
        let saved = estimate_client_bytes(&samples[0]).unwrap();
        let plain = estimate_client_bytes(&samples[1]).unwrap();
        assert!(samples[0].len() < samples[1].len());
        // The deflated save counts its own bytes plus what its columns inflate to.
        assert!(saved.bytes >= plain.bytes, "{saved:?} {plain:?}");
        assert_eq!((saved.ops, saved.changes), (plain.ops, plain.changes));
    }

    #[test]
    fn refuses_what_is_not_automerge() {
        for bytes in
            [&b"hello world"[..], &[0x85, 0x6f, 0x4a, 0x83, 0, 0, 0, 0, 9, 0], &[0x85, 0x6f, 0x4a]]
        {
            assert!(
                matches!(estimate_client_bytes(bytes), Err(Error::NotAutomerge(_))),
                "{bytes:?}"
            );
        }
        // A chunk whose length runs past the input.
        let mut saved = doc(3).save();
        saved.truncate(saved.len() - 1);
        assert!(matches!(estimate_client_bytes(&saved), Err(Error::NotAutomerge(_))));
        // Trailing garbage after a good chunk.
        let mut saved = doc(3).save();
        saved.extend_from_slice(b"junk");
        assert!(matches!(estimate_client_bytes(&saved), Err(Error::NotAutomerge(_))));
    }

    #[test]
    fn a_stored_value_is_estimated_from_its_payload() {
        let mut d = doc(40);
        let saved = d.save();
        let summary = Summary { change_count: 40, op_count: 1000, heads: Vec::new() };
        assert_eq!(estimate_stored(&summary, &saved), estimate_client_bytes(&saved).unwrap());
        // A payload that cannot be read falls back on the header, at the cost of
        // operations applied as changes: above what a document of them costs.
        let fallback = estimate_stored(&summary, b"junk");
        assert_eq!(fallback.ops, 1000 * costs::CHANGE_ROW);
        assert!(fallback.peak_bytes() > estimate_client_bytes(&saved).unwrap().peak_bytes());
    }

    #[test]
    fn the_costs_follow_what_makes_loads_expensive() {
        // Marks cost more in one big change than spread over many small ones.
        let small =
            Counts { doc_ops: 10_000, doc_marks: 100, doc_changes: 1_000, ..Counts::default() };
        let big = Counts { doc_changes: 1, ..small.clone() };
        let cost = |c: &Counts| c.estimate().ops;
        assert!(cost(&big) > cost(&small));
        // A change row without operations (change columns claiming changes that hold
        // nothing) costs little; one with operations costs a rebuilt change.
        let empty = Counts { doc_changes: 1_000, ..Counts::default() };
        assert_eq!(cost(&empty), 1_000 * costs::DOCUMENT_CHANGE_ROW);
        // Scattered insertions cost more than typing, overwritten operations more than
        // those still visible.
        let text = Counts { doc_ops: 1_000, doc_inserts: 1_000, ..Counts::default() };
        let scattered = Counts { doc_element_bytes: 3_000, ..text.clone() };
        let overwritten = Counts { doc_succ: 1_000, ..text.clone() };
        assert!(cost(&scattered) > cost(&text) && cost(&overwritten) > cost(&text));
        // Merging applies the other side's changes: far more than reading it.
        let read = text.estimate();
        assert!(estimate_applied(&read).ops >= 8 * read.ops);
    }

    #[test]
    fn peak_bytes_saturates() {
        let estimate = LoadEstimate { ops: u64::MAX, changes: u64::MAX, bytes: u64::MAX };
        assert_eq!(estimate.peak_bytes(), u64::MAX);
    }

    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        let samples = samples();
        (
            0..samples.len(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..8),
        )
            .prop_map(move |(i, edits)| {
                let mut bytes = samples[i].clone();
                for (at, byte, kind) in edits {
                    if bytes.is_empty() {
                        break;
                    }
                    let at = at.index(bytes.len());
                    match kind {
                        0 => bytes[at] = byte,
                        1 => bytes.truncate(at),
                        _ => bytes.insert(at, byte),
                    }
                }
                bytes
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn never_panics(bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..512),
            prop::collection::vec(any::<u8>(), 0..64).prop_map(|tail| {
                let mut bytes = vec![0x85, 0x6f, 0x4a, 0x83, 1, 2, 3, 4];
                bytes.extend(tail);
                bytes
            }),
            mutated(),
        ]) {
            if let Ok(estimate) = estimate_client_bytes(&bytes) {
                let _ = estimate.peak_bytes();
            }
        }
    }
}
