//! Concurrent values: `automerge_conflicts(doc, path text[])`, a row for every value at a
//! map key or list index (see `pg_automerge_core::conflicts`).

use pg_automerge_core::conflicts;
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::loading;

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_conflicts(
    doc: StoredDoc<'_>,
    path: Vec<String>,
) -> TableIterator<'static, (name!(value, JsonB), name!(op_id, String), name!(winner, bool))> {
    const FUNCTION: &str = "automerge_conflicts";
    let loaded = loading::load(&doc, FUNCTION);
    let values = conflicts::conflicts(&loaded, &path).or_raise(FUNCTION);
    TableIterator::new(values.into_iter().map(|c| (JsonB(c.value), c.op_id, c.winner)))
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::transaction::Transactable;
    use automerge::{ActorId, AutoCommit, ROOT};
    use pgrx::prelude::*;

    use crate::test_support::{hex_of, sqlstate_of};

    /// Two authors who set the title at once.
    fn concurrent_sql() -> String {
        let mut a = AutoCommit::new().with_actor(ActorId::from([0xaa; 16]));
        a.put(ROOT, "title", "base").unwrap();
        let mut b = a.fork().with_actor(ActorId::from([0xbb; 16]));
        a.put(ROOT, "title", "from a").unwrap();
        b.put(ROOT, "title", "from b").unwrap();
        a.merge(&mut b).unwrap();
        format!("'{}'::automerge", hex_of(&a.save()))
    }

    #[pg_test]
    fn a_row_for_each_concurrent_value_and_the_winner_is_what_jsonb_shows() {
        let doc = concurrent_sql();
        let rows = Spi::get_one::<i64>(&format!(
            "SELECT count(*) FROM automerge_conflicts({doc}, '{{title}}')"
        ));
        assert_eq!(rows.unwrap(), Some(2));
        let winner_shown = Spi::get_one::<bool>(&format!(
            "SELECT value = ({doc})::jsonb -> 'title' FROM automerge_conflicts({doc}, '{{title}}') \
             WHERE winner"
        ));
        assert_eq!(winner_shown.unwrap(), Some(true));
        let op_ids = Spi::get_one::<Vec<String>>(&format!(
            "SELECT array_agg(op_id ORDER BY op_id) FROM automerge_conflicts({doc}, '{{title}}')"
        ));
        let expected = vec![format!("2@{}", "aa".repeat(16)), format!("2@{}", "bb".repeat(16))];
        assert_eq!(op_ids.unwrap(), Some(expected));
    }

    #[pg_test]
    fn conflicts_at_paths_to_nothing_are_refused() {
        let doc = concurrent_sql();
        for path in ["{}", "{missing,key}", "{title,0}"] {
            let sql = format!("SELECT * FROM automerge_conflicts({doc}, '{path}')");
            assert_eq!(sqlstate_of(&sql), "22023", "{sql}");
        }
    }
}
