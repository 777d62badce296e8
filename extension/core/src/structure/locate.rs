//! Finding what a JSON path names in the index, for edits made from SQL: the object at a
//! path, a map key's current operations, the element shown at a list index, the elements
//! shown at a range of a text. Each answers as the JSON shows the document: the winning
//! value of a conflict, deleted elements skipped.

use super::{Body, ElemState, ObjKind, OpId, Run, Structure, ValueKind, ValueOp, Values, ROOT};

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

/// The elements of a list or text as they show, read run by run: a position finds its
/// element without making the elements before it (a long text has millions).
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a> {
    runs: &'a [Run],
}

impl<'a> Shown<'a> {
    /// How many elements show, and how many characters they show in all.
    pub fn totals(&self) -> (usize, u64) {
        self.runs
            .iter()
            .filter(|run| !matches!(run.state, ElemState::Hidden))
            .fold((0, 0), |(count, width), run| {
                (count + run.len as usize, width + run.len * run.width())
            })
    }

    /// The shown elements in order, from the first.
    pub fn elements(&self) -> ShownElements<'a> {
        ShownElements { runs: self.runs, run: 0, into: 0, offset: 0 }
    }

    /// The element at list index `index`.
    pub fn at(&self, index: usize) -> Option<ShownElement> {
        let mut elements = self.elements();
        elements.pass(index);
        elements.next()
    }
}

/// The shown elements of a sequence in order; it can pass over many at once.
#[derive(Debug, Clone)]
pub struct ShownElements<'a> {
    runs: &'a [Run],
    /// The run of the next element, and how many of its elements come before it.
    run: usize,
    into: u64,
    /// The characters shown before the next element.
    offset: u64,
}

impl<'a> ShownElements<'a> {
    /// The characters shown before the next element.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The run of the next element, past hidden and finished runs.
    fn current(&mut self) -> Option<&'a Run> {
        let runs = self.runs;
        while let Some(run) = runs.get(self.run) {
            if self.into < run.len && !matches!(run.state, ElemState::Hidden) {
                return Some(run);
            }
            (self.run, self.into) = (self.run + 1, 0);
        }
        None
    }

    /// Passes over up to `count` elements of the current run (at least one is left in
    /// it), returning the last passed.
    fn pass_in_run(&mut self, count: u64) -> ShownElement {
        let run = &self.runs[self.run];
        let last = element(run, self.into + count - 1);
        self.into += count;
        self.offset += count * run.width();
        last
    }

    /// Passes over the next `count` elements, returning the last passed.
    pub fn pass(&mut self, mut count: usize) -> Option<ShownElement> {
        let mut last = None;
        while count > 0 {
            let Some(run) = self.current() else { break };
            let here = (run.len - self.into).min(count as u64);
            last = Some(self.pass_in_run(here));
            count -= here as usize;
        }
        last
    }

    /// Passes over every element that starts before character `pos`, returning the last
    /// passed.
    pub fn pass_before(&mut self, pos: u64) -> Option<ShownElement> {
        let mut last = None;
        while self.offset < pos {
            let Some(run) = self.current() else { break };
            let (left, width) = (run.len - self.into, run.width());
            // Elements of no width all start at the current offset.
            let here = match width {
                0 => left,
                _ => (pos - self.offset).div_ceil(width).min(left),
            };
            last = Some(self.pass_in_run(here));
        }
        last
    }
}

impl Iterator for ShownElements<'_> {
    type Item = ShownElement;

    fn next(&mut self) -> Option<ShownElement> {
        self.current()?;
        Some(self.pass_in_run(1))
    }
}

/// Element `at` of a run that shows.
fn element(run: &Run, at: u64) -> ShownElement {
    let elem = OpId { counter: run.start + at, actor: run.actor };
    let (width, values) = match &run.state {
        ElemState::Shown { width, kind } => {
            (*width, Values::from_slice(&[ValueOp { id: elem, kind: *kind }]))
        }
        ElemState::Values { width, values } => (*width, (**values).clone()),
        ElemState::Hidden => unreachable!("hidden runs are passed over"),
    };
    ShownElement { elem, values, width: u64::from(width) }
}

/// The ids of the operations `values` holds: what an operation replacing them names as
/// its predecessors.
pub fn value_ids(values: &[ValueOp]) -> Vec<OpId> {
    values.iter().map(|value| value.id).collect()
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

    /// The elements of a list or text as they show. `None` when `obj` is not a sequence
    /// the index models.
    pub fn shown(&self, obj: OpId) -> Option<Shown<'_>> {
        let Body::Seq(runs) = &self.objects.get(&obj)?.body else { return None };
        Some(Shown { runs })
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn state() -> impl Strategy<Value = ElemState> {
        prop_oneof![
            Just(ElemState::Hidden),
            (0u32..3).prop_map(|width| ElemState::Shown { width, kind: ValueKind::Scalar }),
            (0u32..3).prop_map(|width| ElemState::Values {
                width,
                values: Box::new(Values::from_slice(&[ValueOp {
                    id: OpId { counter: 999, actor: 1 },
                    kind: ValueKind::Scalar,
                }])),
            }),
        ]
    }

    fn runs() -> impl Strategy<Value = Vec<Run>> {
        prop::collection::vec((1u64..5, state()), 0..8).prop_map(|pieces| {
            let mut start = 1;
            let mut runs = Vec::new();
            for (len, state) in pieces {
                // A run of current values holds one element, as the index builds them.
                let len = if matches!(state, ElemState::Values { .. }) { 1 } else { len };
                runs.push(Run { actor: 0, start, len, state });
                start += len;
            }
            runs
        })
    }

    /// Every shown element with the characters before it, one by one.
    fn listed(runs: &[Run]) -> Vec<(u64, ShownElement)> {
        let mut offset = 0;
        let mut shown = Vec::new();
        for run in runs.iter().filter(|run| !matches!(run.state, ElemState::Hidden)) {
            for at in 0..run.len {
                shown.push((offset, element(run, at)));
                offset += run.width();
            }
        }
        shown
    }

    proptest! {
        /// Passing run by run finds what listing every element finds.
        #[test]
        fn passing_over_runs_agrees_with_listing_every_element(runs in runs()) {
            let shown = Shown { runs: &runs };
            let listed = listed(&runs);
            let width: u64 = listed.iter().map(|(_, element)| element.width).sum();
            prop_assert_eq!(shown.totals(), (listed.len(), width));
            let all: Vec<_> = shown.elements().collect();
            prop_assert_eq!(&all, &listed.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>());
            for index in 0..=listed.len() {
                prop_assert_eq!(shown.at(index), listed.get(index).map(|(_, e)| e.clone()));
                let mut elements = shown.elements();
                let passed = elements.pass(index);
                prop_assert_eq!(passed, index.checked_sub(1).map(|i| listed[i].1.clone()));
                prop_assert_eq!(elements.next(), listed.get(index).map(|(_, e)| e.clone()));
            }
            for pos in 0..=width + 1 {
                let before: Vec<_> = listed.iter().filter(|(offset, _)| *offset < pos).collect();
                let mut elements = shown.elements();
                let passed = elements.pass_before(pos);
                prop_assert_eq!(passed, before.last().map(|(_, e)| e.clone()));
                let offset: u64 = before.iter().map(|(_, e)| e.width).sum();
                prop_assert_eq!(elements.offset(), offset);
            }
        }
    }
}
