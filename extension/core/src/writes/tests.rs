//! The write paths' tests: appends, loads, merges and their refusals.

use super::append::REENCODE_AFTER;
use super::*;
use crate::settings::LoadLimit;
use crate::structure::Structure;
use crate::{json_reads, kept_json};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ReadDoc, ROOT};

fn doc(actor: u8, key: &str) -> AutoCommit {
    let mut doc = AutoCommit::new().with_actor(ActorId::from([actor; 16]));
    doc.put(ROOT, key, actor as i64).unwrap();
    doc
}

#[test]
fn merging_equal_heads_returns_the_left_value() {
    let stored = stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
    assert_eq!(merge(&stored, &stored, WriteSettings::UNLIMITED).unwrap(), stored);
}

#[test]
fn merge_combines_both_sides() {
    let a = stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
    let b = stored_from_client_bytes(&doc(2, "b").save(), WriteSettings::UNLIMITED).unwrap();
    let merged =
        load_stored(&format::decode(&merge(&a, &b, WriteSettings::UNLIMITED).unwrap()).unwrap())
            .unwrap();
    assert_eq!(merged.get_heads().len(), 2);
    assert!(merged.get(ROOT, "a").unwrap().is_some());
    assert!(merged.get(ROOT, "b").unwrap().is_some());
}

#[test]
fn applies_new_changes_and_ignores_known_ones() {
    let mut local = doc(1, "a");
    let stored = stored_from_client_bytes(&local.save(), WriteSettings::UNLIMITED).unwrap();
    let heads = local.get_heads();
    local.put(ROOT, "more", 2_i64).unwrap();
    let change = local.save_after(&heads);
    let applied = apply(&stored, &change, WriteSettings::UNLIMITED).unwrap();
    assert_eq!(
        load_stored(&format::decode(&applied).unwrap()).unwrap().get_heads(),
        local.get_heads()
    );
    // The same change again, or nothing, changes nothing.
    assert_eq!(apply(&applied, &change, WriteSettings::UNLIMITED).unwrap(), applied);
    assert_eq!(apply(&applied, &[], WriteSettings::UNLIMITED).unwrap(), applied);
}

#[test]
fn applies_changes_that_depend_on_the_stored_document() {
    let mut local = doc(1, "a");
    let stored = stored_from_client_bytes(&local.save(), WriteSettings::UNLIMITED).unwrap();
    let heads = local.get_heads();
    local.put(ROOT, "b", 1_i64).unwrap();
    local.commit();
    local.put(ROOT, "c", 1_i64).unwrap();
    let two_changes = local.save_after(&heads);
    let applied = load_stored(
        &format::decode(&apply(&stored, &two_changes, WriteSettings::UNLIMITED).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(applied.get_heads(), local.get_heads());
}

#[test]
fn refuses_changes_with_missing_dependencies_and_garbage() {
    let mut local = doc(1, "a");
    let stored =
        stored_from_client_bytes(&AutoCommit::new().save(), WriteSettings::UNLIMITED).unwrap();
    let heads = local.get_heads();
    local.put(ROOT, "more", 2_i64).unwrap();
    let orphan = local.save_after(&heads);
    assert!(
        matches!(apply(&stored, &orphan, WriteSettings::UNLIMITED), Err(Error::MissingDependenciesOnApply(h)) if h == heads)
    );
    for garbage in [&b"junk"[..], &[0xde, 0xad], &[0x85, 0x6f, 0x4a, 0x83]] {
        assert!(
            matches!(
                apply(&stored, garbage, WriteSettings::UNLIMITED),
                Err(Error::NotAutomerge(_))
            ),
            "{garbage:?}"
        );
    }
    let mut truncated = local.save();
    truncated.pop();
    assert!(matches!(
        apply(&stored, &truncated, WriteSettings::UNLIMITED),
        Err(Error::NotAutomerge(_))
    ));
}

#[test]
fn a_change_that_reuses_an_actors_sequence_number_says_so() {
    let stored = stored_from_client_bytes(&doc(1, "a").save(), WriteSettings::UNLIMITED).unwrap();
    // The same actor's first change, with other content: a client that started over.
    let mut restarted = doc(1, "b");
    for bytes in [restarted.save(), restarted.save_after(&[])] {
        let refused = apply(&stored, &bytes, WriteSettings::UNLIMITED).unwrap_err();
        assert!(matches!(refused, Error::ReusedSeq { seq: 1, .. }), "{refused}");
        assert!(refused.to_string().contains(&"01".repeat(16)), "{refused}");
    }
    let merged = merge(
        &stored,
        &stored_from_client_bytes(&restarted.save(), WriteSettings::UNLIMITED).unwrap(),
        WriteSettings::UNLIMITED,
    );
    assert!(matches!(merged, Err(Error::ReusedSeq { seq: 1, .. })), "{merged:?}");
}

/// A client document with a title and a text, and its stored form.
fn titled() -> (AutoCommit, Vec<u8>) {
    let mut client = doc(1, "views");
    client.put(ROOT, "title", "Draft").unwrap();
    let text = client.put_object(ROOT, "text", automerge::ObjType::Text).unwrap();
    client.splice_text(&text, 0, 0, "hello").unwrap();
    let stored = stored_from_client_bytes(&client.save(), WriteSettings::UNLIMITED).unwrap();
    (client, stored)
}

fn kept_json(stored: &[u8]) -> Option<serde_json::Value> {
    json_reads::kept(stored, &kept_json::TextJson).unwrap()
}

fn appended(stored: &[u8]) -> u32 {
    format::decode(stored).unwrap().kept.unwrap().appended_changes
}

fn loaded_json(stored: &[u8]) -> serde_json::Value {
    crate::json::document(&load_stored(&format::decode(stored).unwrap()).unwrap(), None).unwrap()
}

#[test]
fn a_change_on_the_current_heads_is_appended_and_its_root_puts_patch_the_json() {
    let (mut client, stored) = titled();
    let heads = client.get_heads();
    client.put(ROOT, "title", "Final").unwrap();
    client.put(ROOT, "views", 2_i64).unwrap();
    let change = client.save_after(&heads);
    let written = apply(&stored, &change, WriteSettings::UNLIMITED).unwrap();
    let (before, after) = (format::decode(&stored).unwrap(), format::decode(&written).unwrap());
    assert_eq!(after.payload, [before.payload, &change[..]].concat(), "appended, not re-saved");
    assert_eq!(appended(&written), 1);
    assert_eq!(after.summary.heads, client.get_heads());
    assert_eq!(after.summary.change_count, before.summary.change_count + 1);
    assert_eq!(
        kept_json(&written).unwrap(),
        serde_json::json!({"title": "Final", "views": 2, "text": "hello"})
    );
    assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
}

#[test]
fn a_text_edit_is_appended_and_patches_the_json() {
    let (mut client, stored) = titled();
    let heads = client.get_heads();
    let text = client.get(ROOT, "text").unwrap().unwrap().1;
    client.splice_text(&text, 5, 0, " world").unwrap();
    client.splice_text(&text, 0, 1, "H").unwrap();
    let written = apply(&stored, &client.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
    assert_eq!(appended(&written), 1, "appended, not re-saved");
    assert_eq!(kept_json(&written).unwrap()["text"], "Hello world");
    assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
}

#[test]
fn a_put_that_does_not_replace_what_a_root_key_shows_is_loaded_and_applied() {
    let (mut client, stored) = titled();
    // Two clients set the title concurrently: the second one's put does not replace the
    // first one's, so the key shows both and Automerge picks the winner.
    let mut first = client.fork().with_actor(ActorId::from([3; 16]));
    let mut second = client.fork().with_actor(ActorId::from([4; 16]));
    let heads = first.get_heads();
    first.put(ROOT, "title", "First").unwrap();
    second.put(ROOT, "title", "Second").unwrap();
    let stored = apply(&stored, &first.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
    assert_eq!(appended(&stored), 1);
    let written = apply(&stored, &second.save_after(&heads), WriteSettings::UNLIMITED).unwrap();
    assert_eq!(appended(&written), 0, "saved anew");
    let title = kept_json(&written).unwrap()["title"].clone();
    assert!(title == "First" || title == "Second", "{title}");
    assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
}

#[test]
fn changes_that_do_not_follow_the_stored_heads_are_loaded_and_applied() {
    let (mut client, _) = titled();
    let first = client.get_heads();
    client.put(ROOT, "title", "Second").unwrap();
    let stored = stored_from_client_bytes(&client.save(), WriteSettings::UNLIMITED).unwrap();
    // A second client that saw only the first state edits concurrently.
    let mut other = client.fork_at(&first).unwrap().with_actor(ActorId::from([2; 16]));
    other.put(ROOT, "other", 1_i64).unwrap();
    let change = other.save_after(&first);
    let written = apply(&stored, &change, WriteSettings::UNLIMITED).unwrap();
    assert_eq!(appended(&written), 0, "saved anew");
    assert_eq!(kept_json(&written).unwrap(), loaded_json(&written));
    assert_eq!(loaded_json(&written)["other"], 1);
}

/// The write that passes the limit saves the document anew, keeping the JSON and the
/// index its changes brought up to date: both are what a save of the document gives.
#[test]
fn the_append_limit_makes_a_write_load_and_save_anew() {
    let (mut client, mut stored) = titled();
    let settings = WriteSettings { append_limit: 2, ..WriteSettings::UNLIMITED };
    let mut heads = client.get_heads();
    let text = client.put_object(ROOT, "text", automerge::ObjType::Text).unwrap();
    for (round, expected) in [1, 2, 0, 1, 2, 0].into_iter().enumerate() {
        client.put(ROOT, "round", round as i64).unwrap();
        client.splice_text(&text, 0, 0, &format!("{round} ")).unwrap();
        stored = apply(&stored, &client.save_after(&heads), settings).unwrap();
        heads = client.get_heads();
        assert_eq!(appended(&stored), expected, "round {round}");
        assert_eq!(kept_json(&stored).unwrap(), loaded_json(&stored));
        let fresh = stored_from_client_bytes(&client.save(), settings).unwrap();
        let (value, fresh) = (format::decode(&stored).unwrap(), format::decode(&fresh).unwrap());
        assert_eq!(
            current_index(&value).unwrap().canonical(),
            current_index(&fresh).unwrap().canonical(),
            "round {round}"
        );
        if expected == 0 {
            assert_eq!(value.payload, client.save(), "round {round}: a save of the document");
        }
    }
    let naive = WriteSettings { append_limit: 0, keep_json: false, ..WriteSettings::UNLIMITED };
    let heads = client.get_heads();
    client.put(ROOT, "round", 9_i64).unwrap();
    let written = apply(&stored, &client.save_after(&heads), naive).unwrap();
    assert_eq!((appended(&written), kept_json(&written)), (0, None));
}

#[test]
fn a_merge_where_one_side_contains_the_other_returns_that_side() {
    let (mut client, older) = titled();
    let mut another = client.fork().with_actor(ActorId::from([2; 16]));
    another.put(ROOT, "title", "Newer").unwrap();
    let newer = stored_from_client_bytes(&another.save(), WriteSettings::UNLIMITED).unwrap();
    // Nothing to load: the older side's head is the newer side's latest change of its actor.
    let no_loads = WriteSettings { load_limit: LoadLimit(Some(0)), ..WriteSettings::UNLIMITED };
    assert_eq!(merge(&older, &newer, no_loads).unwrap(), newer);
    assert_eq!(merge(&newer, &older, no_loads).unwrap(), newer);
}

#[test]
fn a_merge_with_the_same_clients_later_save_loads_only_that_save() {
    let (mut client, older) = titled();
    client.put(ROOT, "title", "Newer").unwrap();
    let newer = stored_from_client_bytes(&client.save(), WriteSettings::UNLIMITED).unwrap();
    let value = format::decode(&newer).unwrap();
    let one_load = estimate_stored(&value.summary, value.payload).peak_bytes();
    let one_load_only =
        WriteSettings { load_limit: LoadLimit(Some(one_load)), ..WriteSettings::UNLIMITED };
    assert_eq!(merge(&older, &newer, one_load_only).unwrap(), newer);
}

/// Appended writes leave the kept structure index as it was for up to `REENCODE_AFTER`
/// changes, and the next write replays what it lacks: the index a write works from is
/// always the one of the whole document.
#[test]
fn the_kept_index_lags_a_few_appended_changes_and_is_replayed() {
    let settings = WriteSettings { append_limit: 100, ..WriteSettings::UNLIMITED };
    let mut local = doc(1, "a");
    let text = local.put_object(ROOT, "text", automerge::ObjType::Text).unwrap();
    let mut stored = stored_from_client_bytes(&local.save(), settings).unwrap();
    let mut encoded_at = Vec::new();
    for n in 1..=20u32 {
        let heads = local.get_heads();
        local.splice_text(&text, 0, 0, &format!("{n} ")).unwrap();
        stored = apply(&stored, &local.save_after(&heads), settings).unwrap();
        let value = format::decode(&stored).unwrap();
        let kept = value.kept.as_ref().unwrap();
        assert_eq!(kept.appended_changes, n, "appended");
        let (_, includes) = Structure::decode(kept.structure.as_deref().unwrap()).unwrap();
        let includes = includes.unwrap();
        assert!(n - includes < REENCODE_AFTER, "lags {} changes", n - includes);
        if includes == n {
            encoded_at.push(n);
        }
        let fresh = stored_from_client_bytes(&local.save(), settings).unwrap();
        let fresh = format::decode(&fresh).unwrap();
        assert_eq!(
            current_index(&value).unwrap().canonical(),
            current_index(&fresh).unwrap().canonical(),
            "after {n} writes"
        );
    }
    assert_eq!(encoded_at, [4, 8, 12, 16, 20]);
}

#[test]
fn stores_a_save_unchanged_with_its_summary() {
    let mut doc = doc(1, "title");
    let saved = doc.save();
    let stored = stored_from_client_bytes(&saved, WriteSettings::UNLIMITED).unwrap();
    assert_eq!(format::client_bytes(&stored).unwrap(), &saved[..]);
    let value = format::decode(&stored).unwrap();
    assert_eq!(value.summary.change_count, 1);
    assert_eq!(value.summary.op_count, 1);
    assert_eq!(value.summary.heads, doc.get_heads());
}

#[test]
fn a_save_with_changes_after_it_is_stored_as_it_came() {
    let mut doc = doc(1, "title");
    let saved = doc.save();
    let heads = doc.get_heads();
    doc.put(ROOT, "title", "two").unwrap();
    let mut payload = saved.clone();
    payload.extend_from_slice(&doc.save_after(&heads));
    let stored = stored_from_client_bytes(&payload, WriteSettings::UNLIMITED).unwrap();
    assert_eq!(format::client_bytes(&stored).unwrap(), &payload[..]);
    assert_eq!(format::decode(&stored).unwrap().kept.unwrap().appended_changes, 1);
    // Changes alone are stored as the document they make.
    let changes = doc.save_after(&[]);
    let stored = stored_from_client_bytes(&changes, WriteSettings::UNLIMITED).unwrap();
    assert_eq!(format::client_bytes(&stored).unwrap(), &doc.save()[..]);
    assert_eq!(format::decode(&stored).unwrap().kept.unwrap().appended_changes, 0);
}
