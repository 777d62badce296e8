//! The phases of a load that the `load_breakdown` bench measures, by the variant names of
//! its rows (`core/load breakdown/<phase>/<fixture>`), with what each measures: the bench
//! times them, `cargo xtask bench --load-breakdown` divides each by the whole load of the
//! same run and explains them with these words.

/// The operation of every row. No name has a comma: the peaks file is comma-separated.
pub const OPERATION: &str = "load breakdown";

pub const WHOLE: &str = "automerge load";
pub const UNCHECKED: &str = "load with heads unchecked";
pub const UNCOMPRESSED: &str = "load of save_nocompress";
pub const CHANGES: &str = "get_changes: rebuild and hash every change";
pub const HASHES: &str = "SHA-256 of every change";
pub const STREAMED: &str = "columns streamed: inflate and count rows";
pub const INFLATED: &str = "op columns inflated";
pub const OP_PASS: &str = "op column pass: every row decoded";
pub const STRUCTURE: &str = "structure index from the columns";
pub const OWNERS: &str = "op owners: every op in one change";
pub const JSON: &str = "JSON walk of the loaded document";
pub const KEPT_JSON: &str = "kept JSON read";

/// Every phase, in the report's order, with what it measures.
pub const PHASES: [(&str, &str); 12] = [
    (WHOLE, "`Automerge::load` of the save: what a read or write that loads pays"),
    (
        UNCHECKED,
        "the same with `VerificationMode::DontCheck`, which skips only comparing the rebuilt \
         changes' hashes with the heads the save records (they are still rebuilt and hashed)",
    ),
    (
        UNCOMPRESSED,
        "`Automerge::load` of the same document's `save_nocompress()`: the load without \
         inflating deflated columns",
    ),
    (
        CHANGES,
        "`get_changes(&[])` on the loaded document: the change collector a load runs (every \
         change rebuilt from the op set, encoded and hashed) on the op set the load built; in \
         a load it also feeds the op set's index",
    ),
    (
        HASHES,
        "SHA-256 of every change's bytes, what its hash is taken over (`chunk::checksum`): \
         the hashing alone, without rebuilding",
    ),
    (
        STREAMED,
        "`estimate::client_rows`: every column of the save (changes' and ops') inflated \
         through a small buffer, rows counted from the run lengths, values not decoded",
    ),
    (INFLATED, "`DocumentOps::read`: the document chunk split, its op columns inflated in memory"),
    (
        OP_PASS,
        "`DocumentOps::read`, then every op row decoded (object, key, id, insert, action, \
         value, successors) and nothing kept: the floor of a pass that reads every op",
    ),
    (
        STRUCTURE,
        "`Structure::of_save`: that pass building the structure index (every object, map \
         key and sequence element, tombstones included)",
    ),
    (
        OWNERS,
        "`op_owners::check`: that pass giving every op and implied deletion its change by \
         its counter, then the ids sorted per change and checked for holes and repeats; what \
         storing a client's save adds to its load since 0.6.0",
    ),
    (
        JSON,
        "`json::document` on the loaded document: the core's JSON walk, which `doc::jsonb` \
         added to a load before values kept their JSON",
    ),
    (
        KEPT_JSON,
        "`json_reads::kept` of the stored value: its header decoded, the kept JSON \
         decompressed (lz4) and parsed; the core keeps text, the extension `jsonb`, which \
         PostgreSQL reads without parsing",
    ),
];
