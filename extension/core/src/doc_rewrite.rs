//! Writing one column of a document chunk anew: what a repair needs to get a save whose
//! mark order the loader refuses past the loader (see [`repair`](crate::repair)). The
//! columns are read as [`doc_ops`](crate::doc_ops) reads them.

use crate::doc_ops::{corrupt, inflate, spec, DocumentChunk, Rle};
use crate::{chunk, leb128, Error};

/// The save `save` with the operation at `row` (in document order) given the mark name
/// `name`, which makes a mark end a mark begin: how a repair gets a save whose mark order
/// the loader refuses past the loader (see [`repair`](crate::repair)). Every other byte of
/// the chunk is kept; the mark-name column is written anew, uncompressed, and the chunk's
/// length and checksum follow.
pub fn with_mark_name_at(save: &[u8], row: usize, name: &str) -> Result<Vec<u8>, Error> {
    let document = DocumentChunk::split(save)?;
    let without_deflate = |spec: u32| spec & !spec::DEFLATE;
    let column = |wanted: u32| {
        let found = document.op_columns.iter().find(|(spec, _)| without_deflate(*spec) == wanted);
        found.map(|(spec, data)| inflate(*spec, data)).transpose()
    };
    // The loader wants a row in every column for each operation: the id column has one.
    let ids = column(spec::ID_ACTOR)?.ok_or_else(|| corrupt("no operation ids"))?;
    let mut rows = 0;
    let mut id_column = Rle::<u64>::new(&ids);
    while id_column.next()?.is_some() {
        rows += 1;
    }
    if row >= rows {
        return Err(corrupt("no operation at that row"));
    }
    let mut names: Vec<Option<&str>> = Vec::with_capacity(rows);
    let stored_names = column(spec::MARK_NAME)?;
    if let Some(stored_names) = &stored_names {
        let mut column = Rle::<&str>::new(stored_names);
        while let Some(value) = column.next()? {
            names.push(value);
        }
    }
    names.resize(rows.max(names.len()), None);
    names[row] = Some(name);
    let encoded = rle_strings(&names);

    let mut columns: Vec<(u32, &[u8])> = document
        .op_columns
        .iter()
        .copied()
        .filter(|(spec, _)| without_deflate(*spec) != spec::MARK_NAME)
        .collect();
    let at = columns.partition_point(|(spec, _)| *spec < spec::MARK_NAME);
    columns.insert(at, (spec::MARK_NAME, &encoded));
    let mut body = document.body[..document.op_specs_at].to_vec();
    leb128::write_uleb(&mut body, columns.len() as u64);
    for (spec, data) in &columns {
        leb128::write_uleb(&mut body, u64::from(*spec));
        leb128::write_uleb(&mut body, data.len() as u64);
    }
    body.extend_from_slice(document.change_data);
    for (_, data) in &columns {
        body.extend_from_slice(data);
    }
    body.extend_from_slice(document.tail);
    Ok(chunk::framed(chunk::DOCUMENT, &body))
}

/// A run-length encoded column, as Automerge writes one (canonically: its loader refuses
/// other encodings of operation columns): a run of nulls as 0 and its length, a value
/// repeated as its count and the value, other values as minus their count and each,
/// written by `write`.
pub fn rle<T: PartialEq + Copy>(values: &[Option<T>], write: impl Fn(&mut Vec<u8>, T)) -> Vec<u8> {
    let mut out = Vec::new();
    let mut literals: Vec<T> = Vec::new();
    let flush = |out: &mut Vec<u8>, literals: &mut Vec<T>| {
        if literals.is_empty() {
            return;
        }
        leb128::write_sleb(out, -(literals.len() as i64));
        for value in literals.drain(..) {
            write(out, value);
        }
    };
    let mut at = 0;
    while at < values.len() {
        let run = values[at..].iter().take_while(|value| **value == values[at]).count();
        match values[at] {
            None => {
                flush(&mut out, &mut literals);
                leb128::write_sleb(&mut out, 0);
                leb128::write_uleb(&mut out, run as u64);
            }
            Some(value) if run > 1 => {
                flush(&mut out, &mut literals);
                leb128::write_sleb(&mut out, run as i64);
                write(&mut out, value);
            }
            Some(value) => literals.push(value),
        }
        at += run;
    }
    flush(&mut out, &mut literals);
    out
}

/// A delta column: the run-length encoded differences from the value before (nulls leave
/// the value before as it was).
pub fn delta(values: impl IntoIterator<Item = Option<i64>>) -> Vec<u8> {
    let mut last = 0i64;
    let deltas: Vec<Option<i64>> = values
        .into_iter()
        .map(|value| {
            value.map(|value| {
                let difference = value.wrapping_sub(last);
                last = value;
                difference
            })
        })
        .collect();
    rle(&deltas, leb128::write_sleb)
}

/// A string column (see [`rle`]).
fn rle_strings(values: &[Option<&str>]) -> Vec<u8> {
    rle(values, |out, value| {
        leb128::write_uleb(out, value.len() as u64);
        out.extend_from_slice(value.as_bytes());
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc_ops::{action, DocumentOps, RawOp};
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ObjType, ROOT};

    /// A mark end given a name is a mark begin; every other row reads as it did, and the
    /// chunk's checksum is right (Automerge loads it, its heads aside).
    #[test]
    fn a_mark_name_written_at_one_row_changes_that_row_alone() {
        use automerge::marks::{ExpandMark, Mark};
        let mut doc = AutoCommit::new();
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "hello world").unwrap();
        doc.mark(&text, Mark::new("bold".into(), true, 0, 5), ExpandMark::After).unwrap();
        let save = doc.save();
        let original = DocumentOps::read(&save).unwrap();
        let before: Vec<RawOp<'_>> = original.iter().collect::<Result<_, _>>().unwrap();
        let end = before
            .iter()
            .position(|op| op.action == action::MARK && op.mark_name.is_none())
            .unwrap();
        let rewritten = with_mark_name_at(&save, end, "x").unwrap();
        let ops = DocumentOps::read(&rewritten).unwrap();
        let after: Vec<RawOp<'_>> = ops.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(after.len(), before.len());
        for (row, (a, b)) in before.iter().zip(&after).enumerate() {
            match row == end {
                true => assert_eq!(RawOp { mark_name: Some("x"), ..a.clone() }, *b),
                false => assert_eq!(a, b),
            }
        }
        assert!(automerge::Automerge::load_unverified_heads(&rewritten).is_ok());
        assert!(with_mark_name_at(&save, before.len(), "x").is_err());
    }
}
