//! The loader rules a change can break, as the errors that refuse it name them
//! ([`Error::BreaksLoadRule`](crate::Error::BreaksLoadRule)): the vocabulary that
//! [`integrity`](crate::integrity), which checks them, and
//! [`mark_order`](crate::mark_order), which reads the mark rule off a save, share with the
//! error type.

use std::fmt;

use automerge::{ChangeHash, ObjType};

/// A loader rule that a change breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Its sequence number does not follow one of its actor's changes.
    SequenceGap { seq: u64 },
    /// It does not descend from its actor's previous change.
    NotAfterActorsPreviousChange,
    /// Its first counter is not above every counter of its dependencies.
    CountersNotAboveDependencies { start_op: u64, dependencies_max_op: u64 },
    /// It has no operations and does not start right after its dependencies' counters.
    EmptyChangeSkipsCounters { start_op: u64, dependencies_max_op: u64 },
    /// Its first counter lies past every operation of the document (plus one).
    CountersSkipAhead { start_op: u64, document_max_op: u64 },
    /// Its counters do not fit in 32 bits.
    CountersOverflow { max_op: u64 },
    /// Automerge records it differently from how it came: an operation refers to something
    /// the document lacks, or the change is not encoded as Automerge encodes it.
    NotAsRecorded,
    /// An operation (`counter@actor`) is keyed as another kind of object than its own:
    /// by element in a map, by name in a list or text, or a mark that is not inserted into
    /// a text.
    KeyOfOtherObjectKind { op: String, object: ObjType },
    /// One of its mark ends (`counter@actor`) is not after its begin in the same object,
    /// in document order.
    MarkOrder { end: String, cause: Misplaced },
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::SequenceGap { seq } => {
                write!(f, "its sequence number is {seq}, but its actor has no change {}", seq - 1)
            }
            Rule::NotAfterActorsPreviousChange => {
                write!(f, "it does not descend from its actor's previous change")
            }
            Rule::CountersNotAboveDependencies { start_op, dependencies_max_op } => write!(
                f,
                "its operation counters start at {start_op}, not above its dependencies' \
                 {dependencies_max_op}"
            ),
            Rule::EmptyChangeSkipsCounters { start_op, dependencies_max_op } => write!(
                f,
                "it has no operations and starts at counter {start_op}, not right after its \
                 dependencies' {dependencies_max_op}"
            ),
            Rule::CountersSkipAhead { start_op, document_max_op } => write!(
                f,
                "its operation counters start at {start_op}, past every operation of the \
                 document (the largest counter is {document_max_op})"
            ),
            Rule::CountersOverflow { max_op } => {
                write!(f, "its operation counters reach {max_op}, past 2^32 - 1")
            }
            Rule::KeyOfOtherObjectKind { op, object } => write!(
                f,
                "its operation {op} is keyed or marked as no operation of a {object} object \
                 can be (an element in a map, a name in a sequence, a mark that is not \
                 inserted into a text)"
            ),
            Rule::MarkOrder { end, cause } => write!(
                f,
                "its mark end {end} breaks the mark order of a save ({cause}): Automerge \
                 applies it, but refuses every later save of the document"
            ),
            Rule::NotAsRecorded => write!(
                f,
                "Automerge records it differently from how it came (an operation refers to \
                 an object, element or predecessor the document lacks, or the change is not \
                 encoded as Automerge encodes it)"
            ),
        }
    }
}

/// A change and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub change: ChangeHash,
    pub rule: Rule,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "change {}: {}", self.change, self.rule)
    }
}

/// Why the loader refuses a mark end (see [`mark_order`](crate::mark_order)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misplaced {
    /// No mark begin with the id before it comes earlier in document order.
    BeginNotBefore,
    /// Its begin is in another object.
    BeginInOtherObject,
}

impl fmt::Display for Misplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misplaced::BeginNotBefore => write!(f, "its mark begin does not come before it"),
            Misplaced::BeginInOtherObject => write!(f, "its mark begin is in another object"),
        }
    }
}
