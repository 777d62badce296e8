//! A sequence's elements as runs: finding an element, inserting one where Automerge
//! places it, and changing one's state, keeping the runs as few as a fresh build makes.

use automerge::ActorId;

use super::{ElemState, OpId, Run};

/// The run holding element `elem` and its position in it, and the element's offset: the
/// widths of the shown elements before it.
pub(super) fn find(runs: &[Run], elem: OpId) -> Option<((usize, u64), u64)> {
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

/// Whether element `first` comes before element `second`; `None` when one is not there.
pub(super) fn comes_before(runs: &[Run], first: OpId, second: OpId) -> Option<bool> {
    let ((run_a, at_a), _) = find(runs, first)?;
    let ((run_b, at_b), _) = find(runs, second)?;
    Some((run_a, at_a) < (run_b, at_b))
}

/// Splits runs so that the element at `at` is a run of its own, and gives it `state`.
pub(super) fn set_element_state(
    runs: &mut Vec<Run>,
    (index, into): (usize, u64),
    state: ElemState,
) {
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
pub(super) fn replace_runs(runs: &mut Vec<Run>, index: usize, remove: usize, pieces: Vec<Run>) {
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

pub(super) fn joins(first: &Run, second: &Run) -> bool {
    first.actor == second.actor
        && first.start + first.len == second.start
        && first.state == second.state
        && !matches!(first.state, ElemState::Values { .. })
}

pub(super) fn push_run(runs: &mut Vec<Run>, run: Run) {
    match runs.last_mut() {
        Some(last) if joins(last, &run) => last.len += run.len,
        _ => runs.push(run),
    }
}

/// Inserts element `id` after `reference` (`None`: at the start) as Automerge orders a
/// sequence: past the elements right after the reference whose ids are later than the new
/// one's. Returns the new element's offset.
pub(super) fn insert_element(
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
        // Typing right after one's own text extends the run before, with no shift of the
        // runs after it (a long text's runs are many).
        _ if index > 0 && joins(&runs[index - 1], &new) => {
            runs[index - 1].len += 1;
            if runs.get(index).is_some_and(|next| joins(&runs[index - 1], next)) {
                let next = runs.remove(index);
                runs[index - 1].len += next.len;
            }
        }
        _ => replace_runs(runs, index, 0, vec![new]),
    }
    Some(offset)
}
