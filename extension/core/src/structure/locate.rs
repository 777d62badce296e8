//! Finding what a JSON path names in the index, for edits made from SQL: the object at a
//! path, a map key's current operations, the element shown at a list index, the elements
//! shown at a range of a text. Each answers as the JSON shows the document: the winning
//! value of a conflict, deleted elements skipped.

use super::{Body, ElemState, ObjKind, OpId, Structure, ValueKind, ValueOp, Values, ROOT};

/// One step of a path, read against the object it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The object itself.
    Object(OpId, ObjKind),
    /// A value that is not an object (or whose kind the index does not know).
    Scalar(ValueKind),
}

/// An element of a list or text as it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownElement {
    /// Its id: the operation that inserted it.
    pub elem: OpId,
    /// Its current values (usually the insertion itself).
    pub values: Values,
    /// Characters it shows (1 in a list).
    pub width: u64,
}

/// The ids of the operations `values` holds: what an operation replacing them names as
/// its predecessors.
pub fn value_ids(values: &[ValueOp]) -> Vec<OpId> {
    values.iter().map(|value| value.id).collect()
}

/// The characters (or list items) the elements show in all.
pub fn shown_width(elements: &[ShownElement]) -> u64 {
    elements.iter().map(|element| element.width).sum()
}

impl Structure {
    /// What a map key shows: its winning value. `None` when the map lacks the key, or the
    /// object is not a map the index models.
    pub fn key_value(&self, obj: OpId, key: &str) -> Option<ValueOp> {
        match &self.objects.get(&obj)?.body {
            Body::Map(keys) => self.winner(keys.get(key)?),
            _ => None,
        }
    }

    /// A map key's current operations, all of them (a conflict has several).
    pub fn key_values(&self, obj: OpId, key: &str) -> Option<&Values> {
        match &self.objects.get(&obj)?.body {
            Body::Map(keys) => keys.get(key),
            _ => None,
        }
    }

    /// The kind of the object `obj`, when the index models its body.
    pub fn modelled_kind(&self, obj: OpId) -> Option<ObjKind> {
        let object = self.objects.get(&obj)?;
        (!matches!(object.body, Body::Opaque)).then_some(object.kind)
    }

    /// The root map.
    pub fn root(&self) -> OpId {
        ROOT
    }

    /// The elements of a list or text that show, in order, with what each shows. `None`
    /// when `obj` is not a sequence the index models.
    pub fn shown_elements(&self, obj: OpId) -> Option<Vec<ShownElement>> {
        let Body::Seq(runs) = &self.objects.get(&obj)?.body else { return None };
        let mut shown = Vec::new();
        for run in runs {
            match &run.state {
                ElemState::Hidden => {}
                ElemState::Shown { width, kind } => {
                    for at in 0..run.len {
                        let elem = OpId { counter: run.start + at, actor: run.actor };
                        shown.push(ShownElement {
                            elem,
                            values: Values::from_slice(&[ValueOp { id: elem, kind: *kind }]),
                            width: u64::from(*width),
                        });
                    }
                }
                ElemState::Values { width, values } => {
                    let elem = OpId { counter: run.start, actor: run.actor };
                    shown.push(ShownElement {
                        elem,
                        values: (**values).clone(),
                        width: u64::from(*width),
                    });
                }
            }
        }
        Some(shown)
    }

    /// What an element shows: its winning value.
    pub fn element_value(&self, element: &ShownElement) -> Option<ValueOp> {
        self.winner(&element.values)
    }

    /// What a value is, as a path step sees it.
    pub fn found(&self, value: ValueOp) -> Found {
        match value.kind {
            ValueKind::Object(kind) => Found::Object(value.id, kind),
            other => Found::Scalar(other),
        }
    }
}
