use std::borrow::Cow;

use automerge::ChangeHash;

/// Why a value was refused. The SQL layer maps [`ErrorKind`] to a SQLSTATE.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid input syntax for type automerge: {0}")]
    InvalidText(String),

    #[error("the bytes are not an Automerge document or change set: {0}")]
    NotAutomerge(String),

    #[error("the input depends on {} change(s) that it does not contain", .0.len())]
    MissingDependencies(Vec<ChangeHash>),

    #[error("the changes depend on {} change(s) that neither they nor the document contain", .0.len())]
    MissingDependenciesOnApply(Vec<ChangeHash>),

    #[error("the changes would store a document that Automerge cannot load again")]
    BreaksLoadRule(crate::rules::Broken),

    /// A save whose operations are not the operations of its changes (see
    /// [`op_owners`](crate::op_owners)).
    #[error("the save's operations are not those of its changes: {0}")]
    SaveNotItsChanges(String),

    #[error("the documents cannot be merged: {0}")]
    CannotMerge(String),

    /// Two clients that share an actor id, or one that lost its state and started over.
    #[error(
        "the changes reuse sequence number {seq} of actor {actor}, which the document already holds as another change"
    )]
    ReusedSeq { actor: String, seq: u64 },

    #[error("{0}")]
    InvalidParameter(String),

    #[error("{} given head(s) are not changes of this document", .0.len())]
    UnknownHeads(Vec<ChangeHash>),

    #[error("the document has nothing at path {0}")]
    PathNotFound(String),

    #[error("the value at path {path} is {found}, not text")]
    NotText { path: String, found: String },

    /// An edit whose path leads to a value of another kind than it edits.
    #[error("the value at path {path} is {what}")]
    NotA { path: String, what: &'static str },

    #[error("path element {step} at {path} is not an integer: it indexes a list")]
    NotAnIndex { path: String, step: String },

    #[error("list index out of range at path {path}: the list has {len} element(s)")]
    IndexOutOfRange { path: String, len: usize },

    #[error(
        "text range out of bounds at path {path}: position {pos}, {delete} character(s) deleted, \
         in a text of {len} character(s) (or inside a character cluster)"
    )]
    TextRange { path: String, pos: i64, delete: i64, len: u64 },

    #[error("{0}")]
    NotSupported(String),

    /// The message says the estimate and the limit; the HINT, the setting that would admit
    /// the load.
    #[error(
        "loading this document is estimated to need {} MB, above pg_automerge.max_load_memory ({} MB)",
        .estimate.div_ceil(1 << 20),
        .limit / (1 << 20)
    )]
    LoadTooLarge { estimate: u64, limit: u64 },

    #[error("the document nests objects more than {limit} levels deep")]
    TooDeep { limit: usize },

    #[error("stored automerge value is corrupted: {0}")]
    CorruptStoredValue(String),

    #[error(
        "stored automerge value has format version {found}, \
         this pg_automerge reads versions up to {supported}"
    )]
    UnsupportedFormatVersion { found: u8, supported: u8 },
}

/// What a refused load's HINT says: the setting that would admit it. The limit is set in
/// whole megabytes, at most `i32::MAX` of them.
fn load_too_large_hint(estimate: u64) -> String {
    let mb = estimate.div_ceil(1 << 20);
    if mb <= i32::MAX as u64 {
        format!(
            "SET pg_automerge.max_load_memory = '{mb}MB' would admit this document (superusers \
             only); or the client can send fewer changes at once."
        )
    } else {
        "No limit admits this document but -1, which turns the protection off: it is almost \
         certainly not a real document."
            .to_string()
    }
}

/// Up to five hashes, then how many more.
fn list_hashes(hashes: &[ChangeHash]) -> String {
    const SHOWN: usize = 5;
    let mut listed: Vec<String> = hashes.iter().take(SHOWN).map(ChangeHash::to_string).collect();
    if hashes.len() > SHOWN {
        listed.push(format!("and {} more", hashes.len() - SHOWN));
    }
    listed.join(", ")
}

/// The categories the SQL layer distinguishes, each with its own SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Text input that is not `\x` followed by hex digits, a list index that is not an
    /// integer (22P02).
    InvalidText,
    /// Bytes from a client that do not form a valid, self-contained document (22P03).
    InvalidBinary,
    /// An argument that is not what the function takes: a malformed or unknown head, a
    /// path to nothing (22023).
    InvalidParameter,
    /// A path that leads to something other than text, or to another kind of value than an
    /// edit needs (42809).
    WrongObjectType,
    /// A list index past the end of the list (2202E).
    IndexOutOfRange,
    /// A text range past the end of the text (22011).
    TextRangeOutOfBounds,
    /// A load estimated above `pg_automerge.max_load_memory` (53400).
    ConfigurationLimitExceeded,
    /// A document nested too deeply to read as JSON (54001).
    TooComplex,
    /// A stored value that fails its own consistency checks (XX001).
    DataCorrupted,
    /// A stored value written by a newer format than this build reads (0A000).
    FeatureNotSupported,
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidText(_) | Error::NotAnIndex { .. } => ErrorKind::InvalidText,
            Error::NotAutomerge(_)
            | Error::CannotMerge(_)
            | Error::MissingDependencies(_)
            | Error::MissingDependenciesOnApply(_)
            | Error::BreaksLoadRule(_)
            | Error::SaveNotItsChanges(_)
            | Error::ReusedSeq { .. } => ErrorKind::InvalidBinary,
            Error::InvalidParameter(_) | Error::UnknownHeads(_) | Error::PathNotFound(_) => {
                ErrorKind::InvalidParameter
            }
            Error::NotText { .. } | Error::NotA { .. } => ErrorKind::WrongObjectType,
            Error::IndexOutOfRange { .. } => ErrorKind::IndexOutOfRange,
            Error::TextRange { .. } => ErrorKind::TextRangeOutOfBounds,
            Error::LoadTooLarge { .. } => ErrorKind::ConfigurationLimitExceeded,
            Error::TooDeep { .. } => ErrorKind::TooComplex,
            Error::CorruptStoredValue(_) => ErrorKind::DataCorrupted,
            Error::UnsupportedFormatVersion { .. } | Error::NotSupported(_) => {
                ErrorKind::FeatureNotSupported
            }
        }
    }

    /// Extra lines for the error's DETAIL, where there is something more to say.
    pub fn detail(&self) -> Option<String> {
        match self {
            Error::MissingDependencies(hashes) | Error::MissingDependenciesOnApply(hashes)
                if !hashes.is_empty() =>
            {
                Some(format!("Missing change hashes: {}.", list_hashes(hashes)))
            }
            Error::UnknownHeads(hashes) => Some(format!("Unknown: {}.", list_hashes(hashes))),
            Error::BreaksLoadRule(broken) => Some(format!("Automerge's loader refuses {broken}.")),
            _ => None,
        }
    }

    /// A hint for what the user can do, where there is one.
    pub fn hint(&self) -> Option<Cow<'static, str>> {
        if let Error::LoadTooLarge { estimate, .. } = self {
            return Some(Cow::Owned(load_too_large_hint(*estimate)));
        }
        let hint: Option<&'static str> = match self {
            Error::NotAutomerge(_) => Some(
                "Pass the bytes of Automerge save(), saveIncremental() or of encoded changes.",
            ),
            Error::CannotMerge(_) | Error::ReusedSeq { .. } => {
                Some("Each client must use an actor id of its own; two histories that reuse one cannot be merged.")
            }
            Error::BreaksLoadRule(_) => Some(
                "The document is unchanged. No Automerge library makes such a change: the \
                 client sent crafted or damaged bytes.",
            ),
            Error::SaveNotItsChanges(_) => Some(
                "No Automerge library saves such a document, and @automerge/automerge refuses \
                 or misreads it: the client sent crafted or damaged bytes.",
            ),
            Error::MissingDependenciesOnApply(_) => {
                Some("Send the missing changes with these, or a full save; the document is unchanged.")
            }
            Error::MissingDependencies(_) => Some(
                "A stand-alone value must contain every change its changes depend on: send a \
                 full save, or include the missing changes. To apply changes to a stored \
                 document, pass them as bytea: doc || $1::bytea.",
            ),
            Error::TooDeep { .. } => Some(
                "Read the parts you need with the jsonb operators on a path below the deep \
                 nesting, or restructure the document.",
            ),
            Error::CorruptStoredValue(_) => Some(
                "automerge_loads(doc) finds such values and automerge_repair(doc) mends one; \
                 see the SQL reference.",
            ),
            Error::UnsupportedFormatVersion { .. } => {
                Some("Install the pg_automerge version that wrote this value, or a newer one.")
            }
            _ => None,
        };
        hint.map(Cow::Borrowed)
    }
}
