//! Writes: merging two documents, and applying change bytes to a stored document, as
//! functions and as `||` operators:
//!
//! - `doc || other` (both `automerge`): the merge, as in an upsert's
//!   `ON CONFLICT (id) DO UPDATE SET doc = docs.doc || EXCLUDED.doc`;
//! - `doc || changes` (`bytea`): applies one change, several, an incremental save or a full
//!   save, as in `UPDATE docs SET doc = doc || $1::bytea`.
//!
//! A write that brings nothing new returns the stored value as it was, unsaved.

use pg_automerge_core::writes;
use pgrx::prelude::*;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_merge(left: StoredDoc<'_>, right: StoredDoc<'_>) -> StoredDoc<'static> {
    StoredDoc::owned(
        writes::merge(left.stored(), right.stored(), gucs::write_settings())
            .or_raise("automerge_merge"),
    )
}

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_apply(doc: StoredDoc<'_>, changes: &[u8]) -> StoredDoc<'static> {
    StoredDoc::owned(
        writes::apply(doc.stored(), changes, gucs::write_settings()).or_raise("automerge_apply"),
    )
}

extension_sql!(
    r#"
CREATE OPERATOR || (LEFTARG = automerge, RIGHTARG = automerge, FUNCTION = automerge_merge);
COMMENT ON OPERATOR || (automerge, automerge) IS 'merge two documents';
CREATE OPERATOR || (LEFTARG = automerge, RIGHTARG = bytea, FUNCTION = automerge_apply);
COMMENT ON OPERATOR || (automerge, bytea) IS 'apply Automerge changes to a document';
"#,
    name = "automerge_write_operators",
    requires = ["automerge_type", automerge_merge, automerge_apply],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ROOT};
    use pgrx::prelude::*;

    use crate::test_support::{hex_of, sample, sqlstate_of};

    /// A client's copy of the `project` sample with one more edit, and that edit's bytes.
    fn edited_project(key: &str, actor: u8) -> (AutoCommit, Vec<u8>) {
        let mut client = AutoCommit::load(&sample("project").save())
            .unwrap()
            .with_actor(automerge::ActorId::from([actor; 16]));
        let before = client.get_heads();
        client.put(ROOT, key, "set by a client").unwrap();
        let change = client.save_after(&before);
        (client, change)
    }

    fn setup_table() {
        Spi::run("CREATE TABLE docs (id int PRIMARY KEY, doc automerge NOT NULL)").unwrap();
        Spi::run_with_args("INSERT INTO docs VALUES (1, $1)", &[sample("project").save().into()])
            .unwrap();
    }

    fn stored_heads() -> Vec<String> {
        Spi::get_one::<Vec<String>>("SELECT automerge_heads(doc) FROM docs WHERE id = 1")
            .unwrap()
            .unwrap()
    }

    #[pg_test]
    fn an_incremental_write_applies_a_change() {
        setup_table();
        let (mut client, change) = edited_project("note", 7);
        Spi::run_with_args("UPDATE docs SET doc = doc || $1 WHERE id = 1", &[change.into()])
            .unwrap();
        assert_eq!(stored_heads(), pg_automerge_core::heads::to_hex(&client.get_heads()));
        let note = Spi::get_one::<String>("SELECT doc->>'note' FROM docs WHERE id = 1").unwrap();
        assert_eq!(note.as_deref(), Some("set by a client"));
    }

    #[pg_test]
    fn applying_a_full_save_or_several_changes_works_too() {
        setup_table();
        let (mut first, _) = edited_project("a", 7);
        let (mut second, _) = edited_project("b", 8);
        let both: Vec<u8> = [first.save(), second.save()].concat();
        Spi::run_with_args("UPDATE docs SET doc = automerge_apply(doc, $1)", &[both.into()])
            .unwrap();
        let mut expected = first.fork();
        expected.merge(&mut second).unwrap();
        assert_eq!(stored_heads(), pg_automerge_core::heads::to_hex(&expected.get_heads()));
    }

    #[pg_test]
    fn an_upsert_of_a_full_save_merges() {
        setup_table();
        let (mut client, _) = edited_project("note", 7);
        let upsert = "INSERT INTO docs VALUES (1, $1) \
                      ON CONFLICT (id) DO UPDATE SET doc = docs.doc || EXCLUDED.doc";
        Spi::run_with_args(upsert, &[client.save().into()]).unwrap();
        assert_eq!(stored_heads(), pg_automerge_core::heads::to_hex(&client.get_heads()));
        Spi::run_with_args(
            upsert.replace("VALUES (1", "VALUES (2").as_str(),
            &[client.save().into()],
        )
        .unwrap();
        let rows = Spi::get_one::<i64>("SELECT count(*) FROM docs").unwrap();
        assert_eq!(rows, Some(2));
    }

    #[pg_test]
    fn merging_is_commutative_in_state() {
        let (mut a, _) = edited_project("a", 7);
        let (mut b, _) = edited_project("b", 8);
        let ab = Spi::get_one_with_args::<Vec<String>>(
            "SELECT automerge_heads(automerge_merge($1::bytea::automerge, $2::bytea::automerge))",
            &[a.save().into(), b.save().into()],
        );
        let ba = Spi::get_one_with_args::<Vec<String>>(
            "SELECT automerge_heads($2::bytea::automerge || $1::bytea::automerge)",
            &[a.save().into(), b.save().into()],
        );
        assert_eq!(ab.unwrap(), ba.unwrap());
    }

    #[pg_test]
    fn changes_with_missing_dependencies_are_refused_and_nothing_is_lost() {
        setup_table();
        let before = stored_heads();
        let mut client = AutoCommit::load(&sample("project").save()).unwrap();
        client.put(ROOT, "x", 1_i64).unwrap();
        let heads = client.get_heads();
        client.put(ROOT, "y", 2_i64).unwrap();
        let orphan = client.save_after(&heads);
        let sql = format!("UPDATE docs SET doc = doc || '{}'::bytea WHERE id = 1", hex_of(&orphan));
        assert_eq!(sqlstate_of(&sql), "22P03");
        assert_eq!(stored_heads(), before);
        assert_eq!(sqlstate_of("UPDATE docs SET doc = doc || '\\xdead'::bytea"), "22P03");
    }
}
