//! Casts between `automerge` and `bytea`. Drivers send documents as `bytea` parameters, so
//! `bytea → automerge` is an assignment cast: `INSERT … VALUES ($1)` with a bytea `$1`
//! works on an `automerge` column, and the bytes are validated like any input.

use pg_automerge_core::writes;
use pgrx::prelude::*;

use crate::datum::StoredDoc;
use crate::errors::OrRaise;
use crate::gucs;

#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_from_bytea(bytes: &[u8]) -> StoredDoc<'static> {
    StoredDoc::owned(
        writes::stored_from_client_bytes(bytes, gucs::write_settings())
            .or_raise("automerge_from_bytea"),
    )
}

extension_sql!(
    r#"
CREATE CAST (bytea AS automerge) WITH FUNCTION automerge_from_bytea(bytea) AS ASSIGNMENT;
CREATE CAST (automerge AS bytea) WITH FUNCTION automerge_send(automerge);
"#,
    name = "automerge_bytea_casts",
    requires = ["automerge_type", automerge_from_bytea],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_support::{sample, sqlstate_of};

    #[pg_test]
    fn bytea_round_trips() {
        let saved = sample("meeting-notes").save();
        let back = Spi::get_one_with_args::<Vec<u8>>(
            "SELECT $1::bytea::automerge::bytea",
            &[saved.clone().into()],
        )
        .unwrap();
        assert_eq!(back, Some(saved));
    }

    #[pg_test]
    fn a_bytea_parameter_is_assigned_to_an_automerge_column() {
        let saved = sample("project").save();
        Spi::run("CREATE TEMP TABLE docs (doc automerge)").unwrap();
        Spi::run_with_args("INSERT INTO docs VALUES ($1)", &[saved.clone().into()]).unwrap();
        let back = Spi::get_one::<Vec<u8>>("SELECT doc::bytea FROM docs").unwrap();
        assert_eq!(back, Some(saved));
    }

    #[pg_test]
    fn garbage_bytea_is_refused() {
        assert_eq!(sqlstate_of("SELECT '\\x0102'::bytea::automerge"), "22P03");
    }

    #[pg_test]
    fn automerge_is_not_implicitly_bytea() {
        // Only explicit casts turn a document into bytes.
        assert_eq!(
            sqlstate_of("SELECT length(automerge_from_bytea(''::bytea))"),
            "42883" // undefined_function: length(automerge) does not exist
        );
    }
}
