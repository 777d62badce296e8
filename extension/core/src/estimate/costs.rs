//! The cost model: what any load holds, what each kind of row costs at the peak, in bytes,
//! and how the [`Counts`] of rows weigh into a [`LoadEstimate`]. The costs were fitted to
//! measured peaks (`tests/estimate_peaks.rs`): a linear program chose the costs that keep
//! every measured input at or above its peak and the realistic documents as close to it as
//! it can.

use super::{Counts, LoadEstimate};

/// Memory of any load, however small.
pub const BASE_BYTES: u64 = 11 << 10;
/// Bytes a load holds once it applies any change as a change: what applying sets up (a
/// fuzzed input of two small changes reached 58 kB).
pub const APPLYING_BYTES: u64 = 64 << 10;
/// Bytes a load holds at its peak per change applied as a change, besides its operations.
pub const BYTES_PER_CHANGE: u64 = 2 << 10;
/// Bytes a load holds at its peak per input byte and per byte that deflated data inflates
/// to: the copies a load makes of them (up to seven of a deflated document column).
pub const BYTES_PER_BYTE: u64 = 8;

/// Any row of the operation columns of the first document chunk, and each of its
/// actors and columns.
pub const DOCUMENT_ROW: u64 = 85;
/// Extra for each actor and column specification of the first document chunk.
pub const DOCUMENT_ACTOR_OR_COLUMN: u64 = 64;
/// A successor entry of the first document chunk: an operation overwritten or deleted.
pub const DOCUMENT_SUCCESSOR: u64 = 246;
/// A byte of the key columns that reference list and text elements: sequences edited
/// at scattered places encode their references in more bytes, and Automerge keeps its
/// operations in columns much like these.
pub const DOCUMENT_ELEMENT_BYTE: u64 = 60;
/// A byte of the value columns.
pub const DOCUMENT_VALUE_BYTE: u64 = 1;
/// A mark operation of the first document chunk.
pub const DOCUMENT_MARK: u64 = 1_495;
/// Extra for a mark operation in a change of a thousand operations or more (in
/// proportion below that): marks in one big change, as a compacted rich text has them,
/// cost several times more.
pub const DOCUMENT_MARK_IN_BIG_CHANGE: u64 = 22_500;
/// A row of the change columns of the first document chunk.
pub const DOCUMENT_CHANGE_ROW: u64 = 16;
/// Extra for each of those changes that has operations (at most one per operation):
/// the change rebuilt to check its hash.
pub const DOCUMENT_CHANGE: u64 = 1_413;
/// A dependency entry of the first document chunk's changes.
pub const DOCUMENT_DEPENDENCY: u64 = 21;
/// An operation applied as part of a change (change chunks, bundles, later documents),
/// and an actor or column beyond those any change has.
pub const CHANGE_ROW: u64 = 1_056;
/// A predecessor entry of such an operation.
pub const CHANGE_PREDECESSOR: u64 = 96;
/// A dependency entry of a bundle's or later document's changes.
pub const CHANGE_DEPENDENCY: u64 = 96;
/// Applying a document's changes to another document (a merge) costs about what
/// applying them as change chunks does: this many times what reading them as a
/// document costs, for a plain text (the cheapest operations to read).
pub const APPLIED_PER_DOCUMENT_BYTE: u64 = 8;

impl LoadEstimate {
    /// The estimated peak of the Rust heap during the load, in bytes (saturating).
    pub fn peak_bytes(&self) -> u64 {
        let applying = if self.changes > 0 { APPLYING_BYTES } else { 0 };
        BASE_BYTES
            .saturating_add(applying)
            .saturating_add(self.ops)
            .saturating_add(BYTES_PER_CHANGE.saturating_mul(self.changes))
            .saturating_add(BYTES_PER_BYTE.saturating_mul(self.bytes))
    }
}

impl Counts {
    /// The estimate these counts make.
    pub fn estimate(&self) -> LoadEstimate {
        LoadEstimate {
            ops: self.weighted_ops(),
            changes: self.changes.saturating_sub(self.doc_changes),
            bytes: self.input.saturating_add(self.inflated).saturating_add(self.expanded),
        }
    }

    /// The rows, weighed by what each kind costs, in bytes.
    fn weighted_ops(&self) -> u64 {
        let mul = |rows: u64, cost: u64| rows.saturating_mul(cost);
        // Marks count extra in proportion to how many operations a change has, up to a
        // thousand: changes with no change rows at all count as one big change.
        let ops_per_change = self.doc_ops / self.doc_changes.max(1);
        let marks_in_big_changes =
            self.doc_marks.saturating_mul(ops_per_change.min(1000)).div_ceil(1000);
        [
            mul(self.doc_ops, DOCUMENT_ROW),
            mul(self.doc_other, DOCUMENT_ACTOR_OR_COLUMN),
            mul(self.doc_succ, DOCUMENT_SUCCESSOR),
            mul(self.doc_element_bytes, DOCUMENT_ELEMENT_BYTE),
            mul(self.doc_value_bytes, DOCUMENT_VALUE_BYTE),
            mul(self.doc_marks, DOCUMENT_MARK),
            mul(marks_in_big_changes, DOCUMENT_MARK_IN_BIG_CHANGE),
            mul(self.doc_changes, DOCUMENT_CHANGE_ROW),
            mul(self.doc_changes.min(self.doc_ops), DOCUMENT_CHANGE),
            mul(self.doc_deps, DOCUMENT_DEPENDENCY),
            mul(self.change_ops, CHANGE_ROW),
            mul(self.change_preds, CHANGE_PREDECESSOR),
            mul(self.change_deps, CHANGE_DEPENDENCY),
        ]
        .into_iter()
        .fold(0u64, u64::saturating_add)
    }
}
