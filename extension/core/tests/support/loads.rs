//! The invariant of issue 14 for one stored value, as a check that returns what broke
//! (`check_loads`); the entry points a server takes client bytes through (`Entry`); and a
//! run of honest and wrong writes driven by bytes (`honest_and_wrong_writes`). The core
//! tests assert them (`support::assert_loads`, tests/wrong_changes.rs) and the fuzzer
//! reports them as failures: fuzz/src/wrong_writes.rs includes this file by path, so that
//! it has one home. It uses only automerge, pg_automerge_core, fixtures and serde_json.

use std::panic::{catch_unwind, AssertUnwindSafe};

use automerge::{ActorId, AutoCommit, Automerge, ReadDoc};
use fixtures::wrong_changes::{
    altered_change, client_document, honest_edit, wrong_change, Choices, Wrong,
};
use pg_automerge_core::load::load_stored;
use pg_automerge_core::settings::WriteSettings;
use pg_automerge_core::{
    chunk, compaction, format, history, index_cache, json, json_reads, kept_json, writes,
};
use pg_automerge_core::{Error, ErrorKind};

/// Whether `stored` holds the invariant: (a) its payload loads with a plain
/// `Automerge::load`, as clients load it; (b) its kept JSON, if any, equals the loaded
/// document's JSON; (c) the header's heads are the loaded heads, and a save of the loaded
/// document loads again; (d) history read from the stored value (without a load where the
/// appended changes answer) is the loaded document's. `Err` says which part broke.
pub fn check_loads(stored: &[u8]) -> Result<(), String> {
    let value =
        format::decode(stored).map_err(|err| format!("the value does not decode: {err}"))?;
    let payload = format::client_bytes(stored).map_err(|err| format!("no payload: {err}"))?;
    let loaded = load(payload).map_err(|err| format!("(a) the payload does not load: {err}"))?;
    if value.summary.heads != loaded.get_heads() {
        return Err(format!(
            "(c) the header's heads {:?} are not the loaded heads {:?}",
            value.summary.heads,
            loaded.get_heads()
        ));
    }
    let kept = json_reads::kept(stored, &kept_json::TextJson);
    if let Some(kept) = kept.map_err(|err| format!("(b) kept JSON: {err}"))? {
        let json = json::document(&loaded, None)
            .map_err(|err| format!("(b) the loaded document has no JSON: {err}"))?;
        if kept != json {
            return Err(format!("(b) the kept JSON {kept} is not the loaded document's {json}"));
        }
    }
    let saved = catch_unwind(AssertUnwindSafe(|| loaded.save()))
        .map_err(|_| "(c) saving the loaded document panicked".to_string())?;
    load(&saved)
        .map_err(|err| format!("(c) a save of the loaded document does not load: {err}"))?;
    history_reads_match(&value, &loaded).map_err(|broken| format!("(d) {broken}"))
}

/// Whether the history reads of the stored `value` list what those of its `loaded`
/// document list, in the same order: since nothing, the save's heads, the current heads
/// and each appended change.
fn history_reads_match(value: &format::StoredValue<'_>, loaded: &Automerge) -> Result<(), String> {
    let (save, appended) = chunk::split_save(value.payload);
    let save_heads = if save.is_empty() { Vec::new() } else { load(save)?.get_heads() };
    let appended = chunk::parse_changes(appended).ok_or("appended changes do not parse")?;
    let mut sinces = vec![Vec::new(), save_heads, loaded.get_heads()];
    sinces.extend(appended.iter().map(|change| vec![change.hash()]));
    for since in &sinces {
        let stored = history::stored_changes(value, Some(since)).map_err(|e| e.to_string())?;
        let from_load = history::changes(loaded, Some(since)).map_err(|e| e.to_string())?;
        if stored != from_load {
            return Err(format!("the changes since {since:?} are not the loaded document's"));
        }
        let stored = history::stored_catch_up(value, since).map_err(|e| e.to_string())?;
        if stored != loaded.save_after(since) {
            return Err(format!("the catch-up since {since:?} is not the loaded document's"));
        }
    }
    for change in &appended {
        let stored = history::stored_change(value, &change.hash()).map_err(|e| e.to_string())?;
        if stored.as_deref() != Some(change.raw_bytes()) {
            return Err(format!("the change {} is not the stored one", change.hash()));
        }
    }
    Ok(())
}

/// `Automerge::load`, with a panic as an error.
fn load(bytes: &[u8]) -> Result<Automerge, String> {
    match catch_unwind(AssertUnwindSafe(|| Automerge::load(bytes))) {
        Ok(Ok(doc)) => Ok(doc),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err("Automerge::load panicked".into()),
    }
}

/// The ways a server takes bytes from a client, in the order a run takes them in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `doc || bytea` with the fast paths (`WriteSettings::UNLIMITED`).
    ApplyFast,
    /// `doc || bytea` the naive way: no kept JSON, every write loads, applies and saves.
    ApplyNaive,
    /// INSERT of the stored payload (a save, maybe with appended changes) and the changes.
    InsertSaveAndChanges,
    /// INSERT of every change of the document, then the new ones: no save at all.
    InsertChangesOnly,
    /// An upsert that merges: the stored value on the left, the client's stored form
    /// (INSERT of the payload and the changes) on the right.
    MergeLeft,
    /// The same merge, the other way round.
    MergeRight,
    /// `doc || bytea` with the fast paths, then `automerge_compact` of what it wrote.
    ApplyThenCompact,
    /// `doc || bytea` with the fast paths, starting from an index held for the stored
    /// heads (`index_cache`), as a backend's earlier write leaves it.
    ApplyHeld,
}

impl Entry {
    pub const ALL: [Entry; 8] = [
        Entry::ApplyFast,
        Entry::ApplyNaive,
        Entry::InsertSaveAndChanges,
        Entry::InsertChangesOnly,
        Entry::MergeLeft,
        Entry::MergeRight,
        Entry::ApplyThenCompact,
        Entry::ApplyHeld,
    ];
}

pub const FAST: WriteSettings = WriteSettings::UNLIMITED;
pub const HELD: WriteSettings = WriteSettings { index_cache_budget: u64::MAX, ..FAST };
pub const NAIVE: WriteSettings =
    WriteSettings { keep_json: false, append_limit: 0, ..WriteSettings::UNLIMITED };

/// Writes `incoming` (client bytes) to the stored value `server` through `entry`.
pub fn write(entry: Entry, server: &[u8], incoming: &[u8]) -> Result<Vec<u8>, Error> {
    let payload = format::client_bytes(server)?;
    let with_payload = || [payload, incoming].concat();
    match entry {
        Entry::ApplyFast => writes::apply(server, incoming, FAST),
        Entry::ApplyNaive => writes::apply(server, incoming, NAIVE),
        Entry::InsertSaveAndChanges => writes::stored_from_client_bytes(&with_payload(), FAST),
        Entry::InsertChangesOnly => {
            let doc = load_stored(&format::decode(server)?)?;
            let mut bytes: Vec<u8> =
                doc.get_changes(&[]).iter().flat_map(|c| c.raw_bytes().to_vec()).collect();
            bytes.extend_from_slice(incoming);
            writes::stored_from_client_bytes(&bytes, FAST)
        }
        Entry::MergeLeft | Entry::MergeRight => {
            let client = writes::stored_from_client_bytes(&with_payload(), FAST)?;
            if entry == Entry::MergeLeft {
                writes::merge(server, &client, FAST)
            } else {
                writes::merge(&client, server, FAST)
            }
        }
        Entry::ApplyThenCompact => {
            let applied = writes::apply(server, incoming, FAST)?;
            compaction::compact(&format::decode(&applied)?, FAST)
        }
        Entry::ApplyHeld => {
            let value = format::decode(server)?;
            if let Some(index) = writes::current_index(&value) {
                index_cache::keep(
                    value.summary.heads.clone(),
                    index,
                    None,
                    HELD.index_cache_budget,
                );
            }
            writes::apply(server, incoming, HELD)
        }
    }
}

/// Writes through `entry` and checks the outcome: refused as invalid binary (22P03), the
/// server value staying as it was (`Ok(None)`), or accepted with the invariant holding
/// (`Ok(Some(written))`). `Err` says what broke, naming `what` and the entry point.
pub fn checked_write(
    what: &str,
    entry: Entry,
    server: &[u8],
    incoming: &[u8],
) -> Result<Option<Vec<u8>>, String> {
    match catch_unwind(AssertUnwindSafe(|| write(entry, server, incoming))) {
        Err(_) => Err(format!("{what} via {entry:?}: the write panicked")),
        Ok(Err(err)) if err.kind() == ErrorKind::InvalidBinary => Ok(None),
        Ok(Err(err)) => Err(format!(
            "{what} via {entry:?}: refused as {:?}, not InvalidBinary: {err}",
            err.kind()
        )),
        Ok(Ok(written)) => match check_loads(&written) {
            Ok(()) => Ok(Some(written)),
            Err(broken) => Err(format!("{what} via {entry:?}: accepted, but {broken}")),
        },
    }
}

/// What a run records for a step the automerge crate panicked while making (`crafted`).
const CRAFTING_PANICKED: &str = "skipped: the automerge crate panicked making the step";

/// `craft(doc)`, a step that makes the run's input with the automerge crate; `None`, and
/// `doc` as it was, if the crate panicked. automerge 0.12 trips its own debug assertions
/// (`query_insert_at`'s and `marks_at`'s) on some honest sequences of concurrent marks,
/// splices and merges, without pg_automerge in the way: such a step would test the crate,
/// not our writes, which a panic inside them still fails (`checked_write`).
fn crafted<T>(doc: &mut AutoCommit, craft: impl FnOnce(&mut AutoCommit) -> T) -> Option<T> {
    let mut scratch = doc.clone();
    let made = catch_unwind(AssertUnwindSafe(|| craft(&mut scratch))).ok()?;
    *doc = scratch;
    Some(made)
}

/// A run driven by `input`: three replicas of a base document the server holds make
/// honest edits and send their new changes; wrong changes, crafted on what the server
/// holds, come in between; every write goes through the next entry point in turn.
/// Returns the outcome of each write (kind, entry point, accepted or refused) for the
/// fuzzer's signature; `Err` names the step, kind and entry point that broke the invariant.
pub fn honest_and_wrong_writes(
    input: &[u8],
    mut on_accepted: impl FnMut(&[u8]),
) -> Result<Vec<String>, String> {
    let mut outcomes = Vec::new();
    let mut choices = Choices::new(input);
    let mut base = client_document(9);
    let actor = |n: u8| ActorId::from([n; 16]);
    let mut server = writes::stored_from_client_bytes(&base.save(), FAST).unwrap();
    let mut replicas: Vec<AutoCommit> = (1..=3).map(|n| base.fork().with_actor(actor(n))).collect();
    let mut next_entry = 0;
    for step in 0..14 {
        if choices.is_exhausted() && step > 0 {
            break;
        }
        let entry = Entry::ALL[next_entry % Entry::ALL.len()];
        let r = choices.below(replicas.len());
        let (what, incoming) = match choices.below(10) {
            0..=5 => {
                let replica = &mut replicas[r];
                if crafted(replica, |replica| honest_edit(replica, &mut choices)).is_none() {
                    outcomes.push(CRAFTING_PANICKED.to_string());
                    continue;
                }
                let held = Automerge::load(format::client_bytes(&server).unwrap()).unwrap();
                let new: Vec<u8> = replica
                    .get_changes(&[])
                    .iter()
                    .filter(|c| held.get_change_by_hash(&c.hash()).is_none())
                    .flat_map(|c| c.raw_bytes().to_vec())
                    .collect();
                (format!("step {step}: honest changes of replica {r}"), new)
            }
            8 => {
                let mut held = AutoCommit::load(format::client_bytes(&server).unwrap())
                    .unwrap()
                    .with_actor(actor(r as u8 + 1));
                let Some(made) = crafted(&mut held, |held| altered_change(held, &mut choices))
                else {
                    outcomes.push(CRAFTING_PANICKED.to_string());
                    continue;
                };
                let Some(bytes) = made else { continue };
                (format!("step {step}: altered change (replica {r}'s actor)"), bytes)
            }
            6 | 7 => {
                let kind = *choices.pick(&Wrong::ALL);
                // Crafted on what the server holds, as replica r's actor.
                let mut held = AutoCommit::load(format::client_bytes(&server).unwrap())
                    .unwrap()
                    .with_actor(actor(r as u8 + 1));
                let Some(made) = crafted(&mut held, |held| wrong_change(held, kind, &mut choices))
                else {
                    outcomes.push(CRAFTING_PANICKED.to_string());
                    continue;
                };
                let Some(bytes) = made else { continue };
                (format!("step {step}: wrong change {kind:?} (replica {r}'s actor)"), bytes)
            }
            _ => {
                // A replica syncs from the server; a server that took a wrong change of
                // this replica's actor cannot be merged, which leaves the replica as it is.
                if let Ok(mut held) = AutoCommit::load(format::client_bytes(&server).unwrap()) {
                    crafted(&mut replicas[r], |replica| replica.merge(&mut held).map(drop));
                }
                continue;
            }
        };
        if incoming.is_empty() {
            continue;
        }
        next_entry += 1;
        let written = checked_write(&what, entry, &server, &incoming)?;
        let kind = what.split(": ").nth(1).unwrap_or("").split(" (").next().unwrap_or("");
        outcomes.push(format!(
            "{kind} via {entry:?}: {}",
            if written.is_some() { "accepted" } else { "refused" }
        ));
        if let Some(written) = written {
            on_accepted(&written);
            server = written;
        }
    }
    Ok(outcomes)
}
