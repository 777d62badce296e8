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

use std::collections::BTreeMap;
use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use automerge::legacy::{ElementId, Key, ObjectId, OpType};
use automerge::{ActorId, Change, ObjType};
use serde_json::Value as Json;

use crate::doc_ops::action;
use crate::guard::no_panic;
use crate::json;
use crate::json_edit::{JsonEdit, Step};

mod build;
mod encoding;
mod heap;
mod locate;
mod runs;

pub use locate::{value_ids, Found, Shown, ShownElement, ShownElements};

use runs::{find, insert_element, set_element_state};

/// An operation id: its counter and its actor's index in [`Structure::actors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct OpId {
    pub counter: u64,
    pub actor: u32,
}

/// The root map's id.
pub(crate) const ROOT: OpId = OpId { counter: 0, actor: 0 };

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

/// A map key, shared by every map that has it.
pub type KeyName = Rc<str>;

/// The current operations of a key or element: usually one.
pub type Values = SmallVec<[ValueOp; 1]>;

/// A map's keys in order, each with its current operations (never none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MapKeys(Vec<(KeyName, Values)>);

impl MapKeys {
    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(known, _)| known.as_ref().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&Values> {
        self.position(key).ok().map(|at| &self.0[at].1)
    }

    /// Sets `key`'s operations; none removes it.
    pub fn set(&mut self, key: KeyName, values: Values) {
        match (self.position(&key), values.is_empty()) {
            (Ok(at), true) => drop(self.0.remove(at)),
            (Ok(at), false) => self.0[at].1 = values,
            (Err(_), true) => {}
            (Err(at), false) => self.0.insert(at, (key, values)),
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(KeyName, Values)> {
        self.0.iter()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentKey {
    Map(KeyName),
    Elem(OpId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Map(MapKeys),
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
    /// One element whose current values were put after its insertion (boxed: few
    /// elements are, and every run of a long text is the size of this state).
    Values { width: u32, values: Box<Values> },
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

/// Every object by its id. Ids are small integers: rustc's fast hash is enough, and a write
/// decodes and encodes tens of thousands of them.
pub type Objects = FxHashMap<OpId, Object>;

/// The index of one document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Structure {
    pub actors: Vec<ActorId>,
    /// For each of `actors`, the largest operation counter of its latest change, where
    /// known: what a change that depends on it must start right after.
    pub latest_max_op: Vec<Option<u64>>,
    pub objects: Objects,
}

/// The object character of a block marker in text's JSON, as `text()` shows it.
const BLOCK_MARKER: char = '\u{fffc}';

impl Structure {
    /// An index of the root map alone, from what format version 2 kept: every other
    /// object is unknown, so writes that touch one load.
    pub fn of_root_table(root: &BTreeMap<String, Vec<(u64, ActorId)>>) -> Structure {
        let mut structure = Structure::default();
        let mut keys = MapKeys::default();
        for (key, ops) in root {
            let values = ops
                .iter()
                .map(|(counter, actor)| ValueOp {
                    id: OpId { counter: *counter, actor: structure.actor_index(actor) },
                    kind: ValueKind::Unknown,
                })
                .collect();
            keys.0.push((key.as_str().into(), values));
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
                (key.to_string(), ops)
            })
            .collect()
    }

    /// The same index with its actors in id order: indexes of one document built in
    /// different ways compare equal.
    pub fn canonical(&self) -> Structure {
        let mut actors = self.actors.clone();
        actors.sort();
        let latest_max_op = actors.iter().map(|actor| self.latest_max_op(actor)).collect();
        let map: Vec<u32> = self
            .actors
            .iter()
            .map(|actor| actors.iter().position(|a| a == actor).unwrap_or_default() as u32)
            .collect();
        let id = |id: OpId| OpId { actor: map[id.actor as usize], ..id };
        let values = |values: &[ValueOp]| -> Values {
            let mut values: Values =
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
                    Body::Map(keys) => Body::Map(MapKeys(
                        keys.iter().map(|(key, current)| (key.clone(), values(current))).collect(),
                    )),
                    Body::Seq(runs) => Body::Seq(
                        runs.iter()
                            .map(|run| {
                                let state = match &run.state {
                                    ElemState::Values { width, values: current } => {
                                        ElemState::Values {
                                            width: *width,
                                            values: Box::new(values(current)),
                                        }
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
        Structure { actors, latest_max_op, objects }
    }

    fn actor_index(&mut self, actor: &ActorId) -> u32 {
        match self.actors.iter().position(|known| known == actor) {
            Some(index) => index as u32,
            None => {
                self.actors.push(actor.clone());
                self.latest_max_op.push(None);
                (self.actors.len() - 1) as u32
            }
        }
    }

    /// The largest operation counter of `actor`'s latest change, where known.
    pub fn latest_max_op(&self, actor: &ActorId) -> Option<u64> {
        let index = self.actors.iter().position(|known| known == actor)?;
        self.latest_max_op[index]
    }

    pub fn set_latest_max_op(&mut self, actor: &ActorId, max_op: u64) {
        let index = self.actor_index(actor) as usize;
        self.latest_max_op[index] = Some(max_op);
    }

    /// Whether `a` comes after `b` in Automerge's order of operations: by counter, then
    /// by actor id.
    fn later(&self, a: OpId, b: OpId) -> bool {
        (a.counter, &self.actors[a.actor as usize]) > (b.counter, &self.actors[b.actor as usize])
    }

    fn winner(&self, values: &[ValueOp]) -> Option<ValueOp> {
        values.iter().copied().reduce(|a, b| if self.later(b.id, a.id) { b } else { a })
    }

    /// Applies a change as a load would, when its operations start right after
    /// `deps_max_op`, the largest operation counter of its dependencies (as Automerge
    /// derives a change's first counter when it loads a save): the JSON edits it makes,
    /// in order; `None` when an operation names what the index does not have (an object,
    /// key, element or current operation) or does what it cannot follow, and the caller
    /// loads. On `None` the index may be half updated: drop it. `heap_bytes`, when given,
    /// is the index's [`heap_bytes`](Structure::heap_bytes) before, and is made what it is
    /// after, by counting again only the objects the change touches.
    pub fn apply(
        &mut self,
        change: &Change,
        deps_max_op: u64,
        heap_bytes: Option<&mut u64>,
    ) -> Option<Vec<JsonEdit>> {
        let start = change.start_op().get();
        if start != deps_max_op.checked_add(1)? {
            return None;
        }
        let ops = no_panic(|| change.decode()).ok()?.operations;
        if start.checked_add(ops.len() as u64)? != change.max_op().checked_add(1)? {
            return None;
        }
        let table_before = self.table_heap_bytes();
        let actor = self.actor_index(change.actor_id());
        // The objects the operations change, and those they make.
        let touched = heap_bytes.as_ref().map(|_| {
            let mut touched = FxHashSet::default();
            for (index, op) in ops.iter().enumerate() {
                match &op.obj {
                    ObjectId::Root => touched.insert(ROOT),
                    ObjectId::Id(obj) => self.known(obj).is_some_and(|obj| touched.insert(obj)),
                };
                if matches!(op.action, OpType::Make(_)) {
                    touched.insert(OpId { counter: start + index as u64, actor });
                }
            }
            let before = table_before + self.objects_heap_bytes(&touched);
            (touched, before)
        });
        let mut edits = Edits::default();
        // The object of the operation before, when it began a mark.
        let mut mark_begun_in = None;
        for (index, op) in ops.into_iter().enumerate() {
            let id = OpId { counter: start + index as u64, actor };
            let obj = match &op.obj {
                ObjectId::Root => ROOT,
                ObjectId::Id(obj) => self.known(obj)?,
            };
            // The loader's mark rule (see `mark_order`): a mark end's begin is the operation
            // one counter before it, earlier in the same sequence. The index follows it only
            // where that operation is this change's, which is how clients make marks.
            let ends_mark = matches!(op.action, OpType::MarkEnd(_));
            if ends_mark && mark_begun_in != Some(obj) {
                return None;
            }
            mark_begun_in = matches!(op.action, OpType::MarkBegin(..)).then_some(obj);
            self.apply_op(id, op, &mut edits)?;
            if ends_mark {
                let begin = OpId { counter: id.counter - 1, ..id };
                let Body::Seq(runs) = &self.objects.get(&obj)?.body else { return None };
                if !runs::comes_before(runs, begin, id)? {
                    return None;
                }
            }
        }
        self.latest_max_op[actor as usize] = Some(change.max_op());
        if let (Some(heap_bytes), Some((touched, before))) = (heap_bytes, touched) {
            let after = self.table_heap_bytes() + self.objects_heap_bytes(&touched);
            *heap_bytes = (*heap_bytes + after as u64).saturating_sub(before as u64);
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
                let key: KeyName = key.as_str().into();
                let Body::Map(keys) = &self.objects.get(&obj)?.body else { return None };
                let mut current = keys.get(&key).cloned().unwrap_or_default();
                let before = self.winner(&current);
                let (after, increment) = self.replace(&mut current, &pred, value, &op.action)?;
                let Body::Map(keys) = &mut self.objects.get_mut(&obj)?.body else { return None };
                keys.set(key.clone(), current);
                if let Some(ValueOp { id, kind: ValueKind::Object(kind) }) = value {
                    let parent = Some((obj, ParentKey::Map(key.clone())));
                    self.objects.insert(id, Object { kind, parent, body: kind.empty_body() });
                }
                let Some(mut path) = path else { return Some(()) };
                path.push(Step::Key(key.to_string()));
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
                    ElemState::Shown { kind, .. } => {
                        Values::from_buf([ValueOp { id: elem, kind: *kind }])
                    }
                    ElemState::Hidden => Values::new(),
                    ElemState::Values { values, .. } => Values::clone(values),
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
                    _ => ElemState::Values { width, values: Box::new(current.clone()) },
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
        current: &mut Values,
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
                    steps.push(Step::Key(key.to_string()));
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
            ObjKind::Map | ObjKind::Table => Body::Map(MapKeys::default()),
            ObjKind::List | ObjKind::Text => Body::Seq(Vec::new()),
        }
    }
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
