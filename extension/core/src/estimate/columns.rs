//! Reading the chunks' columns (automerge 0.12, `storage/columns/`): each chunk's column
//! specifications and data, whose rows are counted by decoding run lengths only, never
//! values, deflated columns inflated as a stream through a small buffer.

use super::readers::{sleb, uleb, Bytes, Cursor, Inflate, Limited, Rewind};
use super::Counts;
use crate::Error;

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

pub(super) fn not_automerge(what: impl Into<String>) -> Error {
    Error::NotAutomerge(what.into())
}

fn truncated(what: &str) -> Error {
    not_automerge(format!("truncated chunk: {what} runs past the end"))
}

/// A document chunk: actors, heads, change and operation column specifications, change
/// and operation column data, head indexes.
pub(super) fn document(body: &[u8], first: bool, counts: &mut Counts) -> Result<(), Error> {
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
pub(super) fn bundle(body: &[u8], counts: &mut Counts) -> Result<(), Error> {
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
pub(super) fn change_body<S: Rewind>(src: &mut S, counts: &mut Counts) -> Result<(), Error> {
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
pub(super) struct ColumnSet {
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

impl Counts {
    pub(super) fn add(field: &mut u64, n: u64) {
        *field = field.saturating_add(n);
    }

    /// Adds what a document or bundle chunk holds.
    pub(super) fn add_columns(
        &mut self,
        as_document: bool,
        ops: &ColumnSet,
        changes: &ColumnSet,
        other: u64,
    ) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
