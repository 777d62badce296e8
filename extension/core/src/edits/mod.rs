//! Edits made from SQL: each a real Automerge change, made by an actor of the backend's
//! (see [`actors`]) on the document's heads, and written as a client's change is: the
//! structure index names the objects, elements and operations the change refers to, and
//! the change is appended without a load ([`writes::apply`]), which checks it like any
//! client's. Where the index does not model what an edit touches, the document is loaded
//! once and indexed afresh.

use std::num::NonZeroU64;

use automerge::legacy::{Key, OpType};
use automerge::marks::ExpandMark;
use automerge::{Change, ExpandedChange, ScalarValue};
use serde_json::Value as Json;

use crate::estimate::estimate_stored;
use crate::format::{self, StoredValue};
use crate::guard::no_panic;
use crate::load::load_stored;
use crate::save::to_stored;
use crate::settings::WriteSettings;
use crate::spans::shown;
use crate::structure::{value_ids, Found, ObjKind, OpId, Shown, Structure, ValueKind};
use crate::{index_cache, writes, Error};

pub mod actors;
mod ops;
mod update;

use ops::Ops;
pub use ops::Strings;

/// One edit, its path as `jsonb_set`'s: map keys, and list indexes (negative from the end).
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    /// Sets the value at `path`: a map key (made when missing) or a list element.
    Set { path: Vec<String>, value: Json, strings: Strings },
    /// Sets a counter of value `value` at `path`.
    SetCounter { path: Vec<String>, value: i64 },
    /// Deletes the map key or list element at `path`.
    Delete { path: Vec<String> },
    /// Inserts into a list before the element at `path` (after it when `after`), or sets a
    /// map key that is missing.
    Insert { path: Vec<String>, value: Json, strings: Strings, after: bool },
    /// Adds `by` to the counter at `path`.
    Increment { path: Vec<String>, by: i64 },
    /// Deletes `delete` characters of the text at `path` from `pos`, and inserts `text` there.
    Splice { path: Vec<String>, pos: i64, delete: i64, text: String },
    /// Marks characters `start..end` of the text at `path` with `name` = `value` (a
    /// scalar; null unmarks), growing at its ends as `expand` says.
    Mark { path: Vec<String>, start: i64, end: i64, name: String, value: Json, expand: ExpandMark },
    /// Splits the text at `path` with a block marker at `pos`, holding `block` (a map:
    /// `type`, `parents`, `attrs`, as rich-text editors write them; strings plain).
    SplitBlock { path: Vec<String>, pos: i64, block: Json },
    /// The smallest change that makes the document's JSON `json`.
    Update { json: Json, strings: Strings },
}

/// What the change records beside its operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeMeta {
    pub message: Option<String>,
    /// Milliseconds since the Unix epoch, as the Automerge libraries record it.
    pub time: i64,
}

/// An edited document, and the change that made it (`None` when the edit changed nothing).
pub struct Edited {
    pub stored: Vec<u8>,
    pub change: Option<Vec<u8>>,
}

/// Makes `edit` on the stored document.
pub fn edit(
    stored: &[u8],
    edit: &Edit,
    meta: &ChangeMeta,
    settings: WriteSettings,
) -> Result<Edited, Error> {
    let value = format::decode(stored)?;
    if let Some(edited) = edit_indexed(stored, &value, edit, meta, settings)? {
        return Ok(edited);
    }
    // The index does not model what the edit touches (or the value keeps none): the
    // document loads once, indexed afresh.
    settings.load_limit.check(&estimate_stored(&value.summary, value.payload))?;
    let reindexed = to_stored(&load_stored(&value)?, settings)?;
    let value = format::decode(&reindexed)?;
    edit_indexed(&reindexed, &value, edit, meta, settings)?.ok_or_else(|| {
        Error::NotSupported(
            "this edit touches an object that pg_automerge cannot edit from SQL (a text \
             holding values other than characters, or a list or text of another layout)"
                .into(),
        )
    })
}

/// The edit made with the value's index; `None` when the index cannot place it.
fn edit_indexed(
    stored: &[u8],
    value: &StoredValue<'_>,
    edit: &Edit,
    meta: &ChangeMeta,
    settings: WriteSettings,
) -> Result<Option<Edited>, Error> {
    let Some(kept) = &value.kept else { return Ok(None) };
    let heads = &value.summary.heads;
    let (structure, heap_bytes) = match index_cache::take(heads) {
        Some((held, heap_bytes)) => (held, Some(heap_bytes)),
        None => match writes::current_index(value) {
            Some(index) => (index, None),
            None => return Ok(None),
        },
    };
    let (actor, seq) = actors::next(&kept.clock);
    let start = NonZeroU64::new(kept.max_op + 1)
        .ok_or_else(|| Error::CorruptStoredValue("operation counters overflow".into()))?;
    let mut ops = Ops::new(&structure, actor.clone(), start);
    let placed = match edit {
        Edit::Update { json, strings } => {
            let current = match &kept.json {
                Some(kept_json) => crate::kept_json::decode(kept_json, settings.json_codec)?,
                None => return Ok(None),
            };
            update::update(&mut ops, &current, json, *strings)?
        }
        other => place(&mut ops, other)?,
    };
    let operations = ops.ops;
    if settings.index_cache_budget > 0 {
        // The write below takes it back: the change follows these heads.
        index_cache::keep(heads.clone(), structure, heap_bytes, settings.index_cache_budget);
    }
    if placed.is_none() {
        return Ok(None);
    }
    if operations.is_empty() {
        return Ok(Some(Edited { stored: stored.to_vec(), change: None }));
    }
    let expanded = ExpandedChange {
        operations,
        actor_id: actor.clone(),
        hash: None,
        seq,
        start_op: start,
        time: meta.time,
        message: meta.message.clone(),
        deps: heads.clone(),
        extra_bytes: Vec::new(),
        author: None,
    };
    let change = no_panic(|| Change::from(expanded)).map_err(Error::CannotMerge)?;
    actors::issued(&actor, seq);
    let bytes = change.raw_bytes().to_vec();
    let stored = writes::apply(stored, &bytes, settings)?;
    Ok(Some(Edited { stored, change: Some(bytes) }))
}

/// Why a path cannot go on into a text.
const INSIDE_TEXT: &str =
    "inside a text, which a path cannot step into (splice it with automerge_splice)";

/// Where an edit's path leads: the object holding its last step, and that step.
struct Target {
    obj: OpId,
    kind: ObjKind,
    step: String,
    /// The path up to and including the step, for messages.
    shown: String,
}

/// Follows all but the last step of `path`: `Ok(None)` when the index does not model an
/// object on the way.
fn target(structure: &Structure, path: &[String]) -> Result<Option<Target>, Error> {
    let Some((last, steps)) = path.split_last() else {
        return Err(Error::InvalidParameter(
            "the path is empty: an edit names a key or element of the document".into(),
        ));
    };
    let (mut obj, mut kind) = (structure.root(), ObjKind::Map);
    for (depth, step) in steps.iter().enumerate() {
        let here = &path[..=depth];
        let Some(found) = step_into(structure, obj, kind, step, here)? else { return Ok(None) };
        match found {
            Found::Object(inner, inner_kind) => (obj, kind) = (inner, inner_kind),
            Found::Scalar(ValueKind::Unknown) => return Ok(None),
            Found::Scalar(_) => return Err(Error::PathNotFound(shown(here))),
        }
    }
    if structure.modelled_kind(obj).is_none() {
        return Ok(None);
    }
    Ok(Some(Target { obj, kind, step: last.clone(), shown: shown(path) }))
}

/// What `step` of the object `obj` shows; `Ok(None)` when the index does not model it.
fn step_into(
    structure: &Structure,
    obj: OpId,
    kind: ObjKind,
    step: &str,
    here: &[String],
) -> Result<Option<Found>, Error> {
    if structure.modelled_kind(obj).is_none() {
        return Ok(None);
    }
    let value = match kind {
        ObjKind::Map | ObjKind::Table => structure.key_value(obj, step),
        ObjKind::List => {
            let Some(elements) = structure.shown(obj) else { return Ok(None) };
            let at = list_index(step, elements.totals().0, here, false)?;
            elements.at(at).and_then(|element| structure.element_value(&element))
        }
        ObjKind::Text => return Err(Error::NotA { path: shown(here), what: INSIDE_TEXT }),
    };
    value.map(|value| Some(structure.found(value))).ok_or_else(|| Error::PathNotFound(shown(here)))
}

/// A list index of a path (negative counts from the end, as in `jsonb_set`) as a position
/// among `len` elements; `len` itself only `at_end` (an insertion after the last).
fn list_index(step: &str, len: usize, here: &[String], at_end: bool) -> Result<usize, Error> {
    let index: i64 = step
        .parse()
        .map_err(|_| Error::NotAnIndex { path: shown(here), step: step.to_string() })?;
    let resolved = if index < 0 { len as i64 + index } else { index };
    let limit = if at_end { len as i64 } else { len as i64 - 1 };
    if resolved < 0 || resolved > limit {
        return Err(Error::IndexOutOfRange { path: shown(here), len });
    }
    Ok(resolved as usize)
}

/// The operations of every edit but an update; `Ok(None)` when the index cannot place it.
fn place(ops: &mut Ops<'_>, edit: &Edit) -> Result<Option<()>, Error> {
    let structure = ops.structure;
    let path = match edit {
        Edit::Set { path, .. }
        | Edit::SetCounter { path, .. }
        | Edit::Delete { path }
        | Edit::Insert { path, .. }
        | Edit::Increment { path, .. }
        | Edit::Splice { path, .. }
        | Edit::Mark { path, .. }
        | Edit::SplitBlock { path, .. } => path,
        Edit::Update { .. } => unreachable!("updates are diffed, not placed"),
    };
    let Some(target) = target(structure, path)? else { return Ok(None) };
    let obj = ops.obj(target.obj);
    match (edit, target.kind) {
        (Edit::Splice { .. } | Edit::Mark { .. } | Edit::SplitBlock { .. }, _) => {
            let here = path.as_slice();
            let Some(found) = step_into(structure, target.obj, target.kind, &target.step, here)?
            else {
                return Ok(None);
            };
            let Found::Object(text_obj, ObjKind::Text) = found else {
                return Err(Error::NotA { path: target.shown, what: "not a text" });
            };
            let Some(elements) = structure.shown(text_obj) else { return Ok(None) };
            let shown = &target.shown;
            match edit {
                Edit::Splice { pos, delete, text, .. } => {
                    splice(ops, text_obj, elements, (*pos, *delete), text, shown)?
                }
                Edit::Mark { start, end, name, value, expand, .. } => {
                    mark(ops, text_obj, elements, (*start, *end), (name, value, *expand), shown)?
                }
                Edit::SplitBlock { pos, block, .. } => {
                    split_block(ops, text_obj, elements, *pos, block, shown)?
                }
                _ => unreachable!("a text edit"),
            }
        }
        (_, ObjKind::Text) => return Err(Error::NotA { path: target.shown, what: INSIDE_TEXT }),
        (_, ObjKind::Map | ObjKind::Table) => {
            let key = Key::Map(target.step.as_str().into());
            let current =
                structure.key_values(target.obj, &target.step).map_or(Vec::new(), |v| value_ids(v));
            let winner = structure.key_value(target.obj, &target.step);
            match edit {
                Edit::Set { value, strings, .. } => {
                    ops.put_json(obj, key, false, &current, value, *strings)?;
                }
                Edit::Insert { value, strings, .. } => {
                    if !current.is_empty() {
                        return Err(Error::InvalidParameter(format!(
                            "the document already has a value at path {}: automerge_insert adds \
                             missing keys only (set one with automerge_set)",
                            target.shown
                        )));
                    }
                    ops.put_json(obj, key, false, &[], value, *strings)?;
                }
                Edit::SetCounter { value, .. } => {
                    ops.push(OpType::Put(ScalarValue::counter(*value)), obj, key, &current, false);
                }
                Edit::Delete { .. } => {
                    if current.is_empty() {
                        return Err(Error::PathNotFound(target.shown));
                    }
                    ops.push(OpType::Delete, obj, key, &current, false);
                }
                Edit::Increment { by, .. } => {
                    let Some(counter) = winner else {
                        return Err(Error::PathNotFound(target.shown));
                    };
                    increment(ops, obj, key, counter, *by, &target.shown)?;
                }
                _ => unreachable!("handled above"),
            }
        }
        (_, ObjKind::List) => {
            let Some(elements) = structure.shown(target.obj) else { return Ok(None) };
            let count = elements.totals().0;
            let here = path.as_slice();
            match edit {
                Edit::Insert { value, strings, after, .. } => {
                    // The new element goes right after the one shown before its place.
                    let before = if count == 0 {
                        list_index(&target.step, 0, here, true)?;
                        None
                    } else {
                        let at = list_index(&target.step, count, here, false)?;
                        elements.elements().pass(at + usize::from(*after)).map(|e| e.elem)
                    };
                    ops.put_json(obj, ops.elem(before), true, &[], value, *strings)?;
                }
                _ => {
                    let at = list_index(&target.step, count, here, false)?;
                    let Some(element) = elements.at(at) else { return Ok(None) };
                    let element = &element;
                    let current = value_ids(&element.values);
                    let key = ops.elem(Some(element.elem));
                    match edit {
                        Edit::Set { value, strings, .. } => {
                            ops.put_json(obj, key, false, &current, value, *strings)?;
                        }
                        Edit::SetCounter { value, .. } => {
                            let counter = OpType::Put(ScalarValue::counter(*value));
                            ops.push(counter, obj, key, &current, false);
                        }
                        Edit::Delete { .. } => {
                            ops.push(OpType::Delete, obj, key, &current, false);
                        }
                        Edit::Increment { by, .. } => {
                            let Some(counter) = structure.element_value(element) else {
                                return Err(Error::PathNotFound(target.shown));
                            };
                            increment(ops, obj, key, counter, *by, &target.shown)?;
                        }
                        _ => unreachable!("handled above"),
                    }
                }
            }
        }
    }
    Ok(Some(()))
}

fn increment(
    ops: &mut Ops<'_>,
    obj: automerge::legacy::ObjectId,
    key: Key,
    counter: crate::structure::ValueOp,
    by: i64,
    shown: &str,
) -> Result<(), Error> {
    if counter.kind != ValueKind::Counter {
        return Err(Error::NotA { path: shown.to_string(), what: "not a counter" });
    }
    ops.push(OpType::Increment(by), obj, key, &[counter.id], false);
    Ok(())
}

/// The element shown right before character `pos` of a text (`None`: its start), or an
/// error when `pos` is past its end or inside an element of several characters.
fn element_before(
    elements: Shown<'_>,
    pos: u64,
    out_of_range: impl Fn() -> Error,
) -> Result<Option<OpId>, Error> {
    let mut shown = elements.elements();
    let before = shown.pass_before(pos).map(|element| element.elem);
    if shown.offset() == pos {
        Ok(before)
    } else {
        Err(out_of_range())
    }
}

/// Marks characters `start..end`: a mark begin right after the character before `start`
/// and a mark end right after the character before `end`, the end's counter one after the
/// begin's as the loader requires.
fn mark(
    ops: &mut Ops<'_>,
    text_obj: OpId,
    elements: Shown<'_>,
    (start, end): (i64, i64),
    (name, value, expand): (&str, &Json, ExpandMark),
    shown: &str,
) -> Result<(), Error> {
    let len = elements.totals().1;
    let out_of_range =
        || Error::TextRange { path: shown.to_string(), pos: start, delete: end - start, len };
    let (Ok(from), Ok(to)) = (u64::try_from(start), u64::try_from(end)) else {
        return Err(out_of_range());
    };
    if from >= to || to > len {
        return Err(out_of_range());
    }
    let value = match value {
        Json::Object(_) | Json::Array(_) => {
            return Err(Error::InvalidParameter(format!(
                "a mark's value is a string, number, boolean or null, not {value}"
            )))
        }
        Json::String(s) => ScalarValue::Str(s.as_str().into()),
        Json::Null => ScalarValue::Null,
        Json::Bool(b) => ScalarValue::Boolean(*b),
        Json::Number(n) => ops::number(n),
    };
    let begin_after = element_before(elements, from, out_of_range)?;
    let end_after = element_before(elements, to, out_of_range)?;
    let obj = ops.obj(text_obj);
    let data = automerge::legacy::MarkData { name: name.into(), value, expand: expand.before() };
    let begin_key = ops.elem(begin_after);
    ops.push(OpType::MarkBegin(data), obj.clone(), begin_key, &[], true);
    let end_key = ops.elem(end_after);
    ops.push(OpType::MarkEnd(expand.after()), obj, end_key, &[], true);
    Ok(())
}

/// Inserts a block marker (a map) at `pos` of a text, with `block`'s fields in it.
fn split_block(
    ops: &mut Ops<'_>,
    text_obj: OpId,
    elements: Shown<'_>,
    pos: i64,
    block: &Json,
    shown: &str,
) -> Result<(), Error> {
    let len = elements.totals().1;
    let out_of_range = || Error::TextRange { path: shown.to_string(), pos, delete: 0, len };
    let Json::Object(fields) = block else {
        return Err(Error::InvalidParameter(format!("a block is a JSON object, not {block}")));
    };
    let at = u64::try_from(pos).map_err(|_| out_of_range())?;
    let after = element_before(elements, at, out_of_range)?;
    let obj = ops.obj(text_obj);
    let key = ops.elem(after);
    let made = ops.push(OpType::Make(automerge::ObjType::Map), obj, key, &[], true);
    for (name, value) in fields {
        let key = Key::Map(name.as_str().into());
        let inner = automerge::legacy::ObjectId::Id(made.clone());
        ops.put_json(inner, key, false, &[], value, Strings::Plain)?;
    }
    Ok(())
}

/// Deletes `delete` characters of a text from `pos` and inserts `text` there: each
/// character shown is an element, deleted as such, and the new ones go right after the
/// character before `pos`.
fn splice(
    ops: &mut Ops<'_>,
    text_obj: OpId,
    elements: Shown<'_>,
    (pos, delete): (i64, i64),
    text: &str,
    shown: &str,
) -> Result<(), Error> {
    let len = elements.totals().1;
    let out_of_range = || Error::TextRange { path: shown.to_string(), pos, delete, len };
    let (Ok(from), Ok(count)) = (u64::try_from(pos), u64::try_from(delete)) else {
        return Err(out_of_range());
    };
    let end = from.checked_add(count).filter(|end| *end <= len).ok_or_else(out_of_range)?;
    let obj = ops.obj(text_obj);
    let mut shown = elements.elements();
    let before = shown.pass_before(from).map(|element| element.elem);
    if shown.offset() != from {
        return Err(out_of_range());
    }
    while shown.offset() < end {
        let Some(element) = shown.next() else { return Err(out_of_range()) };
        if shown.offset() > end {
            return Err(out_of_range());
        }
        let key = ops.elem(Some(element.elem));
        ops.push(OpType::Delete, obj.clone(), key, &value_ids(&element.values), false);
    }
    let before = before.map(|elem| ops.id(elem));
    ops.insert_text(obj, before, text);
    Ok(())
}
