//! `automerge_loads(doc)` finds stored values that do not keep the invariant (their bytes
//! load, their JSON is the document's, their next save loads), which 0.3.0 could store from
//! crafted changes; `automerge_repair(doc)` mends one. Writes refuse such changes since 0.4.0.

use pg_automerge_core::repair::{self, Rebuilt};
use pgrx::prelude::*;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs::write_settings;

/// Whether the stored value loads in Automerge, its kept JSON is the loaded document's, and
/// its next save loads too. One load (and one of its save), within the load limit.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_loads(doc: StoredDoc<'_>) -> bool {
    repair::loads(doc.stored(), write_settings()).or_raise("automerge_loads")
}

/// The stored value mended: appended changes that break a rule of Automerge's loader are
/// dropped, and a save that does not load is rebuilt; a NOTICE says what was done. A value
/// that loads is returned as it is.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_repair(doc: StoredDoc<'_>) -> StoredDoc<'static> {
    let repaired = repair::repair(doc.stored(), write_settings()).or_raise("automerge_repair");
    if !repaired.dropped.is_empty() {
        let hashes: Vec<String> = repaired.dropped.iter().map(ToString::to_string).collect();
        notice!("automerge_repair dropped {} change(s): {}", hashes.len(), hashes.join(", "));
    }
    match repaired.rebuilt {
        Some(Rebuilt::FromOperations) => notice!(
            "automerge_repair rebuilt the document from its operations: its changes have new \
             hashes, so clients must load it anew"
        ),
        Some(Rebuilt::FromJson) => notice!(
            "automerge_repair rebuilt the document from its kept JSON: its history, marks and \
             blocks are lost, and clients must load it anew"
        ),
        None => {}
    }
    StoredDoc::owned(repaired.stored)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::{AutoCommit, Automerge, Change};
    use fixtures::wrong_changes::{client_document, honest_edit, wrong_change, Choices, Wrong};
    use pg_automerge_core::save::to_stored;
    use pg_automerge_core::{format, load, writes};
    use pgrx::datum::DatumWithOid;
    use pgrx::prelude::*;

    use crate::test_support::{error_of, hex_of, sqlstate_of};

    /// A client document with a few honest edits, stored as row 1 of `docs`.
    fn stored_client() -> AutoCommit {
        Spi::run("CREATE TABLE docs (id int PRIMARY KEY, doc automerge NOT NULL)").unwrap();
        let mut client = client_document(1);
        let mut choices = Choices::new(&[3, 1, 4, 1, 5, 9, 2, 6]);
        for _ in 0..4 {
            honest_edit(&mut client, &mut choices);
        }
        Spi::run_with_args("INSERT INTO docs VALUES (1, $1)", &[client.save().into()]).unwrap();
        client
    }

    fn row_bytes() -> Vec<u8> {
        Spi::get_one::<Vec<u8>>("SELECT doc::bytea FROM docs WHERE id = 1").unwrap().unwrap()
    }

    fn row_loads() -> bool {
        Spi::get_one::<bool>("SELECT automerge_loads(doc) FROM docs WHERE id = 1").unwrap().unwrap()
    }

    fn hex(bytes: &[u8]) -> String {
        format!("'{}'::bytea", hex_of(bytes))
    }

    /// Every way in refuses each kind of wrong change with 22P03 and keeps the stored
    /// document as it was, loadable.
    #[pg_test]
    fn every_entry_point_refuses_changes_that_would_not_load() {
        let mut client = stored_client();
        let before = row_bytes();
        for kind in Wrong::ALL {
            let Some(wrong) = wrong_change(&mut client, kind, &mut Choices::new(&[])) else {
                continue;
            };
            let mut save_then_wrong = client.save();
            save_then_wrong.extend_from_slice(&wrong);
            let mut changes_then_wrong = client.save_after(&[]);
            changes_then_wrong.extend_from_slice(&wrong);
            let writes = [
                format!("UPDATE docs SET doc = doc || {} WHERE id = 1", hex(&wrong)),
                format!(
                    "SET LOCAL pg_automerge.append_limit = 0; \
                     UPDATE docs SET doc = doc || {} WHERE id = 1",
                    hex(&wrong)
                ),
                format!("INSERT INTO docs VALUES (2, {})", hex(&save_then_wrong)),
                format!("INSERT INTO docs VALUES (2, {})", hex(&changes_then_wrong)),
                format!(
                    "INSERT INTO docs VALUES (1, {}) ON CONFLICT (id) DO UPDATE \
                     SET doc = docs.doc || EXCLUDED.doc",
                    hex(&save_then_wrong)
                ),
                format!(
                    "SELECT merge_agg(d) FROM (SELECT doc AS d FROM docs \
                     UNION ALL SELECT {}::automerge) s",
                    hex(&save_then_wrong)
                ),
            ];
            for write in writes {
                assert_eq!(sqlstate_of(&write), "22P03", "{kind:?}: {write:.80}");
                assert_eq!(row_bytes(), before, "{kind:?}: the stored value is unchanged");
            }
        }
        assert!(row_loads());
    }

    /// Issue 35: each mark kind is refused through every entry point with its rule named
    /// in the DETAIL (the test above checks the SQLSTATE and that nothing is stored).
    #[pg_test]
    fn mark_changes_are_refused_naming_their_rule() {
        let mut client = stored_client();
        for kind in Wrong::MARKS {
            let wrong = wrong_change(&mut client, kind, &mut Choices::new(&[1])).unwrap();
            let mut save_then_wrong = client.save();
            save_then_wrong.extend_from_slice(&wrong);
            for write in [
                format!("UPDATE docs SET doc = doc || {} WHERE id = 1", hex(&wrong)),
                format!("INSERT INTO docs VALUES (2, {})", hex(&save_then_wrong)),
                format!(
                    "SELECT merge_agg(d) FROM (SELECT doc AS d FROM docs \
                     UNION ALL SELECT {}::automerge) s",
                    hex(&save_then_wrong)
                ),
            ] {
                let raised = error_of(&write).unwrap_or_else(|| panic!("{kind:?}: accepted"));
                assert_eq!(raised.sqlstate, "22P03", "{kind:?}: {write:.60}");
                let detail = raised.detail.unwrap_or_default();
                assert!(
                    detail.contains("mark order") || detail.contains("not inserted into a text"),
                    "{kind:?}: {detail}"
                );
            }
        }
    }

    /// What 0.5.0 stored from a mark change appended to the save (as `doc || change` did):
    /// clients load it, its next save does not. `automerge_compact` leaves it as it is with
    /// a WARNING, and `automerge_repair` drops the change.
    #[pg_test]
    fn a_mark_change_appended_by_0_5_0_is_left_by_compact_and_repaired() {
        let mut client = stored_client();
        let wrong = wrong_change(&mut client, Wrong::MarkEndBeforeBegin, &mut Choices::new(&[]))
            .expect("the client document has a text to mark");
        let good = writes::stored_from_client_bytes(&client.save(), crate::gucs::write_settings())
            .unwrap();
        let appended = appended_to(&good, &wrong);
        assert!(Automerge::load(format::client_bytes(&appended).unwrap()).is_ok());
        // SAFETY: the datum is an `automerge` varlena, as the stored column holds.
        let value = unsafe {
            DatumWithOid::new(
                crate::datum::StoredDoc::owned(appended),
                pgrx::regtypein("automerge"),
            )
        };
        Spi::run_with_args("UPDATE docs SET doc = $1 WHERE id = 1", &[value]).unwrap();
        assert!(!row_loads());
        let before = row_bytes();
        Spi::run("UPDATE docs SET doc = automerge_compact(doc)").unwrap();
        assert_eq!(row_bytes(), before, "left as it is, loadable by clients");
        Spi::run("UPDATE docs SET doc = automerge_repair(doc) WHERE NOT automerge_loads(doc)")
            .unwrap();
        assert!(row_loads());
        let heads: Vec<String> =
            Spi::get_one("SELECT automerge_heads(doc) FROM docs").unwrap().unwrap();
        let expected: Vec<String> = client.get_heads().iter().map(|h| h.to_string()).collect();
        assert_eq!(heads, expected, "the document as it was before the change");
    }

    /// `good` with the change `wrong` appended as 0.5.0's append path did, unchecked.
    fn appended_to(good: &[u8], wrong: &[u8]) -> Vec<u8> {
        use pg_automerge_core::format::{self, Kept, Summary};
        let value = format::decode(good).unwrap();
        let change = Change::try_from(wrong).unwrap();
        let kept = value.kept.unwrap();
        let summary = Summary {
            change_count: value.summary.change_count + 1,
            op_count: value.summary.op_count + change.len() as u64,
            heads: vec![change.hash()],
        };
        let payload = [value.payload, wrong].concat();
        format::encode(&summary, &Kept { appended_changes: 1, ..kept }, &payload)
    }

    /// A value that 0.3.0 stored with an appended change that breaks a loader rule: found,
    /// refused by writes that load it (XX001), and mended by dropping the change.
    #[pg_test]
    fn a_value_stored_broken_by_0_3_0_is_found_and_repaired() {
        let mut client = stored_client();
        let wrong = wrong_change(&mut client, Wrong::PredOnAnotherKey, &mut Choices::new(&[]))
            .expect("the client document has keys to cross");
        // What 0.3.0 stored: the document with the change applied, saved.
        let mut broken = Automerge::load(&client.save()).unwrap();
        broken.apply_changes([Change::try_from(&wrong[..]).unwrap()]).unwrap();
        let stored = to_stored(&broken, crate::gucs::write_settings()).unwrap();
        assert!(load::load_stored(&format::decode(&stored).unwrap()).is_err());
        // SAFETY: the datum is an `automerge` varlena, as the stored column holds.
        let value = unsafe {
            DatumWithOid::new(crate::datum::StoredDoc::owned(stored), pgrx::regtypein("automerge"))
        };
        Spi::run_with_args("UPDATE docs SET doc = $1 WHERE id = 1", &[value]).unwrap();
        assert!(!row_loads());
        // Compacting it leaves it as it is (with a WARNING), rather than failing the
        // statement or storing a save that does not load.
        let before = row_bytes();
        Spi::run("UPDATE docs SET doc = automerge_compact(doc)").unwrap();
        assert_eq!(row_bytes(), before);
        Spi::run("UPDATE docs SET doc = automerge_repair(doc) WHERE NOT automerge_loads(doc)")
            .unwrap();
        assert!(row_loads());
        let json = Spi::get_one::<pgrx::JsonB>("SELECT doc::jsonb FROM docs").unwrap().unwrap();
        assert_eq!(json.0, pg_automerge_core::json::document(&broken, None).unwrap());
    }
}
