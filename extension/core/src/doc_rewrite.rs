//! Writing one column of a document chunk anew: what a repair needs to get a save whose
//! mark order the loader refuses past the loader (see [`repair`](crate::repair)). The
//! columns are read as [`doc_ops`](crate::doc_ops) reads them.

use std::borrow::Cow;

use crate::doc_ops::{corrupt, inflate, spec, Rle};
use crate::{chunk, leb128, Error};

/// The save `save` with the operation at `row` (in document order) given the mark name
/// `name`, which makes a mark end a mark begin: how a repair gets a save whose mark order
/// the loader refuses past the loader (see [`repair`](crate::repair)). Every other byte of
/// the chunk is kept; the mark-name column is written anew, uncompressed, and the chunk's
/// length and checksum follow.
pub fn with_mark_name_at(save: &[u8], row: usize, name: &str) -> Result<Vec<u8>, Error> {
    let (chunk_type, body, _) = chunk::split_first(save)?;
    if chunk_type != chunk::DOCUMENT {
        return Err(corrupt("not a document chunk"));
    }
    let mut rest = body;
    let uleb = |rest: &mut &[u8]| {
        let (value, after) = leb128::split_uleb(rest).ok_or_else(|| corrupt("truncated"))?;
        *rest = after;
        Ok::<u64, Error>(value)
    };
    let skip = |rest: &mut &[u8], n: u64| {
        let n = usize::try_from(n).ok().filter(|n| *n <= rest.len());
        *rest = &rest[n.ok_or_else(|| corrupt("truncated"))?..];
        Ok::<(), Error>(())
    };
    for _ in 0..uleb(&mut rest)? {
        let len = uleb(&mut rest)?;
        skip(&mut rest, len)?;
    }
    let heads = uleb(&mut rest)?;
    skip(&mut rest, heads.saturating_mul(32))?;
    let specs = |rest: &mut &[u8]| {
        (0..uleb(rest)?).map(|_| Ok((uleb(rest)?, uleb(rest)?))).collect::<Result<Vec<_>, _>>()
    };
    let change_specs = specs(&mut rest)?;
    let op_specs_at = body.len() - rest.len();
    let op_specs = specs(&mut rest)?;
    let change_data_at = body.len() - rest.len();
    skip(&mut rest, change_specs.iter().map(|(_, len)| len).sum())?;
    let change_data = &body[change_data_at..body.len() - rest.len()];
    let mut columns = Vec::with_capacity(op_specs.len() + 1);
    for (spec, len) in op_specs {
        let at = body.len() - rest.len();
        skip(&mut rest, len)?;
        columns.push((spec, Cow::Borrowed(&body[at..body.len() - rest.len()])));
    }
    let tail = rest;
    let is_mark_name = |spec: u64| spec & !u64::from(spec::DEFLATE) == u64::from(spec::MARK_NAME);
    let mut names: Vec<Option<&str>> = Vec::new();
    let inflated;
    if let Some((spec, data)) = columns.iter().find(|(spec, _)| is_mark_name(*spec)) {
        inflated = inflate(*spec as u32, data)?;
        let mut column = Rle::<&str>::new(&inflated);
        while let Some(value) = column.next()? {
            names.push(value);
        }
    }
    // The loader wants a row in every column for each operation: the id column has one.
    let (id_spec, id_data) = columns
        .iter()
        .find(|(spec, _)| *spec & !u64::from(spec::DEFLATE) == u64::from(spec::ID_ACTOR))
        .ok_or_else(|| corrupt("no operation ids"))?;
    let ids = inflate(*id_spec as u32, id_data)?;
    let mut rows = 0;
    let mut id_column = Rle::<u64>::new(&ids);
    while id_column.next()?.is_some() {
        rows += 1;
    }
    if row >= rows {
        return Err(corrupt("no operation at that row"));
    }
    names.resize(rows.max(names.len()), None);
    names[row] = Some(name);
    let encoded = rle_strings(&names);
    columns.retain(|(spec, _)| !is_mark_name(*spec));
    let at = columns.partition_point(|(spec, _)| *spec < u64::from(spec::MARK_NAME));
    columns.insert(at, (u64::from(spec::MARK_NAME), Cow::Owned(encoded)));

    let mut new_body = body[..op_specs_at].to_vec();
    leb128::write_uleb(&mut new_body, columns.len() as u64);
    for (spec, data) in &columns {
        leb128::write_uleb(&mut new_body, *spec);
        leb128::write_uleb(&mut new_body, data.len() as u64);
    }
    new_body.extend_from_slice(change_data);
    for (_, data) in &columns {
        new_body.extend_from_slice(data);
    }
    new_body.extend_from_slice(tail);
    Ok(chunk::framed(chunk::DOCUMENT, &new_body))
}

/// A run-length encoded string column, as Automerge writes one: a run of nulls as 0 and
/// its length, a value repeated as its count and the value, other values as minus their
/// count and each.
fn rle_strings(values: &[Option<&str>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut literals: Vec<&str> = Vec::new();
    let flush = |out: &mut Vec<u8>, literals: &mut Vec<&str>| {
        if literals.is_empty() {
            return;
        }
        leb128::write_sleb(out, -(literals.len() as i64));
        for value in literals.drain(..) {
            leb128::write_uleb(out, value.len() as u64);
            out.extend_from_slice(value.as_bytes());
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
                leb128::write_uleb(&mut out, value.len() as u64);
                out.extend_from_slice(value.as_bytes());
            }
            Some(value) => literals.push(value),
        }
        at += run;
    }
    flush(&mut out, &mut literals);
    out
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
