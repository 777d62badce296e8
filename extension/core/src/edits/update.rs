//! The smallest change that turns a document's JSON into a given one, as
//! `@automerge/automerge`'s `updateText` and a careful client would make it: maps edited
//! key by key, objects that stay objects edited in place, lists diffed by their common
//! start and end (elements between edited in place, the rest inserted or deleted), texts
//! spliced between their common start and end, counters incremented. A value whose kind
//! changes is replaced.

use automerge::legacy::{Key, ObjectId, OpType};
use serde_json::{Map, Value as Json};

use super::ops::{number, Ops, Strings};
use super::splice;
use crate::json::MAX_DEPTH;
use crate::structure::{value_ids, ObjKind, OpId, ValueKind, ValueOp};
use crate::Error;

/// Adds to `ops` what turns `current` (the document's JSON) into `target`; `Ok(None)` when
/// the index does not model an object the change would touch, or its JSON disagrees with
/// the index.
pub(super) fn update(
    ops: &mut Ops<'_>,
    current: &Json,
    target: &Json,
    strings: Strings,
) -> Result<Option<()>, Error> {
    let (Json::Object(current), Json::Object(target)) = (current, target) else {
        return Err(Error::InvalidParameter(
            "a document's root is a map: update it to a JSON object".into(),
        ));
    };
    let root = ops.structure.root();
    Ok(Diff { ops, strings }.map(root, current, target, 0))
}

struct Diff<'o, 'a> {
    ops: &'o mut Ops<'a>,
    strings: Strings,
}

impl Diff<'_, '_> {
    fn map(
        &mut self,
        obj: OpId,
        current: &Map<String, Json>,
        target: &Map<String, Json>,
        depth: usize,
    ) -> Option<()> {
        let structure = self.ops.structure;
        structure.modelled_kind(obj)?;
        let obj_id = self.ops.obj(obj);
        for key in current.keys().filter(|key| !target.contains_key(*key)) {
            let pred = value_ids(structure.key_values(obj, key)?);
            self.ops.push(
                OpType::Delete,
                obj_id.clone(),
                Key::Map(key.as_str().into()),
                &pred,
                false,
            );
        }
        for (key, wanted) in target {
            let at = Key::Map(key.as_str().into());
            match current.get(key) {
                // `value` leaves an unchanged value as it is, comparing it once.
                Some(shown) => {
                    let pred = value_ids(structure.key_values(obj, key)?);
                    let winner = structure.key_value(obj, key)?;
                    self.value(obj_id.clone(), at, winner, &pred, shown, wanted, depth)?;
                }
                None => {
                    self.ops.put_json(obj_id.clone(), at, false, &[], wanted, self.strings).ok()?;
                }
            }
        }
        Some(())
    }

    /// Turns the value `winner` (of operations `pred`) at `key` of `obj`, which shows
    /// `shown`, into `wanted`.
    #[allow(clippy::too_many_arguments)]
    fn value(
        &mut self,
        obj: ObjectId,
        key: Key,
        winner: ValueOp,
        pred: &[OpId],
        shown: &Json,
        wanted: &Json,
        depth: usize,
    ) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        if same(shown, wanted) {
            return Some(());
        }
        match (winner.kind, shown, wanted) {
            (ValueKind::Unknown, _, _) => return None,
            (
                ValueKind::Object(ObjKind::Map | ObjKind::Table),
                Json::Object(s),
                Json::Object(w),
            ) => return self.map(winner.id, s, w, depth + 1),
            (ValueKind::Object(ObjKind::List), Json::Array(s), Json::Array(w)) => {
                return self.list(winner.id, s, w, depth + 1)
            }
            (ValueKind::Object(ObjKind::Text), Json::String(s), Json::String(w)) => {
                return self.text(winner.id, s, w)
            }
            (ValueKind::Counter, Json::Number(s), Json::Number(w)) => {
                if let (Some(s), Some(w)) = (s.as_i64(), w.as_i64()) {
                    let by = w.checked_sub(s)?;
                    self.ops.push(OpType::Increment(by), obj, key, &[winner.id], false);
                    return Some(());
                }
            }
            (ValueKind::Scalar, Json::String(_), Json::String(_)) => {
                // A plain string stays one.
                self.ops.put_json(obj, key, false, pred, wanted, Strings::Plain).ok()?;
                return Some(());
            }
            _ => {}
        }
        self.ops.put_json(obj, key, false, pred, wanted, self.strings).ok()?;
        Some(())
    }

    fn list(&mut self, list: OpId, shown: &[Json], wanted: &[Json], depth: usize) -> Option<()> {
        let structure = self.ops.structure;
        let elements = structure.shown(list)?;
        if elements.totals().0 != shown.len() {
            return None;
        }
        let prefix = shown.iter().zip(wanted).take_while(|(s, w)| same(s, w)).count();
        let rest = shown.len().min(wanted.len()) - prefix;
        let suffix = shown
            .iter()
            .rev()
            .zip(wanted.iter().rev())
            .take(rest)
            .take_while(|(s, w)| same(s, w))
            .count();
        let (old, new) =
            (&shown[prefix..shown.len() - suffix], &wanted[prefix..wanted.len() - suffix]);
        let obj = self.ops.obj(list);
        let paired = old.len().min(new.len());
        // Only the elements between the common start and end are made.
        let mut elements = elements.elements();
        let before_changed = elements.pass(prefix);
        let changed: Vec<_> = elements.take(old.len()).collect();
        for i in 0..paired {
            let element = &changed[i];
            let pred = value_ids(&element.values);
            let winner = structure.element_value(element)?;
            let key = self.ops.elem(Some(element.elem));
            self.value(obj.clone(), key, winner, &pred, &old[i], &new[i], depth)?;
        }
        for element in &changed[paired..] {
            let pred = value_ids(&element.values);
            let key = self.ops.elem(Some(element.elem));
            self.ops.push(OpType::Delete, obj.clone(), key, &pred, false);
        }
        let last_kept = match paired {
            0 => before_changed,
            _ => changed.get(paired - 1).cloned(),
        };
        let mut after = last_kept.map(|element| self.ops.elem(Some(element.elem)));
        for item in &new[paired..] {
            let key = after.unwrap_or_else(|| self.ops.elem(None));
            let id = self.ops.put_json(obj.clone(), key, true, &[], item, self.strings).ok()?;
            after = Some(Key::Seq(automerge::legacy::ElementId::Id(id)));
        }
        Some(())
    }

    fn text(&mut self, text: OpId, shown: &str, wanted: &str) -> Option<()> {
        let elements = self.ops.structure.shown(text)?;
        let (s, w): (Vec<char>, Vec<char>) = (shown.chars().collect(), wanted.chars().collect());
        if elements.totals().1 != s.len() as u64 {
            return None;
        }
        let prefix = s.iter().zip(&w).take_while(|(a, b)| a == b).count();
        let rest = s.len().min(w.len()) - prefix;
        let suffix =
            s.iter().rev().zip(w.iter().rev()).take(rest).take_while(|(a, b)| a == b).count();
        let inserted: String = w[prefix..w.len() - suffix].iter().collect();
        let deleted = (s.len() - suffix - prefix) as i64;
        // A cluster of several characters in one element that the diff cuts is replaced whole.
        splice(self.ops, text, elements, (prefix as i64, deleted), &inserted, "").ok()
    }
}

/// Whether two JSON values show the same document: numbers compare as the values they
/// become (`1.0` is the integer 1, as in JavaScript).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => number(x) == number(y),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, x)| y.get(key).is_some_and(|y| same(x, y)))
        }
        _ => a == b,
    }
}
