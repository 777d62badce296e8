//! The operations of one change, numbered as they are added, and JSON turned into them as
//! `@automerge/automerge` 3 turns a JavaScript value into a document's: objects become
//! maps, arrays lists, strings text objects (or plain strings when asked), integral numbers
//! integers and other numbers floats.

use std::num::NonZeroU64;

use automerge::legacy::{self, ElementId, Key, ObjectId, OpType};
use automerge::{ActorId, ObjType, ScalarValue};
use serde_json::Value as Json;

use crate::json::MAX_DEPTH;
use crate::structure::{OpId, Structure};
use crate::Error;

/// How a string of the JSON is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strings {
    /// A text object, as `doc.x = "…"` makes in `@automerge/automerge` 3: editable by
    /// splices, with marks.
    Text,
    /// A plain string value, replaced as a whole (`new ImmutableString(…)` in JS).
    Plain,
}

/// The operations of a change being built by `actor`, whose first counter is `start`.
pub struct Ops<'a> {
    pub structure: &'a Structure,
    pub actor: ActorId,
    pub start: NonZeroU64,
    pub ops: Vec<legacy::Op>,
}

impl<'a> Ops<'a> {
    pub fn new(structure: &'a Structure, actor: ActorId, start: NonZeroU64) -> Self {
        Ops { structure, actor, start, ops: Vec::new() }
    }

    /// The id the next operation gets.
    fn next_id(&self) -> legacy::OpId {
        legacy::OpId(self.start.get() + self.ops.len() as u64, self.actor.clone())
    }

    /// An index id as the change names it.
    pub fn id(&self, id: OpId) -> legacy::OpId {
        legacy::OpId(id.counter, self.structure.actors[id.actor as usize].clone())
    }

    /// An object id as the change names it.
    pub fn obj(&self, obj: OpId) -> ObjectId {
        if obj == self.structure.root() {
            ObjectId::Root
        } else {
            ObjectId::Id(self.id(obj))
        }
    }

    /// An element as the change names it, `None` being the start of the sequence.
    pub fn elem(&self, elem: Option<OpId>) -> Key {
        match elem {
            None => Key::Seq(ElementId::Head),
            Some(elem) => Key::Seq(ElementId::Id(self.id(elem))),
        }
    }

    /// Adds an operation; its id.
    pub fn push(
        &mut self,
        action: OpType,
        obj: ObjectId,
        key: Key,
        pred: &[OpId],
        insert: bool,
    ) -> legacy::OpId {
        let id = self.next_id();
        let pred = pred.iter().map(|p| self.id(*p)).collect();
        self.ops.push(legacy::Op { action, obj, key, pred, insert });
        id
    }

    /// Writes `value` at `key` of `obj` (inserted after `key`'s element when `insert`),
    /// replacing the operations `pred`; the id of the operation that holds it.
    pub fn put_json(
        &mut self,
        obj: ObjectId,
        key: Key,
        insert: bool,
        pred: &[OpId],
        value: &Json,
        strings: Strings,
    ) -> Result<legacy::OpId, Error> {
        self.put_nested(obj, key, insert, pred, value, strings, 0)
    }

    #[allow(clippy::too_many_arguments)]
    fn put_nested(
        &mut self,
        obj: ObjectId,
        key: Key,
        insert: bool,
        pred: &[OpId],
        value: &Json,
        strings: Strings,
        depth: usize,
    ) -> Result<legacy::OpId, Error> {
        if depth >= MAX_DEPTH {
            return Err(Error::TooDeep { limit: MAX_DEPTH });
        }
        let made = |ops: &mut Self, obj_type| {
            ops.push(OpType::Make(obj_type), obj.clone(), key.clone(), pred, insert)
        };
        Ok(match value {
            Json::Object(entries) => {
                let map = made(self, ObjType::Map);
                for (name, item) in entries {
                    let inner = ObjectId::Id(map.clone());
                    self.put_nested(
                        inner,
                        Key::Map(name.as_str().into()),
                        false,
                        &[],
                        item,
                        strings,
                        depth + 1,
                    )?;
                }
                map
            }
            Json::Array(items) => {
                let list = made(self, ObjType::List);
                let mut after = ElementId::Head;
                for item in items {
                    let inner = ObjectId::Id(list.clone());
                    let id = self.put_nested(
                        inner,
                        Key::Seq(after),
                        true,
                        &[],
                        item,
                        strings,
                        depth + 1,
                    )?;
                    after = ElementId::Id(id);
                }
                list
            }
            Json::String(text) if strings == Strings::Text => {
                let made = made(self, ObjType::Text);
                self.insert_text(ObjectId::Id(made.clone()), None, text);
                made
            }
            Json::String(plain) => {
                let value = ScalarValue::Str(plain.as_str().into());
                self.push(OpType::Put(value), obj, key, pred, insert)
            }
            Json::Null => self.push(OpType::Put(ScalarValue::Null), obj, key, pred, insert),
            Json::Bool(b) => {
                self.push(OpType::Put(ScalarValue::Boolean(*b)), obj, key, pred, insert)
            }
            Json::Number(n) => self.push(OpType::Put(number(n)), obj, key, pred, insert),
        })
    }

    /// Inserts `text` into the text `obj` after element `after` (`None`: at its start), a
    /// character to an element as the Automerge libraries do.
    pub fn insert_text(&mut self, obj: ObjectId, after: Option<legacy::OpId>, text: &str) {
        let mut after = after.map_or(ElementId::Head, ElementId::Id);
        for character in text.chars() {
            let value = ScalarValue::Str(character.to_string().into());
            let id = self.push(OpType::Put(value), obj.clone(), Key::Seq(after), &[], true);
            after = ElementId::Id(id);
        }
    }
}

/// What a JSON number becomes in `@automerge/automerge`: an integer when it is a safe
/// integer of JavaScript (`1.0` included, as `JSON.parse` reads it), else a float.
pub fn number(n: &serde_json::Number) -> ScalarValue {
    const SAFE: f64 = 9_007_199_254_740_991.0;
    match n.as_i64() {
        Some(i) if (i as f64).abs() <= SAFE => ScalarValue::Int(i),
        _ => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() <= SAFE {
                ScalarValue::Int(f as i64)
            } else {
                ScalarValue::F64(f)
            }
        }
    }
}
