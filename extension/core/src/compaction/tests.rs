//! Compaction of a snapshot, put onto the value as later writes left it.

use automerge::marks::{ExpandMark, Mark};
use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, Automerge, ObjId, ObjType, ROOT};

use super::*;
use crate::load::load_stored;
use crate::writes::stored_from_client_bytes;
use crate::{json, json_reads, kept_json, writes};

const SETTINGS: WriteSettings = WriteSettings { append_limit: 100, ..WriteSettings::UNLIMITED };

/// A client whose document holds a text object, as `@automerge/automerge` 3 makes for a
/// string, and the stored form of its save.
fn client_with_text() -> (AutoCommit, ObjId, Vec<u8>) {
    let mut client = AutoCommit::new().with_actor(ActorId::from([7; 16]));
    let text = client.put_object(ROOT, "notes", ObjType::Text).unwrap();
    client.splice_text(&text, 0, 0, "first words").unwrap();
    let stored = stored_from_client_bytes(&client.save(), SETTINGS).unwrap();
    (client, text, stored)
}

/// `writes` incremental writes of the client's typing, each appended to `stored`.
fn type_into(client: &mut AutoCommit, text: &ObjId, stored: &[u8], writes: usize) -> Vec<u8> {
    let mut stored = stored.to_vec();
    for n in 0..writes {
        let heads = client.get_heads();
        client.splice_text(text, 5, 0, &format!(" {n}")).unwrap();
        client.put(ROOT, "count", n as i64).unwrap();
        if n % 2 == 1 {
            let mark = Mark::new("bold".into(), true, 0, 4);
            client.mark(text, mark, ExpandMark::After).unwrap();
        }
        stored = writes::apply(&stored, &client.save_after(&heads), SETTINGS).unwrap();
    }
    stored
}

fn appended(stored: &[u8]) -> u32 {
    format::decode(stored).unwrap().kept.unwrap().appended_changes
}

fn kept_json(stored: &[u8]) -> serde_json::Value {
    json_reads::kept(stored, &kept_json::TextJson).unwrap().unwrap()
}

#[test]
fn a_compaction_takes_the_changes_appended_after_it_read_the_value() {
    let (mut client, text, stored) = client_with_text();
    let read = type_into(&mut client, &text, &stored, 3);
    assert_eq!(appended(&read), 3);
    let compacted = Compacted::of(&read, SETTINGS).unwrap().expect("changes to compact");
    let current = type_into(&mut client, &text, &read, 6);
    assert_eq!(appended(&current), 9);

    let put = compacted.onto(&current).unwrap().expect("appended writes only extend");
    assert_eq!(appended(&put), 6, "the changes after the read stay appended");
    let (value, before) = (format::decode(&put).unwrap(), format::decode(&current).unwrap());
    assert_eq!(value.summary, before.summary);
    assert!(value.payload.len() < before.payload.len(), "the payload was compacted");
    let loaded = load_stored(&format::decode(&put).unwrap()).unwrap();
    assert_eq!(loaded.get_heads(), client.get_heads());
    let client_json = json::document(client.document(), None).unwrap();
    assert_eq!(json::document(&loaded, None).unwrap(), client_json);
    assert_eq!(kept_json(&put), client_json);
    // What clients load: the payload alone, and saved again.
    let reloaded = Automerge::load(value.payload).unwrap();
    assert_eq!(reloaded.get_heads(), client.get_heads());
    Automerge::load(&reloaded.save()).unwrap();
    // Its spans are the client's, marks included.
    let notes = ["notes".to_string()];
    assert_eq!(
        crate::spans::spans(&loaded, &notes, None).unwrap(),
        crate::spans::spans(client.document(), &notes, None).unwrap()
    );
    // The index is the document's once the appended changes are replayed.
    assert_eq!(
        writes::current_index(&value).unwrap().canonical(),
        writes::current_index(&before).unwrap().canonical()
    );

    // Later writes append to it, and the next compaction leaves nothing appended.
    let after = type_into(&mut client, &text, &put, 2);
    assert_eq!(appended(&after), 8);
    assert_eq!(kept_json(&after), json::document(client.document(), None).unwrap());
    let again = Compacted::of(&after, SETTINGS).unwrap().unwrap().onto(&after).unwrap().unwrap();
    assert_eq!(appended(&again), 0);
    assert_eq!(
        load_stored(&format::decode(&again).unwrap()).unwrap().get_heads(),
        client.get_heads()
    );
}

#[test]
fn with_no_write_since_the_compacted_value_is_put_as_it_is() {
    let (mut client, text, stored) = client_with_text();
    let read = type_into(&mut client, &text, &stored, 2);
    let compacted = Compacted::of(&read, SETTINGS).unwrap().unwrap();
    let put = compacted.onto(&read).unwrap().unwrap();
    assert_eq!(appended(&put), 0);
    assert_eq!(put, compact(&format::decode(&read).unwrap(), SETTINGS).unwrap());
    // The next writes append to it.
    let after = type_into(&mut client, &text, &put, 5);
    assert_eq!(appended(&after), 5);
    assert_eq!(kept_json(&after), json::document(client.document(), None).unwrap());
}

#[test]
fn a_write_that_saved_anew_since_drops_the_compaction() {
    let (mut client, text, stored) = client_with_text();
    let read = type_into(&mut client, &text, &stored, 2);
    let compacted = Compacted::of(&read, SETTINGS).unwrap().unwrap();
    let heads = client.get_heads();
    client.splice_text(&text, 0, 0, "loaded ").unwrap();
    let loads = WriteSettings { append_limit: 0, ..SETTINGS };
    let saved_anew = writes::apply(&read, &client.save_after(&heads), loads).unwrap();
    assert_eq!(appended(&saved_anew), 0);
    assert_eq!(compacted.onto(&saved_anew).unwrap(), None);
}

#[test]
fn a_value_with_nothing_appended_needs_no_compaction() {
    let (_, _, stored) = client_with_text();
    assert!(Compacted::of(&stored, SETTINGS).unwrap().is_none());
}
