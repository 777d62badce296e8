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

use std::io::{ErrorKind, Read};

use flate2::bufread::DeflateDecoder;

use crate::format::{Summary, AUTOMERGE_MAGIC};
use crate::Error;

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

/// The default of `pg_automerge.max_load_memory`: 2 GiB, as the anchor project's. It admits
/// the largest documents the Operations page calls ordinary, each with room to spare: the
/// 3 MB plain text with its 96,000 changes (the largest estimate of them, see
/// `tests/estimate_peaks.rs` and docs/operations.md), the 1.26 MB rich text and the 1.07 MB
/// list of maps.
pub const DEFAULT_MAX_LOAD_MEMORY: u64 = 2 << 30;

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

/// What each kind of row costs at the peak, in bytes, fitted to measured peaks
/// (`tests/estimate_peaks.rs`): a linear program chose the costs that keep every measured
/// input at or above its peak and the realistic documents as close to it as it can.
pub mod costs {
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
}

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
        let (chunk_type, body, after) = chunk(rest)?;
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

pub(crate) const DOCUMENT: u8 = 0;
pub(crate) const CHANGE: u8 = 1;
pub(crate) const COMPRESSED_CHANGE: u8 = 2;
const BUNDLE: u8 = 3;
const HASH_LEN: u64 = 32;
/// Other actors and columns of a change chunk that the cost of a change covers.
const FREE_ACTORS: u64 = 16;
const FREE_COLUMNS: u64 = 32;

const DEFLATE_BIT: u32 = 0b1000;
const TYPE_GROUP: u32 = 0;
/// The id of the insert column, in documents, changes and bundles alike.
const INSERT_COLUMN_ID: u32 = 3;
/// The id of the action column, in documents, changes and bundles alike.
const ACTION_COLUMN_ID: u32 = 4;
const ACTION_MARK: u64 = 7;
/// The id of the key columns (a map key, or the list or text element an op refers to).
const KEY_COLUMN_ID: u32 = 1;
/// The id of the value columns (metadata and raw bytes).
const VALUE_COLUMN_ID: u32 = 5;
const TYPE_INTEGER: u32 = 2;
const TYPE_BOOLEAN: u32 = 4;
const TYPE_STRING: u32 = 5;
const TYPE_VALUE: u32 = 7;

fn not_automerge(what: impl Into<String>) -> Error {
    Error::NotAutomerge(what.into())
}

fn truncated(what: &str) -> Error {
    not_automerge(format!("truncated chunk: {what} runs past the end"))
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

impl Counts {
    /// The estimate these counts make.
    pub fn estimate(&self) -> LoadEstimate {
        LoadEstimate {
            ops: self.weighted_ops(),
            changes: self.changes.saturating_sub(self.doc_changes),
            bytes: self.input.saturating_add(self.inflated).saturating_add(self.expanded),
        }
    }

    fn add(field: &mut u64, n: u64) {
        *field = field.saturating_add(n);
    }

    /// The rows, weighed by what each kind costs, in bytes.
    fn weighted_ops(&self) -> u64 {
        use costs::*;
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

    /// Adds what a document or bundle chunk holds.
    fn add_columns(&mut self, as_document: bool, ops: &ColumnSet, changes: &ColumnSet, other: u64) {
        Self::add(&mut self.changes, changes.outer);
        Self::add(&mut self.expanded, ops.expanded.saturating_add(changes.expanded));
        if as_document {
            self.doc_changes = changes.outer;
            self.doc_bytes = ops.bytes.saturating_add(changes.bytes);
            self.doc_other = other;
            self.doc_value_bytes = ops.value_bytes;
            self.doc_element_bytes = ops.element_bytes;
            self.doc_marks = ops.marks;
            self.doc_objects = ops.objects;
            Self::add(&mut self.doc_ops, ops.outer.saturating_add(other));
            Self::add(&mut self.doc_inserts, ops.inserts);
            Self::add(&mut self.doc_succ, ops.inner);
            Self::add(&mut self.doc_deps, changes.inner);
        } else {
            Self::add(&mut self.change_ops, ops.outer.saturating_add(other));
            Self::add(&mut self.change_preds, ops.inner);
            Self::add(&mut self.change_deps, changes.inner);
        }
    }
}

/// The chunks of `input` in order, each as its type and its whole bytes (header included);
/// a malformed chunk is an error, and the last item.
pub(crate) fn chunks(input: &[u8]) -> impl Iterator<Item = Result<(u8, &[u8]), Error>> {
    let mut rest = Some(input);
    std::iter::from_fn(move || {
        let current = rest.filter(|bytes| !bytes.is_empty())?;
        match chunk(current) {
            Ok((chunk_type, _, after)) => {
                rest = Some(after);
                Some(Ok((chunk_type, &current[..current.len() - after.len()])))
            }
            Err(err) => {
                rest = None;
                Some(Err(err))
            }
        }
    })
}

/// Splits off the first chunk: its type, its data and the rest of the input.
pub(crate) fn chunk(input: &[u8]) -> Result<(u8, &[u8], &[u8]), Error> {
    if !input.starts_with(&AUTOMERGE_MAGIC[..input.len().min(4)]) {
        return Err(not_automerge("missing the Automerge magic bytes"));
    }
    if input.len() < 9 {
        return Err(not_automerge("truncated chunk header"));
    }
    let chunk_type = input[8];
    let mut cursor = Cursor::new(&input[9..]);
    let len = uleb(&mut cursor).ok_or_else(|| not_automerge("bad chunk length"))?;
    let data = &input[9 + cursor.pos..];
    match usize::try_from(len) {
        Ok(len) if len <= data.len() => Ok((chunk_type, &data[..len], &data[len..])),
        _ => Err(truncated("the chunk")),
    }
}

/// A document chunk: actors, heads, change and operation column specifications, change
/// and operation column data, head indexes.
fn document(body: &[u8], first: bool, counts: &mut Counts) -> Result<(), Error> {
    let mut c = Cursor::new(body);
    let actors = actor_list(&mut c)?;
    hash_list(&mut c)?;
    let change_specs = c.pos;
    let (change_cols, change_len) = spec_list(&mut c)?;
    let op_specs = c.pos;
    let (op_cols, op_len) = spec_list(&mut c)?;
    let change_data = c.take(change_len).ok_or_else(|| truncated("change column data"))?;
    let op_data = c.take(op_len).ok_or_else(|| truncated("operation column data"))?;
    let changes = sliced_columns(&body[change_specs..], change_data, counts)?;
    let ops = sliced_columns(&body[op_specs..], op_data, counts)?;
    let other = actors.saturating_add(change_cols).saturating_add(op_cols);
    counts.add_columns(first, &ops, &changes, other);
    Ok(())
}

/// A bundle chunk: dependencies, actors, change columns (specifications then data), then
/// operation columns (specifications then data).
fn bundle(body: &[u8], counts: &mut Counts) -> Result<(), Error> {
    let mut c = Cursor::new(body);
    hash_list(&mut c)?;
    let actors = actor_list(&mut c)?;
    let change_specs = c.pos;
    let (change_cols, change_len) = spec_list(&mut c)?;
    let change_data = c.take(change_len).ok_or_else(|| truncated("change column data"))?;
    let op_specs = c.pos;
    let (op_cols, op_len) = spec_list(&mut c)?;
    let op_data = c.take(op_len).ok_or_else(|| truncated("operation column data"))?;
    let changes = sliced_columns(&body[change_specs..], change_data, counts)?;
    let ops = sliced_columns(&body[op_specs..], op_data, counts)?;
    let other = actors.saturating_add(change_cols).saturating_add(op_cols);
    counts.add_columns(false, &ops, &changes, other);
    Ok(())
}

/// The body of a change chunk, read from the chunk or from its inflated stream: the
/// dependencies, actor, sequence number, start op, time, message, other actors, then the
/// operation column specifications and data. Extra bytes after the columns are left.
fn change_body<S: Rewind>(src: &mut S, counts: &mut Counts) -> Result<(), Error> {
    hash_list(src)?;
    actor(src)?;
    uleb(src).ok_or_else(|| truncated("the sequence number"))?;
    uleb(src).ok_or_else(|| truncated("the start op"))?;
    sleb(src).ok_or_else(|| truncated("the time"))?;
    let message = uleb(src).ok_or_else(|| truncated("the message"))?;
    if src.skip(message) != message {
        return Err(truncated("the message"));
    }
    let other_actors = actor_list(src)?;
    let specs_at = src.pos();
    let (cols, _) = spec_list(src)?;
    // A second reader walks the specifications again, in step with the data.
    let mut specs = src.rewind(specs_at);
    uleb(&mut specs);
    let mut set = ColumnSet::default();
    for _ in 0..cols {
        let (spec, len) = spec(&mut specs)?;
        if spec & DEFLATE_BIT != 0 {
            return Err(not_automerge("a change chunk has a deflated column"));
        }
        let mut column = Limited { inner: &mut *src, left: len };
        set.add(spec, &mut column)?;
        let left = column.left;
        if src.skip(left) != left {
            return Err(truncated("operation column data"));
        }
    }
    Counts::add(&mut counts.changes, 1);
    // What a change holds per actor and per column is in the cost of a change, up to
    // many more of them than any change has; beyond that they count as rows.
    let floods =
        other_actors.saturating_sub(FREE_ACTORS).saturating_add(cols.saturating_sub(FREE_COLUMNS));
    Counts::add(&mut counts.change_ops, set.outer.saturating_add(floods));
    Counts::add(&mut counts.change_preds, set.inner);
    Counts::add(&mut counts.expanded, set.expanded);
    Ok(())
}

/// Counts the columns whose specifications start `specs` (count first) and whose data is
/// `data`, inflating the deflated ones.
fn sliced_columns(specs: &[u8], data: &[u8], counts: &mut Counts) -> Result<ColumnSet, Error> {
    let mut specs = Cursor::new(specs);
    let cols = uleb(&mut specs).ok_or_else(|| truncated("column specifications"))?;
    let mut set = ColumnSet::default();
    let mut at = 0usize;
    for _ in 0..cols {
        let (spec, len) = spec(&mut specs)?;
        // `spec_list` checked that the lengths add up to at most `data.len()`.
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| at.checked_add(len))
            .filter(|end| *end <= data.len())
            .ok_or_else(|| truncated("column data"))?;
        let column = &data[at..end];
        at = end;
        if spec & DEFLATE_BIT != 0 {
            let mut inflate = Inflate::new(column);
            set.add(spec, &mut inflate)?;
            inflate.skip(u64::MAX);
            counts.inflated = counts.inflated.saturating_add(inflate.produced());
            set.bytes = set.bytes.saturating_add(inflate.produced());
            set.column_bytes(spec, inflate.produced());
        } else {
            set.add(spec, &mut Cursor::new(column))?;
            set.bytes = set.bytes.saturating_add(len);
            set.column_bytes(spec, len);
        }
    }
    Ok(set)
}

/// Row counts of a set of columns. Rows of a group's inner columns (the columns sharing
/// the id of the group column before them: predecessors, successors, dependencies) are
/// kept apart from the rows of the others, which all have one row per op (or change).
#[derive(Debug, Default)]
struct ColumnSet {
    outer: u64,
    inner: u64,
    /// Trues of the insert column: operations that insert into a list or text.
    inserts: u64,
    /// Bytes that runs of repeated strings expand to.
    expanded: u64,
    /// Bytes of column data, once inflated.
    bytes: u64,
    /// Bytes of the value columns, once inflated.
    value_bytes: u64,
    /// Bytes of the key columns that reference list and text elements, once inflated.
    element_bytes: u64,
    /// Rows of the action column that are marks, and that make objects.
    marks: u64,
    objects: u64,
    group: Option<u32>,
}

impl ColumnSet {
    /// Counts the bytes of a column by what it holds.
    fn column_bytes(&mut self, spec: u32, len: u64) {
        let (id, col_type) = (spec >> 4, spec & 0b111);
        if id == VALUE_COLUMN_ID {
            self.value_bytes = self.value_bytes.saturating_add(len);
        } else if id == KEY_COLUMN_ID && col_type != TYPE_STRING {
            self.element_bytes = self.element_bytes.saturating_add(len);
        }
    }

    fn add(&mut self, spec: u32, data: &mut impl Bytes) -> Result<(), Error> {
        let (id, col_type) = (spec >> 4, spec & 0b111);
        let rows = match col_type {
            TYPE_VALUE => 0,
            TYPE_BOOLEAN => {
                let (rows, trues) = boolean_rows(data)?;
                if id == INSERT_COLUMN_ID && self.group != Some(id) {
                    self.inserts = self.inserts.max(trues);
                }
                rows
            }
            TYPE_STRING => {
                let (rows, expanded) = rle_rows(data, true)?;
                self.expanded = self.expanded.saturating_add(expanded);
                rows
            }
            TYPE_GROUP => {
                let (rows, claimed) = rle_rows(data, false)?;
                self.inner = self.inner.max(claimed);
                rows
            }
            TYPE_INTEGER if id == ACTION_COLUMN_ID && self.group != Some(id) => {
                let (rows, marks, objects) = action_rows(data)?;
                self.marks = self.marks.max(marks);
                self.objects = self.objects.max(objects);
                rows
            }
            _ => rle_rows(data, false)?.0,
        };
        if col_type == TYPE_GROUP {
            self.group = Some(id);
            self.outer = self.outer.max(rows);
        } else if self.group == Some(id) {
            self.inner = self.inner.max(rows);
        } else {
            self.group = None;
            self.outer = self.outer.max(rows);
        }
        Ok(())
    }
}

/// Rows of a run-length encoded column: runs of a signed count `n`, then one value
/// repeated `n` times (n > 0), `-n` literal values (n < 0), or an unsigned count of nulls
/// (n = 0). Values are uLEB/sLEB128 numbers, or length-prefixed strings. A column that
/// ends inside a run (a number cut short, a string longer than what is left) is refused:
/// Automerge fails on it too, but only after allocating what the string claims, or, for
/// some columns of a bundle, not at all.
///
/// Also returns the sum of the values, each counted as often as it repeats. For strings
/// that is the bytes that runs of repeated strings expand to: a load that decodes the
/// operations makes a string for every row (a key, a mark name, a message), so one long
/// key repeated by a run costs its length on every row. For the counts of a group
/// column, it is how many entries the group's rows claim, which a load iterates over and
/// reserves room for whatever the inner columns hold.
fn rle_rows(data: &mut impl Bytes, strings: bool) -> Result<(u64, u64), Error> {
    let mut data = Tracked { inner: data, took: false };
    let (mut rows, mut sum) = (0u64, 0u64);
    loop {
        data.took = false;
        let Some(n) = sleb(&mut data) else {
            return if data.took { Err(cut_short()) } else { Ok((rows, sum)) };
        };
        if n > 0 {
            rows = rows.saturating_add(n as u64);
            let value = skip_value(&mut data, strings).ok_or_else(cut_short)?;
            sum = sum.saturating_add(value.saturating_mul(n as u64));
        } else if n < 0 {
            for _ in 0..n.unsigned_abs() {
                let value = skip_value(&mut data, strings).ok_or_else(cut_short)?;
                // A literal string's bytes are in the input already.
                if !strings {
                    sum = sum.saturating_add(value);
                }
                rows = rows.saturating_add(1);
            }
        } else {
            rows = rows.saturating_add(uleb(&mut data).ok_or_else(cut_short)?);
        }
    }
}

/// Rows of the action column (run-length encoded numbers, as [`rle_rows`] reads them), and
/// how many of them are marks and how many make objects (a map, list, text or table).
fn action_rows(data: &mut impl Bytes) -> Result<(u64, u64, u64), Error> {
    let mut data = Tracked { inner: data, took: false };
    let (mut rows, mut marks, mut objects) = (0u64, 0u64, 0u64);
    let count = |value: u64, n: u64, marks: &mut u64, objects: &mut u64| match value {
        ACTION_MARK => *marks = marks.saturating_add(n),
        0 | 2 | 4 | 6 => *objects = objects.saturating_add(n),
        _ => {}
    };
    loop {
        data.took = false;
        let Some(n) = sleb(&mut data) else {
            return if data.took { Err(cut_short()) } else { Ok((rows, marks, objects)) };
        };
        if n > 0 {
            rows = rows.saturating_add(n as u64);
            let value = skip_value(&mut data, false).ok_or_else(cut_short)?;
            count(value, n as u64, &mut marks, &mut objects);
        } else if n < 0 {
            for _ in 0..n.unsigned_abs() {
                let value = skip_value(&mut data, false).ok_or_else(cut_short)?;
                count(value, 1, &mut marks, &mut objects);
                rows = rows.saturating_add(1);
            }
        } else {
            rows = rows.saturating_add(uleb(&mut data).ok_or_else(cut_short)?);
        }
    }
}

/// Rows of a boolean column, alternating unsigned counts of falses and trues, and how
/// many are true. A count cut short is refused, as in [`rle_rows`].
fn boolean_rows(data: &mut impl Bytes) -> Result<(u64, u64), Error> {
    let mut data = Tracked { inner: data, took: false };
    let (mut rows, mut trues) = (0u64, 0u64);
    let mut value = false;
    loop {
        data.took = false;
        let Some(n) = uleb(&mut data) else {
            return if data.took { Err(cut_short()) } else { Ok((rows, trues)) };
        };
        rows = rows.saturating_add(n);
        if value {
            trues = trues.saturating_add(n);
        }
        value = !value;
    }
}

fn cut_short() -> Error {
    not_automerge("a column ends inside a value")
}

/// Skips a value: a length-prefixed string (returning its length) or a LEB128 number
/// (returning it, read as unsigned). `None` if the data ends first.
fn skip_value(data: &mut impl Bytes, string: bool) -> Option<u64> {
    let value = uleb(data)?;
    (!string || data.skip(value) == value).then_some(value)
}

/// Reads through `inner`, noting whether a read took any byte: a number that took bytes
/// and still failed was cut short, which is not the same as the data's end.
struct Tracked<'a, B> {
    inner: &'a mut B,
    took: bool,
}

impl<B: Bytes> Bytes for Tracked<'_, B> {
    fn byte(&mut self) -> Option<u8> {
        let byte = self.inner.byte();
        self.took |= byte.is_some();
        byte
    }

    fn skip(&mut self, n: u64) -> u64 {
        let skipped = self.inner.skip(n);
        self.took |= skipped > 0;
        skipped
    }
}

/// A list of column specifications: a count, then (uLEB spec, uLEB length) pairs.
/// Returns the count and the sum of the lengths.
fn spec_list(src: &mut impl Bytes) -> Result<(u64, u64), Error> {
    let cols = uleb(src).ok_or_else(|| truncated("column specifications"))?;
    let mut total = 0u64;
    for _ in 0..cols {
        let (_, len) = spec(src)?;
        total = total.saturating_add(len);
    }
    Ok((cols, total))
}

fn spec(src: &mut impl Bytes) -> Result<(u32, u64), Error> {
    let spec = uleb(src).ok_or_else(|| truncated("a column specification"))?;
    let spec = u32::try_from(spec).map_err(|_| not_automerge("column specification too large"))?;
    let len = uleb(src).ok_or_else(|| truncated("a column length"))?;
    Ok((spec, len))
}

/// A count, then that many length-prefixed actor ids. Returns the count.
fn actor_list(src: &mut impl Bytes) -> Result<u64, Error> {
    let n = uleb(src).ok_or_else(|| truncated("the actor list"))?;
    for _ in 0..n {
        actor(src)?;
    }
    Ok(n)
}

fn actor(src: &mut impl Bytes) -> Result<(), Error> {
    let len = uleb(src).ok_or_else(|| truncated("an actor id"))?;
    if src.skip(len) != len {
        return Err(truncated("an actor id"));
    }
    Ok(())
}

/// A count, then that many 32-byte change hashes.
fn hash_list(src: &mut impl Bytes) -> Result<(), Error> {
    let n = uleb(src).ok_or_else(|| truncated("a list of change hashes"))?;
    for _ in 0..n {
        if src.skip(HASH_LEN) != HASH_LEN {
            return Err(truncated("a list of change hashes"));
        }
    }
    Ok(())
}

/// An unsigned LEB128 number of at most ten bytes; one too large for 64 bits saturates.
fn uleb(src: &mut impl Bytes) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let b = src.byte()?;
        let bits = u64::from(b & 0x7f);
        if shift < 64 {
            if shift == 63 && bits > 1 {
                value = u64::MAX;
            } else {
                value |= bits << shift;
            }
        }
        if b & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
        if shift >= 70 {
            return None;
        }
    }
}

/// A signed LEB128 number of at most ten bytes.
fn sleb(src: &mut impl Bytes) -> Option<i64> {
    let mut value = 0i64;
    let mut shift = 0u32;
    loop {
        let b = src.byte()?;
        if shift < 64 {
            value |= i64::from(b & 0x7f) << shift;
        }
        shift += 7;
        if b & 0x80 == 0 {
            if shift < 64 && b & 0x40 != 0 {
                value |= -1i64 << shift;
            }
            return Some(value);
        }
        if shift >= 70 {
            return None;
        }
    }
}

/// Bytes read one at a time, from a slice or an inflating stream.
trait Bytes {
    fn byte(&mut self) -> Option<u8>;
    /// Skips up to `n` bytes; returns how many there were.
    fn skip(&mut self, n: u64) -> u64;
}

/// A reader that can start a second reader at an earlier position of the same bytes.
trait Rewind: Bytes + Sized {
    fn pos(&self) -> u64;
    fn rewind(&self, pos: u64) -> Self;
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.pos.checked_add(n).filter(|end| *end <= self.data.len())?;
        let taken = &self.data[self.pos..end];
        self.pos = end;
        Some(taken)
    }
}

impl Bytes for Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> u64 {
        let left = (self.data.len() - self.pos) as u64;
        let n = n.min(left);
        self.pos += n as usize;
        n
    }
}

impl Rewind for Cursor<'_> {
    fn pos(&self) -> u64 {
        self.pos as u64
    }

    fn rewind(&self, pos: u64) -> Self {
        Cursor { data: self.data, pos: (pos as usize).min(self.data.len()) }
    }
}

/// At most `left` bytes of another reader.
struct Limited<'s, S> {
    inner: &'s mut S,
    left: u64,
}

impl<S: Bytes> Bytes for Limited<'_, S> {
    fn byte(&mut self) -> Option<u8> {
        if self.left == 0 {
            return None;
        }
        let b = self.inner.byte()?;
        self.left -= 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> u64 {
        let skipped = self.inner.skip(n.min(self.left));
        self.left -= skipped;
        skipped
    }
}

const INFLATE_BUFFER: usize = 16 << 10;

/// Raw DEFLATE data inflated through a fixed buffer. A corrupt stream ends where the
/// damage is, as Automerge's own inflating does (it then refuses the chunk).
struct Inflate<'a> {
    compressed: &'a [u8],
    decoder: DeflateDecoder<&'a [u8]>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes handed out or skipped.
    pos: u64,
    ended: bool,
}

impl<'a> Inflate<'a> {
    fn new(compressed: &'a [u8]) -> Self {
        Inflate {
            compressed,
            decoder: DeflateDecoder::new(compressed),
            buf: vec![0; INFLATE_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            pos: 0,
            ended: false,
        }
    }

    /// Everything inflated so far.
    fn produced(&self) -> u64 {
        self.pos + (self.end - self.start) as u64
    }
}

impl Bytes for Inflate<'_> {
    fn byte(&mut self) -> Option<u8> {
        if self.start == self.end && !self.refill() {
            return None;
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.pos += 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> u64 {
        let mut skipped = 0u64;
        while skipped < n {
            if self.start == self.end && !self.refill() {
                break;
            }
            let step = ((self.end - self.start) as u64).min(n - skipped);
            self.start += step as usize;
            self.pos += step;
            skipped += step;
        }
        skipped
    }
}

impl Inflate<'_> {
    fn refill(&mut self) -> bool {
        if self.ended {
            return false;
        }
        // A few kilobytes of DEFLATE can take seconds to inflate.
        crate::interrupts::check();
        loop {
            match self.decoder.read(&mut self.buf) {
                Ok(0) => {
                    self.ended = true;
                    return false;
                }
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                    return true;
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.ended = true;
                    return false;
                }
            }
        }
    }
}

impl Rewind for Inflate<'_> {
    fn pos(&self) -> u64 {
        self.pos
    }

    fn rewind(&self, pos: u64) -> Self {
        let mut again = Inflate::new(self.compressed);
        again.skip(pos);
        again
    }
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
    fn run_lengths_count_without_values() {
        // A repeated run of 5, a literal run of 2, a null run of 3; strings too.
        let rle = [5, 1, 0x7e, 1, 2, 0, 3];
        assert_eq!(rle_rows(&mut Cursor::new(&rle), false).unwrap(), (10, 5 + 1 + 2));
        let strings = [2, 1, b'a', 0x7f, 2, b'b', b'c', 0, 4];
        assert_eq!(rle_rows(&mut Cursor::new(&strings), true).unwrap(), (7, 2));
        // Alternating falses and trues.
        assert_eq!(boolean_rows(&mut Cursor::new(&[2, 3, 0, 4])).unwrap(), (9, 7));
        // A run of 2^62 in a few bytes.
        let mut big = Vec::new();
        let mut n = 1u64 << 62;
        while n >= 0x40 {
            big.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        big.push(n as u8);
        big.push(1);
        assert_eq!(rle_rows(&mut Cursor::new(&big), false).unwrap().0, 1 << 62);
    }

    #[test]
    fn a_column_cut_inside_a_value_is_refused() {
        let cut: [(&[u8], bool); 5] = [
            // A literal run of 3 with one value.
            (&[0x7d, 1], false),
            // A number whose last byte is missing.
            (&[2, 0x80], false),
            // A null run without its count.
            (&[0], false),
            // A string claiming 16 MiB, with three bytes left: Automerge would allocate
            // the 16 MiB before finding out.
            (&[1, 0x80, 0x80, 0x80, 0x08, b'a', b'b', b'c'], true),
            // A run length cut short.
            (&[0x80], true),
        ];
        for (column, strings) in cut {
            let result = rle_rows(&mut Cursor::new(column), strings);
            assert!(matches!(result, Err(Error::NotAutomerge(_))), "{column:?}: {result:?}");
        }
        // A boolean count cut short: Automerge's bundle decoder loops on it for ever.
        assert!(boolean_rows(&mut Cursor::new(&[1, 0xd0, 0xff])).is_err());
    }

    #[test]
    fn a_group_column_counts_the_entries_it_claims() {
        // Two ops, each claiming 2^20 predecessors, with no predecessor columns at all:
        // a load iterates over (and reserves room for) every claimed entry.
        let mut set = ColumnSet::default();
        let group = [2, 0x80, 0x80, 0x40];
        set.add(7 << 4 | TYPE_GROUP, &mut Cursor::new(&group)).unwrap();
        assert_eq!((set.outer, set.inner), (2, 2 << 20));
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
