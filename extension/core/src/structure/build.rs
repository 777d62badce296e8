//! Building the index from a save's operation columns, one operation group at a time.

use automerge::ActorId;
use smallvec::SmallVec;

use super::runs::push_run;
use super::{
    Body, ElemState, MapKeys, ObjKind, Object, Objects, OpId, ParentKey, Run, Structure, ValueKind,
    ValueOp, ROOT,
};
use crate::doc_ops::{action, DocumentOps, RawKey, RawOp, RawOpId, RawValue};

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
        Some((builder.finish(), max_op))
    }
}

/// Builds the index from a document's operation groups: a map key's operations, or an
/// element's insertion and the operations on it.
struct Builder {
    structure: Structure,
    /// The object whose operations are being read, out of the map while they are: a
    /// document's operations come object by object.
    open: Option<(OpId, Object)>,
}

impl Builder {
    fn new(actors: Vec<ActorId>) -> Builder {
        let mut objects = Objects::default();
        objects.insert(
            ROOT,
            Object { kind: ObjKind::Map, parent: None, body: Body::Map(MapKeys::default()) },
        );
        let latest_max_op = vec![None; actors.len()];
        Builder { structure: Structure { actors, latest_max_op, objects }, open: None }
    }

    fn finish(mut self) -> Structure {
        if let Some((id, object)) = self.open.take() {
            self.structure.objects.insert(id, object);
        }
        self.structure
    }

    /// The object `obj`, opened for its operations.
    fn open(&mut self, obj: OpId) -> Option<&mut Object> {
        if self.open.as_ref().map(|(id, _)| *id) != Some(obj) {
            if let Some((id, object)) = self.open.take() {
                self.structure.objects.insert(id, object);
            }
            let object = self.structure.objects.remove(&obj)?;
            self.open = Some((obj, object));
        }
        self.open.as_mut().map(|(_, object)| object)
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
        let mut current: SmallVec<[ValueOp; 1]> = SmallVec::new();
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
                    RawKey::Map(key) => ParentKey::Map(key.into()),
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
        let winner = self.structure.winner(&current);
        let object = self.open(obj)?;
        let text = object.kind == ObjKind::Text;
        let opaque = match &mut object.body {
            Body::Opaque => false,
            Body::Map(keys) => match first.key {
                RawKey::Map(key) if !first.insert => {
                    keys.set(key.into(), current);
                    false
                }
                _ => true,
            },
            Body::Seq(_) if !first.insert => true,
            Body::Seq(runs) => {
                let elem = OpId { counter: first.id.0, actor: first.id.1 as u32 };
                let width = match winner {
                    None => Some(0),
                    Some(_) if !text => Some(1),
                    Some(ValueOp { kind: ValueKind::Object(_), .. }) => Some(1),
                    Some(winner) => group
                        .iter()
                        .find(|op| {
                            (op.id.0, op.id.1 as u32) == (winner.id.counter, winner.id.actor)
                        })
                        .and_then(|op| match op.value {
                            RawValue::Str(s) => Some(s.chars().count() as u32),
                            _ => None,
                        }),
                };
                match width {
                    None => true,
                    Some(width) => {
                        let state = match current.as_slice() {
                            [] => ElemState::Hidden,
                            [only] if only.id == elem => {
                                ElemState::Shown { width, kind: only.kind }
                            }
                            _ => ElemState::Values { width, values: Box::new(current) },
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
            object.body = Body::Opaque;
        }
        Some(())
    }
}
