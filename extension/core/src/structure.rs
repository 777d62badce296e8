//! An index of a document's live structure, kept in the stored value so that the writes
//! real clients send (text splices, marks, strings set as text objects, nested map fields,
//! list inserts and deletes, counters, objects made with content) are checked, placed and
//! turned into JSON edits without a load.
//!
//! It holds every object of the document (reachable or not): its type and where it sits
//! (its parent and key); for a map, each key's current operations; for a list or text,
//! its elements in document order, tombstones and mark boundaries included, run-length
//! encoded (runs of consecutive operation ids of one actor in one state). Built from a
//! save's operation columns ([`doc_ops`]), and updated by [`Structure::apply`] exactly
//! as a load would arrange the same operations; a test proves both agree with the crate.
//!
//! Anything it does not model (a non-string scalar inside text, an unexpected order of
//! operations) makes the object opaque: writes that touch it load.

use std::collections::{BTreeMap, HashMap};

use automerge::legacy::{ElementId, Key, ObjectId, OpType};
use automerge::{ActorId, Change, ObjType};
use serde_json::Value as Json;

use crate::doc_ops::{action, DocumentOps, RawKey, RawOp, RawOpId, RawValue};
use crate::guard::no_panic;
use crate::kept_json::{JsonEdit, Step};
use crate::{json, leb128};

/// An operation id: its counter and its actor's index in [`Structure::actors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId {
    pub counter: u64,
    pub actor: u32,
}

/// The root map's id.
const ROOT: OpId = OpId { counter: 0, actor: 0 };

/// What a current operation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    Scalar,
    Counter,
    Object(ObjKind),
    /// Kept by a stored value of format version 2, which did not record it.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjKind {
    Map,
    Table,
    List,
    Text,
}

impl ObjKind {
    fn of(obj_type: ObjType) -> ObjKind {
        match obj_type {
            ObjType::Map => ObjKind::Map,
            ObjType::Table => ObjKind::Table,
            ObjType::List => ObjKind::List,
            ObjType::Text => ObjKind::Text,
        }
    }

    fn of_action(action: u64) -> Option<ObjKind> {
        match action {
            action::MAKE_MAP => Some(ObjKind::Map),
            action::MAKE_TABLE => Some(ObjKind::Table),
            action::MAKE_LIST => Some(ObjKind::List),
            action::MAKE_TEXT => Some(ObjKind::Text),
            _ => None,
        }
    }

    /// The JSON of an empty object of this kind.
    fn empty_json(self) -> Json {
        match self {
            ObjKind::Map | ObjKind::Table => Json::Object(Default::default()),
            ObjKind::List => Json::Array(Vec::new()),
            ObjKind::Text => Json::String(String::new()),
        }
    }
}

/// A current operation: the value it puts, or the object it makes (whose id is its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueOp {
    pub id: OpId,
    pub kind: ValueKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentKey {
    Map(String),
    Elem(OpId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Map(BTreeMap<String, Vec<ValueOp>>),
    Seq(Vec<Run>),
    /// What the index does not model: writes that touch it load.
    Opaque,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub kind: ObjKind,
    /// Where it sits; `None` for the root.
    pub parent: Option<(OpId, ParentKey)>,
    pub body: Body,
}

/// Elements with consecutive ids `start..start + len` of one actor, in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub actor: u32,
    pub start: u64,
    pub len: u64,
    pub state: ElemState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElemState {
    /// Each element shows the value its insertion put, `width` characters of text (1 in a
    /// list).
    Shown { width: u32, kind: ValueKind },
    /// Deleted elements and mark boundaries.
    Hidden,
    /// One element whose current values were put after its insertion.
    Values { width: u32, values: Vec<ValueOp> },
}

impl Run {
    /// Characters of text (or items of a list) each element of the run shows.
    pub fn width(&self) -> u64 {
        self.state.width()
    }
}

impl ElemState {
    fn width(&self) -> u64 {
        match self {
            ElemState::Shown { width, .. } | ElemState::Values { width, .. } => u64::from(*width),
            ElemState::Hidden => 0,
        }
    }
}

/// The index of one document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Structure {
    pub actors: Vec<ActorId>,
    pub objects: HashMap<OpId, Object>,
}

/// The object character of a block marker in text's JSON, as `text()` shows it.
const BLOCK_MARKER: char = '\u{fffc}';

impl Structure {
    /// The index of the document whose save `save` starts with, and the largest operation
    /// counter in it; `None` when the save is not one this build reads.
    pub fn of_save(save: &[u8]) -> Option<(Structure, u64)> {
        let ops = DocumentOps::read(save).ok()?;
        let mut builder = Builder::new(ops.actors.clone());
        let mut group: Vec<RawOp<'_>> = Vec::new();
        let mut max_op = 0;
        for op in ops.iter() {
            let op = op.ok()?;
            // Deletions are not stored: their counters are in their targets' successors.
            max_op = op.succ.iter().fold(max_op.max(op.id.0), |max, succ| max.max(succ.0));
            let same = group.first().is_some_and(|first| {
                first.obj == op.obj
                    && match (first.key, op.key) {
                        (RawKey::Map(a), RawKey::Map(b)) => a == b,
                        // An element's insertion, then the operations on it.
                        (_, RawKey::Elem(elem)) if !op.insert => {
                            first.insert && builder.id(first.id) == builder.id(elem)
                        }
                        _ => false,
                    }
            });
            if !same && !group.is_empty() {
                builder.group(&group)?;
                group.clear();
            }
            group.push(op);
        }
        if !group.is_empty() {
            builder.group(&group)?;
        }
        Some((builder.structure, max_op))
    }

    /// An index of the root map alone, from what format version 2 kept: every other
    /// object is unknown, so writes that touch one load.
    pub fn of_root_table(root: &BTreeMap<String, Vec<(u64, ActorId)>>) -> Structure {
        let mut structure = Structure::default();
        let mut keys = BTreeMap::new();
        for (key, ops) in root {
            let values = ops
                .iter()
                .map(|(counter, actor)| ValueOp {
                    id: OpId { counter: *counter, actor: structure.actor_index(actor) },
                    kind: ValueKind::Unknown,
                })
                .collect();
            keys.insert(key.clone(), values);
        }
        structure
            .objects
            .insert(ROOT, Object { kind: ObjKind::Map, parent: None, body: Body::Map(keys) });
        structure
    }

    /// The root map's keys and the operations each shows, as format version 2 kept them.
    pub fn root_table(&self) -> BTreeMap<String, Vec<(u64, ActorId)>> {
        let Some(Object { body: Body::Map(keys), .. }) = self.objects.get(&ROOT) else {
            return BTreeMap::new();
        };
        keys.iter()
            .map(|(key, values)| {
                let ops = values
                    .iter()
                    .map(|value| (value.id.counter, self.actors[value.id.actor as usize].clone()))
                    .collect();
                (key.clone(), ops)
            })
            .collect()
    }

    /// The same index with its actors in id order: indexes of one document built in
    /// different ways compare equal.
    pub fn canonical(&self) -> Structure {
        let mut actors = self.actors.clone();
        actors.sort();
        let map: Vec<u32> = self
            .actors
            .iter()
            .map(|actor| actors.iter().position(|a| a == actor).unwrap_or_default() as u32)
            .collect();
        let id = |id: OpId| OpId { actor: map[id.actor as usize], ..id };
        let values = |values: &[ValueOp]| -> Vec<ValueOp> {
            let mut values: Vec<ValueOp> =
                values.iter().map(|value| ValueOp { id: id(value.id), ..*value }).collect();
            values.sort_by_key(|value| value.id);
            values
        };
        let objects = self
            .objects
            .iter()
            .map(|(obj, object)| {
                let parent = object.parent.as_ref().map(|(parent, key)| {
                    let key = match key {
                        ParentKey::Elem(elem) => ParentKey::Elem(id(*elem)),
                        ParentKey::Map(key) => ParentKey::Map(key.clone()),
                    };
                    (id(*parent), key)
                });
                let body = match &object.body {
                    Body::Map(keys) => Body::Map(
                        keys.iter().map(|(key, current)| (key.clone(), values(current))).collect(),
                    ),
                    Body::Seq(runs) => Body::Seq(
                        runs.iter()
                            .map(|run| {
                                let state = match &run.state {
                                    ElemState::Values { width, values: current } => {
                                        ElemState::Values { width: *width, values: values(current) }
                                    }
                                    other => other.clone(),
                                };
                                Run { actor: map[run.actor as usize], state, ..*run }
                            })
                            .collect(),
                    ),
                    Body::Opaque => Body::Opaque,
                };
                (id(*obj), Object { kind: object.kind, parent, body })
            })
            .collect();
        Structure { actors, objects }
    }

    fn actor_index(&mut self, actor: &ActorId) -> u32 {
        match self.actors.iter().position(|known| known == actor) {
            Some(index) => index as u32,
            None => {
                self.actors.push(actor.clone());
                (self.actors.len() - 1) as u32
            }
        }
    }

    /// Whether `a` comes after `b` in Automerge's order of operations: by counter, then
    /// by actor id.
    fn later(&self, a: OpId, b: OpId) -> bool {
        (a.counter, &self.actors[a.actor as usize]) > (b.counter, &self.actors[b.actor as usize])
    }

    fn winner(&self, values: &[ValueOp]) -> Option<ValueOp> {
        values.iter().copied().reduce(|a, b| if self.later(b.id, a.id) { b } else { a })
    }

    /// Applies a change as a load would, when its operations follow every operation of the
    /// document (its first counter is `max_op`, the document's largest, plus one, so none
    /// is reused and none skipped): the JSON edits it makes, in order; `None` when an
    /// operation names what the index does not have (an object, key, element or current
    /// operation) or does what it cannot follow, and the caller loads. On `None` the index
    /// may be half updated: drop it.
    pub fn apply(&mut self, change: &Change, max_op: u64) -> Option<Vec<JsonEdit>> {
        let start = change.start_op().get();
        if start != max_op.checked_add(1)? {
            return None;
        }
        let ops = no_panic(|| change.decode()).ok()?.operations;
        if start.checked_add(ops.len() as u64)? != change.max_op().checked_add(1)? {
            return None;
        }
        let actor = self.actor_index(change.actor_id());
        let mut edits = Edits::default();
        for (index, op) in ops.into_iter().enumerate() {
            let id = OpId { counter: start + index as u64, actor };
            self.apply_op(id, op, &mut edits)?;
        }
        Some(edits.0)
    }

    fn known(&self, id: &automerge::legacy::OpId) -> Option<OpId> {
        let actor = self.actors.iter().position(|known| known == id.actor())?;
        Some(OpId { counter: id.counter(), actor: actor as u32 })
    }

    fn apply_op(&mut self, id: OpId, op: automerge::legacy::Op, edits: &mut Edits) -> Option<()> {
        let obj = match &op.obj {
            ObjectId::Root => ROOT,
            ObjectId::Id(obj) => self.known(obj)?,
        };
        let mut pred = Vec::with_capacity(op.pred.len());
        for p in op.pred.iter() {
            pred.push(self.known(p)?);
        }
        let value = match &op.action {
            OpType::Make(obj_type) => {
                Some(ValueOp { id, kind: ValueKind::Object(ObjKind::of(*obj_type)) })
            }
            OpType::Put(scalar) => Some(ValueOp {
                id,
                kind: if scalar.is_counter() { ValueKind::Counter } else { ValueKind::Scalar },
            }),
            _ => None,
        };
        let new_json = || match &op.action {
            OpType::Make(obj_type) => Some(ObjKind::of(*obj_type).empty_json()),
            OpType::Put(scalar) => Some(json::scalar(scalar)),
            _ => None,
        };
        let kind = self.objects.get(&obj)?.kind;
        let path = self.path(obj);
        match (&op.key, op.insert, kind) {
            (Key::Map(key), false, ObjKind::Map | ObjKind::Table) => {
                let key = key.to_string();
                let Body::Map(keys) = &mut self.objects.get_mut(&obj)?.body else { return None };
                let mut current = keys.get(&key).cloned().unwrap_or_default();
                let before = self.winner(&current);
                let (after, increment) = self.replace(&mut current, &pred, value, &op.action)?;
                let Body::Map(keys) = &mut self.objects.get_mut(&obj)?.body else { return None };
                match current.is_empty() {
                    true => keys.remove(&key),
                    false => keys.insert(key.clone(), current),
                };
                if let Some(ValueOp { id, kind: ValueKind::Object(kind) }) = value {
                    let parent = Some((obj, ParentKey::Map(key.clone())));
                    self.objects.insert(id, Object { kind, parent, body: kind.empty_body() });
                }
                let Some(mut path) = path else { return Some(()) };
                path.push(Step::Key(key));
                match (before, after, increment) {
                    (_, _, Some(by)) => {
                        if before.is_some_and(|winner| Some(winner.id) == pred.first().copied()) {
                            edits.push(JsonEdit::Increment(path, by));
                        }
                    }
                    (_, Some(after), None) if Some(after) == value => {
                        edits.push(JsonEdit::Set(path, new_json()?))
                    }
                    (Some(_), None, None) => edits.push(JsonEdit::Remove(path)),
                    (before, after, None) if before == after => {}
                    // Another value than the new one became the winner: its JSON is unknown.
                    _ => return None,
                }
                Some(())
            }
            (Key::Seq(reference), true, ObjKind::List | ObjKind::Text) => {
                if !pred.is_empty() {
                    return None;
                }
                let text = kind == ObjKind::Text;
                let (state, shown) = match (&op.action, value) {
                    (OpType::MarkBegin(..) | OpType::MarkEnd(_), _) if text => {
                        (ElemState::Hidden, None)
                    }
                    (OpType::Put(automerge::ScalarValue::Str(s)), Some(value)) if text => (
                        ElemState::Shown { width: s.chars().count() as u32, kind: value.kind },
                        Some(Json::String(s.to_string())),
                    ),
                    (OpType::Make(_), Some(value)) if text => (
                        ElemState::Shown { width: 1, kind: value.kind },
                        Some(Json::String(BLOCK_MARKER.to_string())),
                    ),
                    (_, Some(value)) if !text => {
                        (ElemState::Shown { width: 1, kind: value.kind }, Some(new_json()?))
                    }
                    _ => return None,
                };
                let reference = match reference {
                    ElementId::Head => None,
                    ElementId::Id(elem) => Some(self.known(elem)?),
                };
                let Body::Seq(runs) = &mut self.objects.get_mut(&obj)?.body else { return None };
                let offset = insert_element(runs, reference, id, state, &self.actors)?;
                if let Some(ValueOp { id, kind: ValueKind::Object(kind) }) = value {
                    let parent = Some((obj, ParentKey::Elem(id)));
                    self.objects.insert(id, Object { kind, parent, body: kind.empty_body() });
                }
                if let (Some(path), Some(shown)) = (path, shown) {
                    edits.push(match shown {
                        Json::String(s) if text => JsonEdit::Splice(path, offset, 0, s),
                        other => JsonEdit::Insert(with(path, Step::Index(offset)), other),
                    });
                }
                Some(())
            }
            (Key::Seq(ElementId::Id(elem)), false, ObjKind::List | ObjKind::Text) => {
                let elem = self.known(elem)?;
                let text = kind == ObjKind::Text;
                let Body::Seq(runs) = &self.objects.get(&obj)?.body else { return None };
                let (at, offset) = find(runs, elem)?;
                let state = runs[at.0].state.clone();
                let old_width = state.width();
                let mut current = match &state {
                    ElemState::Shown { kind, .. } => vec![ValueOp { id: elem, kind: *kind }],
                    ElemState::Hidden => Vec::new(),
                    ElemState::Values { values, .. } => values.clone(),
                };
                let before = self.winner(&current);
                let (after, increment) = self.replace(&mut current, &pred, value, &op.action)?;
                let width = match (&op.action, after) {
                    (_, None) => 0,
                    _ if !text => 1,
                    (OpType::Put(automerge::ScalarValue::Str(s)), after) if after == value => {
                        s.chars().count() as u32
                    }
                    (OpType::Make(_), after) if after == value => 1,
                    _ if before == after => old_width as u32,
                    // Another value became the winner: its text is unknown.
                    _ => return None,
                };
                let new_state = match current.as_slice() {
                    [] => ElemState::Hidden,
                    [only] if only.id == elem => ElemState::Shown { width, kind: only.kind },
                    _ => ElemState::Values { width, values: current.clone() },
                };
                if let Some(ValueOp { id, kind: ValueKind::Object(kind) }) = value {
                    let parent = Some((obj, ParentKey::Elem(elem)));
                    self.objects.insert(id, Object { kind, parent, body: kind.empty_body() });
                }
                let Body::Seq(runs) = &mut self.objects.get_mut(&obj)?.body else { return None };
                set_element_state(runs, at, new_state);
                let Some(path) = path else { return Some(()) };
                match (before, after, increment) {
                    (_, _, Some(_)) if text => return None,
                    (_, _, Some(by)) => {
                        if before.is_some_and(|winner| Some(winner.id) == pred.first().copied()) {
                            edits.push(JsonEdit::Increment(with(path, Step::Index(offset)), by));
                        }
                    }
                    (before, after, None) if before == after => {}
                    (_, None, None) if text => {
                        edits.push(JsonEdit::Splice(path, offset, old_width, String::new()))
                    }
                    (_, None, None) => {
                        edits.push(JsonEdit::Remove(with(path, Step::Index(offset))))
                    }
                    (before, Some(_), None) => {
                        let shown = match (&op.action, text) {
                            (OpType::Make(_), true) => Json::String(BLOCK_MARKER.to_string()),
                            _ => new_json()?,
                        };
                        edits.push(match (shown, text, before) {
                            (Json::String(s), true, _) => {
                                JsonEdit::Splice(path, offset, old_width, s)
                            }
                            (shown, false, Some(_)) => {
                                JsonEdit::Set(with(path, Step::Index(offset)), shown)
                            }
                            (shown, false, None) => {
                                JsonEdit::Insert(with(path, Step::Index(offset)), shown)
                            }
                            _ => return None,
                        });
                    }
                }
                Some(())
            }
            _ => None,
        }
    }

    /// Replaces the operations `pred` of `current` (each must be there) as `action` does:
    /// the winner after, and for an increment its amount. A put or a new object becomes a
    /// current operation; a deletion must name at least one; an increment names exactly
    /// one counter and leaves it current.
    fn replace(
        &self,
        current: &mut Vec<ValueOp>,
        pred: &[OpId],
        value: Option<ValueOp>,
        action: &OpType,
    ) -> Option<(Option<ValueOp>, Option<i64>)> {
        if !pred.iter().all(|p| current.iter().any(|c| c.id == *p)) {
            return None;
        }
        match action {
            OpType::Increment(by) => {
                let [counter] = pred else { return None };
                let target = current.iter().find(|c| c.id == *counter)?;
                (target.kind == ValueKind::Counter).then_some((self.winner(current), Some(*by)))
            }
            OpType::Delete if !pred.is_empty() => {
                current.retain(|c| !pred.contains(&c.id));
                Some((self.winner(current), None))
            }
            OpType::Put(_) | OpType::Make(_) => {
                current.retain(|c| !pred.contains(&c.id));
                current.push(value?);
                Some((self.winner(current), None))
            }
            _ => None,
        }
    }

    /// Where `obj` is in the JSON: `None` when it is not shown (a losing value of a
    /// conflict, deleted, inside text, or below such an object).
    pub fn path(&self, mut obj: OpId) -> Option<Vec<Step>> {
        let mut steps = Vec::new();
        while obj != ROOT {
            let (parent, key) = self.objects.get(&obj)?.parent.as_ref()?;
            let parent_obj = self.objects.get(parent)?;
            match (key, &parent_obj.body) {
                (ParentKey::Map(key), Body::Map(keys)) => {
                    if self.winner(keys.get(key)?)?.id != obj {
                        return None;
                    }
                    steps.push(Step::Key(key.clone()));
                }
                (ParentKey::Elem(elem), Body::Seq(runs)) if parent_obj.kind == ObjKind::List => {
                    let (at, offset) = find(runs, *elem)?;
                    let shows = match &runs[at.0].state {
                        ElemState::Shown { .. } => *elem == obj,
                        ElemState::Values { values, .. } => self.winner(values)?.id == obj,
                        ElemState::Hidden => false,
                    };
                    if !shows {
                        return None;
                    }
                    steps.push(Step::Index(offset));
                }
                _ => return None,
            }
            obj = *parent;
        }
        steps.reverse();
        Some(steps)
    }
}

fn with(mut path: Vec<Step>, step: Step) -> Vec<Step> {
    path.push(step);
    path
}

impl ObjKind {
    fn empty_body(self) -> Body {
        match self {
            ObjKind::Map | ObjKind::Table => Body::Map(BTreeMap::new()),
            ObjKind::List | ObjKind::Text => Body::Seq(Vec::new()),
        }
    }
}

/// The run holding element `elem` and its position in it, and the element's offset: the
/// widths of the shown elements before it.
fn find(runs: &[Run], elem: OpId) -> Option<((usize, u64), u64)> {
    let mut offset = 0u64;
    for (index, run) in runs.iter().enumerate() {
        if run.actor == elem.actor
            && run.start <= elem.counter
            && elem.counter < run.start + run.len
        {
            let at = elem.counter - run.start;
            return Some(((index, at), offset + at * run.state.width()));
        }
        offset += run.len * run.state.width();
    }
    None
}

/// Splits runs so that the element at `at` is a run of its own, and gives it `state`.
fn set_element_state(runs: &mut Vec<Run>, (index, into): (usize, u64), state: ElemState) {
    let run = runs[index].clone();
    let mut pieces = Vec::with_capacity(3);
    if into > 0 {
        pieces.push(Run { len: into, ..run.clone() });
    }
    pieces.push(Run { actor: run.actor, start: run.start + into, len: 1, state });
    if into + 1 < run.len {
        pieces.push(Run { start: run.start + into + 1, len: run.len - into - 1, ..run });
    }
    replace_runs(runs, index, 1, pieces);
}

/// Replaces `remove` runs at `index` with `pieces`, then joins runs around them whose ids
/// follow on in one state, so that runs stay as few as a fresh build makes them.
fn replace_runs(runs: &mut Vec<Run>, index: usize, remove: usize, pieces: Vec<Run>) {
    let added = pieces.len();
    runs.splice(index..index + remove, pieces);
    let low = index.saturating_sub(1);
    let mut at = (index + added).min(runs.len().saturating_sub(1));
    while at > low {
        if joins(&runs[at - 1], &runs[at]) {
            let run = runs.remove(at);
            runs[at - 1].len += run.len;
        }
        at -= 1;
    }
}

fn joins(first: &Run, second: &Run) -> bool {
    first.actor == second.actor
        && first.start + first.len == second.start
        && first.state == second.state
        && !matches!(first.state, ElemState::Values { .. })
}

fn push_run(runs: &mut Vec<Run>, run: Run) {
    match runs.last_mut() {
        Some(last) if joins(last, &run) => last.len += run.len,
        _ => runs.push(run),
    }
}

/// Inserts element `id` after `reference` (`None`: at the start) as Automerge orders a
/// sequence: past the elements right after the reference whose ids are later than the new
/// one's. Returns the new element's offset.
fn insert_element(
    runs: &mut Vec<Run>,
    reference: Option<OpId>,
    id: OpId,
    state: ElemState,
    actors: &[ActorId],
) -> Option<u64> {
    let later = |a: OpId, b: OpId| {
        (a.counter, &actors[a.actor as usize]) > (b.counter, &actors[b.actor as usize])
    };
    // Right after the reference: a run's index, how many of its elements come before, and
    // the offset.
    let (mut index, mut into, mut offset) = match reference {
        None => (0, 0, 0),
        Some(reference) => {
            let ((index, at), offset) = find(runs, reference)?;
            (index, at + 1, offset + runs[index].state.width())
        }
    };
    while let Some(run) = runs.get(index) {
        if into == run.len {
            (index, into) = (index + 1, 0);
            continue;
        }
        if !later(OpId { counter: run.start + into, actor: run.actor }, id) {
            break;
        }
        offset += run.state.width();
        into += 1;
    }
    let new = Run { actor: id.actor, start: id.counter, len: 1, state };
    match runs.get(index) {
        Some(run) if into > 0 => {
            let head = Run { len: into, ..run.clone() };
            let tail = Run { start: run.start + into, len: run.len - into, ..run.clone() };
            replace_runs(runs, index, 1, vec![head, new, tail]);
        }
        _ => replace_runs(runs, index, 0, vec![new]),
    }
    Some(offset)
}

/// The JSON edits of one change, joined where they follow on: characters typed one after
/// another make one splice, and what is written inside a value set earlier in the change
/// (an object made with content) goes into that value.
#[derive(Default)]
struct Edits(Vec<JsonEdit>);

impl Edits {
    fn push(&mut self, edit: JsonEdit) {
        if let Some(last) = self.0.last_mut() {
            if last.absorb(&edit) {
                return;
            }
        }
        self.0.push(edit);
    }
}

/// Builds the index from a document's operation groups: a map key's operations, or an
/// element's insertion and the operations on it.
struct Builder {
    structure: Structure,
}

impl Builder {
    fn new(actors: Vec<ActorId>) -> Builder {
        let mut objects = HashMap::new();
        objects.insert(
            ROOT,
            Object { kind: ObjKind::Map, parent: None, body: Body::Map(BTreeMap::new()) },
        );
        Builder { structure: Structure { actors, objects } }
    }

    fn id(&self, (counter, actor): RawOpId) -> OpId {
        OpId { counter, actor: actor as u32 }
    }

    fn group(&mut self, group: &[RawOp<'_>]) -> Option<()> {
        let first = &group[0];
        let obj = first.obj.map_or(ROOT, |obj| self.id(obj));
        let increments: Vec<OpId> = group
            .iter()
            .filter(|op| op.action == action::INCREMENT)
            .map(|op| self.id(op.id))
            .collect();
        let mut current = Vec::new();
        for op in group {
            let kind = match (op.action, op.value) {
                (action::SET, RawValue::Counter(_)) => ValueKind::Counter,
                (action::SET, _) => ValueKind::Scalar,
                (other, _) => match ObjKind::of_action(other) {
                    Some(kind) => ValueKind::Object(kind),
                    None => continue,
                },
            };
            let id = self.id(op.id);
            if let ValueKind::Object(kind) = kind {
                let key = match op.key {
                    RawKey::Map(key) => ParentKey::Map(key.to_string()),
                    RawKey::Elem(_) | RawKey::Head if op.insert => ParentKey::Elem(id),
                    RawKey::Elem(elem) => ParentKey::Elem(self.id(elem)),
                    RawKey::Head => return None,
                };
                self.structure
                    .objects
                    .insert(id, Object { kind, parent: Some((obj, key)), body: kind.empty_body() });
            }
            let shown = op
                .succ
                .iter()
                .all(|succ| kind == ValueKind::Counter && increments.contains(&self.id(*succ)));
            if shown {
                current.push(ValueOp { id, kind });
            }
        }
        let object = self.structure.objects.get(&obj)?;
        let text = object.kind == ObjKind::Text;
        let winner = self.structure.winner(&current);
        let opaque = match &object.body {
            Body::Opaque => return Some(()),
            Body::Map(_) => match first.key {
                RawKey::Map(key) if !first.insert => {
                    let Body::Map(keys) = &mut self.structure.objects.get_mut(&obj)?.body else {
                        return None;
                    };
                    if !current.is_empty() {
                        keys.insert(key.to_string(), current);
                    }
                    false
                }
                _ => true,
            },
            Body::Seq(_) if !first.insert => true,
            Body::Seq(_) => {
                let elem = self.id(first.id);
                let width = match winner {
                    None => Some(0),
                    Some(_) if !text => Some(1),
                    Some(ValueOp { kind: ValueKind::Object(_), .. }) => Some(1),
                    Some(winner) => {
                        group.iter().find(|op| self.id(op.id) == winner.id).and_then(|op| match op
                            .value
                        {
                            RawValue::Str(s) => Some(s.chars().count() as u32),
                            _ => None,
                        })
                    }
                };
                match width {
                    None => true,
                    Some(width) => {
                        let state = match current.as_slice() {
                            [] => ElemState::Hidden,
                            [only] if only.id == elem => {
                                ElemState::Shown { width, kind: only.kind }
                            }
                            _ => ElemState::Values { width, values: current },
                        };
                        let Body::Seq(runs) = &mut self.structure.objects.get_mut(&obj)?.body
                        else {
                            return None;
                        };
                        push_run(
                            runs,
                            Run { actor: elem.actor, start: elem.counter, len: 1, state },
                        );
                        false
                    }
                }
            }
        };
        if opaque {
            self.structure.objects.get_mut(&obj)?.body = Body::Opaque;
        }
        Some(())
    }
}

// --- Stored form ---------------------------------------------------------------------

const ENCODING_VERSION: u8 = 1;

impl Structure {
    /// The stored form: LZ4-compressed, objects in id order so that equal indexes encode
    /// equally.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![ENCODING_VERSION];
        let uleb = leb128::write_uleb;
        let mut body = Vec::new();
        uleb(&mut body, self.actors.len() as u64);
        for actor in &self.actors {
            uleb(&mut body, actor.to_bytes().len() as u64);
            body.extend_from_slice(actor.to_bytes());
        }
        let mut ids: Vec<&OpId> = self.objects.keys().collect();
        ids.sort();
        uleb(&mut body, ids.len() as u64);
        let id = |out: &mut Vec<u8>, id: OpId| {
            uleb(out, id.counter);
            uleb(out, u64::from(id.actor));
        };
        let string = |out: &mut Vec<u8>, s: &str| {
            uleb(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        };
        let values = |out: &mut Vec<u8>, values: &[ValueOp]| {
            uleb(out, values.len() as u64);
            for value in values {
                id(out, value.id);
                out.push(value.kind.code());
            }
        };
        for obj in ids {
            let object = &self.objects[obj];
            id(&mut body, *obj);
            let body_code = match object.body {
                Body::Map(_) => 0,
                Body::Seq(_) => 1,
                Body::Opaque => 2,
            };
            body.push(object.kind.code() | body_code << 4);
            match &object.parent {
                None => body.push(0),
                Some((parent, ParentKey::Map(key))) => {
                    body.push(1);
                    id(&mut body, *parent);
                    string(&mut body, key);
                }
                Some((parent, ParentKey::Elem(elem))) => {
                    body.push(2);
                    id(&mut body, *parent);
                    id(&mut body, *elem);
                }
            }
            match &object.body {
                Body::Map(keys) => {
                    uleb(&mut body, keys.len() as u64);
                    for (key, current) in keys {
                        string(&mut body, key);
                        values(&mut body, current);
                    }
                }
                Body::Seq(runs) => {
                    uleb(&mut body, runs.len() as u64);
                    let mut previous = 0i64;
                    for run in runs {
                        uleb(&mut body, u64::from(run.actor));
                        leb128::write_sleb(&mut body, run.start as i64 - previous);
                        previous = run.start as i64;
                        uleb(&mut body, run.len);
                        match &run.state {
                            ElemState::Hidden => body.push(0),
                            ElemState::Shown { width, kind } => {
                                body.push(1);
                                uleb(&mut body, u64::from(*width));
                                body.push(kind.code());
                            }
                            ElemState::Values { width, values: current } => {
                                body.push(2);
                                uleb(&mut body, u64::from(*width));
                                values(&mut body, current);
                            }
                        }
                    }
                }
                Body::Opaque => {}
            }
        }
        out.extend_from_slice(&lz4_flex::compress_prepend_size(&body));
        out
    }

    /// The stored form read back; `None` (the writes load) when it does not read.
    pub fn decode(bytes: &[u8]) -> Option<Structure> {
        let (&version, compressed) = bytes.split_first()?;
        if version != ENCODING_VERSION {
            return None;
        }
        // The raw length is bounded, as for the kept JSON, so a corrupt prefix cannot ask
        // for an unbounded allocation.
        let raw_len = u32::from_le_bytes(compressed.get(..4)?.try_into().ok()?) as usize;
        if raw_len > compressed.len().saturating_mul(255) {
            return None;
        }
        let body = lz4_flex::decompress_size_prepended(compressed).ok()?;
        let mut r = Reader(&body);
        let mut structure = Structure::default();
        for _ in 0..r.uleb()? {
            let len = r.uleb()?;
            structure.actors.push(ActorId::from(r.take(len)?));
        }
        let actors = structure.actors.len() as u64;
        for _ in 0..r.uleb()? {
            let obj = r.id(actors)?;
            let code = r.byte()?;
            let kind = ObjKind::from_code(code & 0xf)?;
            let parent = match r.byte()? {
                0 => None,
                1 => Some((r.id(actors)?, ParentKey::Map(r.string()?))),
                2 => Some((r.id(actors)?, ParentKey::Elem(r.id(actors)?))),
                _ => return None,
            };
            let body = match code >> 4 {
                0 => {
                    let mut keys = BTreeMap::new();
                    for _ in 0..r.uleb()? {
                        let key = r.string()?;
                        keys.insert(key, r.values(actors)?);
                    }
                    Body::Map(keys)
                }
                1 => {
                    let mut runs = Vec::new();
                    let mut previous = 0i64;
                    for _ in 0..r.uleb()? {
                        let actor =
                            u32::try_from(r.uleb()?).ok().filter(|a| u64::from(*a) < actors)?;
                        previous = previous.checked_add(r.sleb()?)?;
                        let len = r.uleb()?;
                        let state = match r.byte()? {
                            0 => ElemState::Hidden,
                            1 => ElemState::Shown {
                                width: r.u32()?,
                                kind: ValueKind::from_code(r.byte()?)?,
                            },
                            2 => ElemState::Values { width: r.u32()?, values: r.values(actors)? },
                            _ => return None,
                        };
                        runs.push(Run { actor, start: u64::try_from(previous).ok()?, len, state });
                    }
                    Body::Seq(runs)
                }
                2 => Body::Opaque,
                _ => return None,
            };
            structure.objects.insert(obj, Object { kind, parent, body });
        }
        r.0.is_empty().then_some(structure)
    }
}

impl ObjKind {
    fn code(self) -> u8 {
        match self {
            ObjKind::Map => 0,
            ObjKind::Table => 1,
            ObjKind::List => 2,
            ObjKind::Text => 3,
        }
    }

    fn from_code(code: u8) -> Option<ObjKind> {
        [ObjKind::Map, ObjKind::Table, ObjKind::List, ObjKind::Text].get(code as usize).copied()
    }
}

impl ValueKind {
    fn code(self) -> u8 {
        match self {
            ValueKind::Scalar => 0,
            ValueKind::Counter => 1,
            ValueKind::Unknown => 2,
            ValueKind::Object(kind) => 3 + kind.code(),
        }
    }

    fn from_code(code: u8) -> Option<ValueKind> {
        Some(match code {
            0 => ValueKind::Scalar,
            1 => ValueKind::Counter,
            2 => ValueKind::Unknown,
            other => ValueKind::Object(ObjKind::from_code(other.checked_sub(3)?)?),
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn uleb(&mut self) -> Option<u64> {
        let (value, rest) = leb128::split_uleb(self.0)?;
        self.0 = rest;
        Some(value)
    }

    fn sleb(&mut self) -> Option<i64> {
        let mut bytes = self.0.iter();
        let value = leb128::read_sleb(|| bytes.next().copied())?;
        self.0 = bytes.as_slice();
        Some(value)
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.uleb()?).ok()
    }

    fn take(&mut self, len: u64) -> Option<&'a [u8]> {
        let len = usize::try_from(len).ok().filter(|len| *len <= self.0.len())?;
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(taken)
    }

    fn string(&mut self) -> Option<String> {
        let len = self.uleb()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }

    fn id(&mut self, actors: u64) -> Option<OpId> {
        let counter = self.uleb()?;
        let actor = self.uleb()?;
        (actor < actors.max(1)).then_some(OpId { counter, actor: actor as u32 })
    }

    fn values(&mut self, actors: u64) -> Option<Vec<ValueOp>> {
        let count = self.uleb()?;
        let mut values = Vec::with_capacity(count.min(16) as usize);
        for _ in 0..count {
            let id = self.id(actors)?;
            values.push(ValueOp { id, kind: ValueKind::from_code(self.byte()?)? });
        }
        Some(values)
    }
}
