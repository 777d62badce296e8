//! The operations of a document chunk (what `save()` writes), read straight from its
//! columns (automerge 0.12, `storage/document.rs` and `op_set2/columns.rs`) without
//! building Automerge's op set: one pass in document order, each row borrowed from the
//! column data, nothing kept per operation. The [`structure`](crate::structure) index is
//! built from it.
//!
//! A document stores every operation but deletions (a deleted operation lists the deletion
//! among its successors), sorted by object, then by key (map keys in order, sequence
//! elements in document order, each insertion followed by the operations that update its
//! element), then by operation id.

use std::borrow::Cow;
use std::io::Read;

use automerge::{ActorId, ChangeHash};
use smallvec::SmallVec;

use crate::{chunk, leb128, Error};

/// Column specifications of a document's operation columns: id << 4 | type (the deflate
/// bit cleared).
pub mod spec {
    pub const OBJ_ACTOR: u32 = 1;
    pub const OBJ_COUNTER: u32 = 2;
    pub const KEY_ACTOR: u32 = 0x11;
    pub const KEY_COUNTER: u32 = 0x13;
    pub const KEY_STRING: u32 = 0x15;
    pub const ID_ACTOR: u32 = 0x21;
    pub const ID_COUNTER: u32 = 0x23;
    pub const INSERT: u32 = 0x34;
    pub const ACTION: u32 = 0x42;
    pub const VALUE_META: u32 = 0x56;
    pub const VALUE: u32 = 0x57;
    pub const SUCC_COUNT: u32 = 0x80;
    pub const SUCC_ACTOR: u32 = 0x81;
    pub const SUCC_COUNTER: u32 = 0x83;
    pub const MARK_NAME: u32 = 0xa5;
    pub const DEFLATE: u32 = 0b1000;
}

/// Operation actions as the columns number them.
pub mod action {
    pub const MAKE_MAP: u64 = 0;
    pub const SET: u64 = 1;
    pub const MAKE_LIST: u64 = 2;
    pub const DELETE: u64 = 3;
    pub const MAKE_TEXT: u64 = 4;
    pub const INCREMENT: u64 = 5;
    pub const MAKE_TABLE: u64 = 6;
    pub const MARK: u64 = 7;
}

/// An operation id: its counter and the index of its actor in the document's actor list.
pub type RawOpId = (u64, usize);

/// What an operation's key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawKey<'a> {
    Map(&'a str),
    /// The start of a sequence.
    Head,
    Elem(RawOpId),
}

/// An operation's value, as the value columns hold it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RawValue<'a> {
    Null,
    Bool(bool),
    Uint(u64),
    Int(i64),
    F64(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
    Counter(i64),
    Timestamp(i64),
    /// A value type of a later Automerge.
    Unknown,
}

/// One row of the operation columns.
#[derive(Debug, Clone, PartialEq)]
pub struct RawOp<'a> {
    /// `None` for the root map.
    pub obj: Option<RawOpId>,
    pub key: RawKey<'a>,
    pub id: RawOpId,
    pub insert: bool,
    pub action: u64,
    pub value: RawValue<'a>,
    pub succ: SmallVec<[RawOpId; 2]>,
    /// Set on the operation that begins a mark.
    pub mark_name: Option<&'a str>,
}

pub(crate) fn corrupt(what: &str) -> Error {
    Error::NotAutomerge(format!("document columns: {what}"))
}

/// A document chunk split into its sections, each borrowed as stored: what reading its
/// operations ([`DocumentOps`]) and writing one of its columns anew
/// ([`doc_rewrite`](crate::doc_rewrite)) both start from.
pub struct DocumentChunk<'a> {
    pub body: &'a [u8],
    pub actors: Vec<ActorId>,
    /// The heads the save records, as stored (a load checks them against its changes).
    pub heads: Vec<ChangeHash>,
    /// Where the operation columns' specs start in `body`: all before is the actors, the
    /// heads and the change columns' specs.
    pub op_specs_at: usize,
    /// The change columns' data.
    pub change_data: &'a [u8],
    /// Each change column's spec (its deflate bit as stored) and data, within `change_data`.
    pub change_columns: Vec<(u32, &'a [u8])>,
    /// Each operation column's spec (its deflate bit as stored) and data.
    pub op_columns: Vec<(u32, &'a [u8])>,
    /// What follows the columns (the heads' change indexes).
    pub tail: &'a [u8],
}

impl<'a> DocumentChunk<'a> {
    /// The sections of the document chunk that `save` starts with.
    pub fn split(save: &'a [u8]) -> Result<DocumentChunk<'a>, Error> {
        let (chunk_type, body, _) = chunk::split_first(save)?;
        if chunk_type != chunk::DOCUMENT {
            return Err(corrupt("not a document chunk"));
        }
        let mut rest = body;
        let uleb = |rest: &mut &'a [u8]| {
            let (value, after) = leb128::split_uleb(rest).ok_or_else(|| corrupt("truncated"))?;
            *rest = after;
            Ok::<u64, Error>(value)
        };
        let take = |rest: &mut &'a [u8], n: u64| {
            let n = usize::try_from(n).ok().filter(|n| *n <= rest.len());
            let n = n.ok_or_else(|| corrupt("truncated"))?;
            let (taken, after) = rest.split_at(n);
            *rest = after;
            Ok::<&'a [u8], Error>(taken)
        };
        let actor_count = uleb(&mut rest)?;
        let mut actors = Vec::new();
        for _ in 0..actor_count {
            let len = uleb(&mut rest)?;
            actors.push(ActorId::from(take(&mut rest, len)?));
        }
        let head_count = uleb(&mut rest)?;
        let heads = take(&mut rest, head_count.saturating_mul(32))?
            .chunks_exact(32)
            .map(|hash| ChangeHash(hash.try_into().expect("32-byte chunks")))
            .collect();
        let specs = |rest: &mut &'a [u8]| {
            let count = uleb(rest)?;
            let mut specs = Vec::new();
            for _ in 0..count {
                let spec = u32::try_from(uleb(rest)?).map_err(|_| corrupt("column spec"))?;
                specs.push((spec, uleb(rest)?));
            }
            Ok::<_, Error>(specs)
        };
        let change_specs = specs(&mut rest)?;
        let op_specs_at = body.len() - rest.len();
        let op_specs = specs(&mut rest)?;
        let change_data = take(&mut rest, change_specs.iter().map(|(_, len)| len).sum())?;
        let mut change_rest = change_data;
        let mut change_columns = Vec::with_capacity(change_specs.len());
        for (spec, len) in change_specs {
            change_columns.push((spec, take(&mut change_rest, len)?));
        }
        let mut op_columns = Vec::with_capacity(op_specs.len());
        for (spec, len) in op_specs {
            op_columns.push((spec, take(&mut rest, len)?));
        }
        Ok(DocumentChunk {
            body,
            actors,
            heads,
            op_specs_at,
            change_data,
            change_columns,
            op_columns,
            tail: rest,
        })
    }
}

/// A document chunk's actors and operation columns (inflated where deflated).
pub struct DocumentOps<'a> {
    pub actors: Vec<ActorId>,
    columns: Vec<(u32, Cow<'a, [u8]>)>,
}

impl<'a> DocumentOps<'a> {
    /// The operations of the document chunk that `save` starts with.
    pub fn read(save: &'a [u8]) -> Result<DocumentOps<'a>, Error> {
        let chunk = DocumentChunk::split(save)?;
        let columns = chunk
            .op_columns
            .into_iter()
            .map(|(spec, data)| Ok((spec & !spec::DEFLATE, inflate(spec, data)?)))
            .collect::<Result<_, Error>>()?;
        Ok(DocumentOps { actors: chunk.actors, columns })
    }

    fn column(&self, spec: u32) -> &[u8] {
        self.columns.iter().find(|(s, _)| *s == spec).map_or(&[][..], |(_, data)| data)
    }

    /// Whether any operation has `action`, read from the action column alone.
    pub fn has_action(&self, wanted: u64) -> Result<bool, Error> {
        let mut actions = Rle::<u64>::new(self.column(spec::ACTION));
        while let Some(found) = actions.next()? {
            if found == Some(wanted) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The operations in document order; an error ends the iteration.
    pub fn iter(&self) -> impl Iterator<Item = Result<RawOp<'_>, Error>> + '_ {
        let mut rows = Rows {
            obj_actor: Rle::new(self.column(spec::OBJ_ACTOR)),
            obj_counter: Rle::new(self.column(spec::OBJ_COUNTER)),
            key_actor: Rle::new(self.column(spec::KEY_ACTOR)),
            key_counter: Delta::new(self.column(spec::KEY_COUNTER)),
            key_string: Rle::new(self.column(spec::KEY_STRING)),
            id_actor: Rle::new(self.column(spec::ID_ACTOR)),
            id_counter: Delta::new(self.column(spec::ID_COUNTER)),
            insert: Booleans::new(self.column(spec::INSERT)),
            action: Rle::new(self.column(spec::ACTION)),
            value_meta: Rle::new(self.column(spec::VALUE_META)),
            value: self.column(spec::VALUE),
            succ_count: Rle::new(self.column(spec::SUCC_COUNT)),
            succ_actor: Rle::new(self.column(spec::SUCC_ACTOR)),
            succ_counter: Delta::new(self.column(spec::SUCC_COUNTER)),
            mark_name: Rle::new(self.column(spec::MARK_NAME)),
            actors: self.actors.len(),
            failed: false,
        };
        std::iter::from_fn(move || rows.next_op().transpose())
    }
}

/// A column's data, inflated when its spec says it is deflated.
pub fn inflate(spec: u32, data: &[u8]) -> Result<Cow<'_, [u8]>, Error> {
    if spec & spec::DEFLATE == 0 {
        return Ok(Cow::Borrowed(data));
    }
    let mut inflated = Vec::new();
    flate2::bufread::DeflateDecoder::new(data)
        .read_to_end(&mut inflated)
        .map_err(|_| corrupt("a deflated column does not inflate"))?;
    Ok(Cow::Owned(inflated))
}

struct Rows<'a> {
    obj_actor: Rle<'a, u64>,
    obj_counter: Rle<'a, u64>,
    key_actor: Rle<'a, u64>,
    key_counter: Delta<'a>,
    key_string: Rle<'a, &'a str>,
    id_actor: Rle<'a, u64>,
    id_counter: Delta<'a>,
    insert: Booleans<'a>,
    action: Rle<'a, u64>,
    value_meta: Rle<'a, u64>,
    value: &'a [u8],
    succ_count: Rle<'a, u64>,
    succ_actor: Rle<'a, u64>,
    succ_counter: Delta<'a>,
    mark_name: Rle<'a, &'a str>,
    actors: usize,
    failed: bool,
}

impl<'a> Rows<'a> {
    fn next_op(&mut self) -> Result<Option<RawOp<'a>>, Error> {
        if self.failed {
            return Ok(None);
        }
        let op = self.read();
        self.failed = op.is_err();
        op
    }

    fn read(&mut self) -> Result<Option<RawOp<'a>>, Error> {
        // The id columns have a row for every operation: where they end, the operations do.
        let (Some(id_actor), Some(id_counter)) = (self.id_actor.next()?, self.id_counter.next()?)
        else {
            return Ok(None);
        };
        let id = self.op_id(id_counter, id_actor)?.ok_or_else(|| corrupt("an op has no id"))?;
        let obj = {
            let (actor, counter) = (self.obj_actor.next()?.flatten(), self.obj_counter.next()?);
            match (actor, counter.flatten()) {
                (None, None | Some(0)) => None,
                (actor, counter) => {
                    Some(self.op_id(counter, actor)?.ok_or_else(|| corrupt("half an object id"))?)
                }
            }
        };
        let key = {
            let string = self.key_string.next()?.flatten();
            let (actor, counter) = (self.key_actor.next()?.flatten(), self.key_counter.next()?);
            match (string, actor, counter.flatten()) {
                (Some(key), _, _) => RawKey::Map(key),
                (None, None, Some(0)) => RawKey::Head,
                (None, actor, counter) => RawKey::Elem(
                    self.op_id(counter, actor)?.ok_or_else(|| corrupt("an op has no key"))?,
                ),
            }
        };
        let insert = self.insert.next()?;
        let action = self.action.next()?.flatten().ok_or_else(|| corrupt("no action"))?;
        let value = self.value()?;
        let succ_count = self.succ_count.next()?.flatten().unwrap_or(0);
        let mut succ = SmallVec::new();
        for _ in 0..succ_count {
            let (actor, counter) = (self.succ_actor.next()?.flatten(), self.succ_counter.next()?);
            succ.push(self.op_id(counter.flatten(), actor)?.ok_or_else(|| corrupt("a succ"))?);
        }
        let mark_name = self.mark_name.next()?.flatten();
        Ok(Some(RawOp { obj, key, id, insert, action, value, succ, mark_name }))
    }

    fn op_id(&self, counter: Option<u64>, actor: Option<u64>) -> Result<Option<RawOpId>, Error> {
        match (counter, actor) {
            (Some(counter), Some(actor)) if (actor as usize) < self.actors => {
                Ok(Some((counter, actor as usize)))
            }
            (None, None) => Ok(None),
            _ => Err(corrupt("an op id names no actor")),
        }
    }

    fn value(&mut self) -> Result<RawValue<'a>, Error> {
        let meta = self.value_meta.next()?.flatten().unwrap_or(0);
        let len = usize::try_from(meta >> 4).ok().filter(|len| *len <= self.value.len());
        let (raw, rest) = self.value.split_at(len.ok_or_else(|| corrupt("value runs past"))?);
        self.value = rest;
        let number = || leb128::split_uleb(raw).map(|(n, _)| n).ok_or_else(|| corrupt("value"));
        let signed = || {
            let mut bytes = raw.iter();
            leb128::read_sleb(|| bytes.next().copied()).ok_or_else(|| corrupt("value"))
        };
        Ok(match meta & 0xf {
            0 => RawValue::Null,
            1 => RawValue::Bool(false),
            2 => RawValue::Bool(true),
            3 => RawValue::Uint(number()?),
            4 => RawValue::Int(signed()?),
            5 => RawValue::F64(f64::from_le_bytes(
                raw.try_into().map_err(|_| corrupt("a float is not 8 bytes"))?,
            )),
            6 => RawValue::Str(std::str::from_utf8(raw).map_err(|_| corrupt("a string"))?),
            7 => RawValue::Bytes(raw),
            8 => RawValue::Counter(signed()?),
            9 => RawValue::Timestamp(signed()?),
            _ => RawValue::Unknown,
        })
    }
}

/// A value of a run-length encoded column.
pub trait RleValue<'a>: Sized + Copy {
    fn read(data: &mut &'a [u8]) -> Option<Self>;
}

impl<'a> RleValue<'a> for u64 {
    fn read(data: &mut &'a [u8]) -> Option<u64> {
        let (value, rest) = leb128::split_uleb(data)?;
        *data = rest;
        Some(value)
    }
}

impl<'a> RleValue<'a> for i64 {
    fn read(data: &mut &'a [u8]) -> Option<i64> {
        let mut bytes = data.iter();
        let value = leb128::read_sleb(|| bytes.next().copied())?;
        *data = bytes.as_slice();
        Some(value)
    }
}

impl<'a> RleValue<'a> for &'a str {
    fn read(data: &mut &'a [u8]) -> Option<&'a str> {
        let len = usize::try_from(u64::read(data)?).ok().filter(|len| *len <= data.len())?;
        let (string, rest) = data.split_at(len);
        *data = rest;
        std::str::from_utf8(string).ok()
    }
}

enum Run<T> {
    Repeat(T),
    Literal,
    Null,
}

/// A run-length encoded column (see `estimate::columns::rle_rows`): `next` gives
/// `Some(None)` for a null row and `None` past the end.
pub struct Rle<'a, T> {
    data: &'a [u8],
    run: Run<T>,
    left: u64,
}

impl<'a, T: RleValue<'a>> Rle<'a, T> {
    pub fn new(data: &'a [u8]) -> Self {
        Rle { data, run: Run::Null, left: 0 }
    }

    // Not `Iterator::next`: a row can fail to decode.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Option<T>>, Error> {
        if self.left == 0 {
            if self.data.is_empty() {
                return Ok(None);
            }
            let n = i64::read(&mut self.data).ok_or_else(|| corrupt("a run"))?;
            if n > 0 {
                self.left = n as u64;
                self.run = Run::Repeat(T::read(&mut self.data).ok_or_else(|| corrupt("a run"))?);
            } else if n < 0 {
                self.left = n.unsigned_abs();
                self.run = Run::Literal;
            } else {
                self.left = u64::read(&mut self.data).ok_or_else(|| corrupt("a null run"))?;
                self.run = Run::Null;
                if self.left == 0 {
                    return Err(corrupt("an empty null run"));
                }
            }
        }
        self.left -= 1;
        Ok(Some(match self.run {
            Run::Repeat(value) => Some(value),
            Run::Literal => Some(T::read(&mut self.data).ok_or_else(|| corrupt("a literal"))?),
            Run::Null => None,
        }))
    }
}

/// A delta-encoded column: run-length encoded differences from the row before.
pub struct Delta<'a> {
    deltas: Rle<'a, i64>,
    last: i64,
}

impl<'a> Delta<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Delta { deltas: Rle::new(data), last: 0 }
    }

    // Not `Iterator::next`: a row can fail to decode.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Option<u64>>, Error> {
        Ok(match self.deltas.next()? {
            None => None,
            Some(None) => Some(None),
            Some(Some(delta)) => {
                self.last = self.last.checked_add(delta).ok_or_else(|| corrupt("a delta"))?;
                Some(Some(u64::try_from(self.last).map_err(|_| corrupt("a negative counter"))?))
            }
        })
    }
}

/// A boolean column: alternating counts of falses and trues, falses first; false past the
/// end.
struct Booleans<'a> {
    data: &'a [u8],
    value: bool,
    left: u64,
}

impl<'a> Booleans<'a> {
    fn new(data: &'a [u8]) -> Self {
        Booleans { data, value: true, left: 0 }
    }

    fn next(&mut self) -> Result<bool, Error> {
        while self.left == 0 {
            if self.data.is_empty() {
                return Ok(false);
            }
            self.left = u64::read(&mut self.data).ok_or_else(|| corrupt("a boolean run"))?;
            self.value = !self.value;
        }
        self.left -= 1;
        Ok(self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ObjType, ROOT};

    #[test]
    fn reads_every_operation_of_a_save_in_document_order() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "title", "Draft").unwrap();
        doc.put(ROOT, "n", automerge::ScalarValue::counter(0)).unwrap();
        doc.increment(ROOT, "n", 2).unwrap();
        let text = doc.put_object(ROOT, "text", ObjType::Text).unwrap();
        doc.splice_text(&text, 0, 0, "héllo").unwrap();
        doc.splice_text(&text, 1, 1, "").unwrap();
        let list = doc.put_object(ROOT, "list", ObjType::List).unwrap();
        doc.insert(&list, 0, 1_i64).unwrap();
        doc.put(ROOT, "title", "Final").unwrap();
        let save = doc.save();
        let ops = DocumentOps::read(&save).unwrap();
        let ops: Vec<RawOp<'_>> = ops.iter().collect::<Result<_, _>>().unwrap();
        // Root first, keys in order; the overwritten title lists its successor.
        let root: Vec<_> = ops.iter().filter(|op| op.obj.is_none()).collect();
        let keys: Vec<_> = root.iter().map(|op| op.key).collect();
        assert_eq!(keys, ["list", "n", "n", "text", "title", "title"].map(RawKey::Map).to_vec());
        assert_eq!(root[4].value, RawValue::Str("Draft"));
        assert_eq!(root[4].succ.as_slice(), &[root[5].id]);
        assert_eq!(root[1].value, RawValue::Counter(0));
        assert_eq!(root[2].action, action::INCREMENT);
        // The text's characters in order, the deleted one with its deletion as successor.
        let chars: Vec<_> = ops
            .iter()
            .filter(|op| op.obj.is_some() && op.insert && matches!(op.value, RawValue::Str(_)))
            .map(|op| (op.value, op.succ.len()))
            .collect();
        assert_eq!(
            chars,
            [("h", 0), ("é", 1), ("l", 0), ("l", 0), ("o", 0)]
                .map(|(c, succ)| (RawValue::Str(c), succ))
                .to_vec()
        );
        assert_eq!(ops.iter().filter(|op| op.key == RawKey::Head).count(), 2);
    }

    #[test]
    fn refuses_what_is_not_a_document() {
        assert!(DocumentOps::read(b"junk").is_err());
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "a", 1_i64).unwrap();
        let change = doc.save_after(&[]);
        assert!(DocumentOps::read(&change).is_err());
    }
}
