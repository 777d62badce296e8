//! The document as `jsonb`: an implicit cast, so `doc->>'title'`, `@>`, generated columns
//! and GIN expression indexes on `(doc::jsonb)` work. The mapping of each Automerge value
//! is documented in `pg_automerge_core::json` and docs/sql-reference.md.

use std::borrow::Cow;

use pg_automerge_core::{document, format, json};
use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable,
};
use pgrx::prelude::*;
use pgrx::{pg_sys, IntoDatum, JsonB};

use crate::datum::{LazyDoc, StoredDoc};
use crate::errors::OrRaise;
use crate::stored;

/// The document as `jsonb`. A value that keeps its JSON (see `storage.rs`) is read from
/// its leading bytes alone, with no load and no Rust heap; any other value is loaded.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_to_jsonb(doc: LazyDoc<'_>) -> JsonbText<'_> {
    const FUNCTION: &str = "automerge_to_jsonb";
    if let Some(end) = format::json_end(doc.leading(format::HEADER_PREFIX_LEN)) {
        if let Some(json) = format::decode_json(doc.leading(end)).or_raise(FUNCTION) {
            return JsonbText(Cow::Borrowed(json));
        }
    }
    JsonbText(
        document::json_text(doc.stored().stored())
            .map(|json| Cow::Owned(json.into_owned()))
            .or_raise(FUNCTION),
    )
}

/// JSON text returned as `jsonb`: Postgres parses it (`jsonb_in`) from a copy in palloc'd
/// memory, so a large document costs no Rust heap on the way out.
pub struct JsonbText<'a>(Cow<'a, str>);

unsafe impl SqlTranslatable for JsonbText<'_> {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(JsonB);
    const TYPE_ORIGIN: pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin =
        pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}

impl IntoDatum for JsonbText<'_> {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let text = self.0.as_bytes();
        // SAFETY: a NUL-terminated copy in palloc'd memory is what `jsonb_in` reads.
        unsafe {
            let cstring = pg_sys::palloc(text.len() + 1).cast::<u8>();
            std::ptr::copy_nonoverlapping(text.as_ptr(), cstring, text.len());
            *cstring.add(text.len()) = 0;
            pgrx::direct_function_call_as_datum(
                pg_sys::jsonb_in,
                &[Some(pg_sys::Datum::from(cstring))],
            )
        }
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl BoxRet for JsonbText<'_> {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

/// The document as it was when its heads were `heads`.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_to_jsonb")]
fn automerge_to_jsonb_at(doc: StoredDoc<'_>, heads: Vec<String>) -> JsonB {
    let loaded = stored::load(&doc, "automerge_to_jsonb");
    let heads = stored::known_heads(&loaded, &heads, "automerge_to_jsonb");
    JsonB(json::document(&loaded, Some(&heads)).or_raise("automerge_to_jsonb"))
}

extension_sql!(
    "CREATE CAST (automerge AS jsonb) WITH FUNCTION automerge_to_jsonb(automerge) AS IMPLICIT;\n",
    name = "automerge_jsonb_cast",
    requires = ["automerge_type", automerge_to_jsonb],
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;

    use crate::test_support::{hex_of, sample, sqlstate_of, with_samples};

    #[pg_test]
    fn the_cast_gives_the_document() {
        with_samples();
        let project =
            Spi::get_one::<JsonB>("SELECT doc::jsonb FROM samples WHERE name = 'project'")
                .unwrap()
                .unwrap();
        assert_eq!(
            project.0,
            json!({
                "title": "Launch plan", "status": "review", "priority": 2, "views": 3,
                "due": "2026-02-01T00:00:00.000Z", "tags": ["q1", "web"]
            })
        );
    }

    #[pg_test]
    fn jsonb_operators_work_through_the_implicit_cast() {
        with_samples();
        let title =
            Spi::get_one::<String>("SELECT doc->>'title' FROM samples WHERE name = 'todo-list'");
        assert_eq!(title.unwrap().as_deref(), Some("Groceries"));
        let matching = Spi::get_one::<i64>(
            "SELECT count(*) FROM samples WHERE doc @> '{\"status\": \"review\"}'",
        );
        assert_eq!(matching.unwrap(), Some(1));
        let path = Spi::get_one::<String>(
            "SELECT doc #>> '{items,1,text}' FROM samples WHERE name = 'todo-list'",
        );
        assert_eq!(path.unwrap().as_deref(), Some("milk"));
    }

    #[pg_test]
    fn generated_columns_and_gin_indexes_work() {
        Spi::run(
            "CREATE TABLE indexed (id int PRIMARY KEY, doc automerge NOT NULL, \
                 body jsonb GENERATED ALWAYS AS (doc::jsonb) STORED); \
             CREATE INDEX indexed_gin ON indexed USING gin ((doc::jsonb));",
        )
        .unwrap();
        Spi::run_with_args(
            "INSERT INTO indexed (id, doc) VALUES (1, $1)",
            &[sample("project").save().into()],
        )
        .unwrap();
        let body = Spi::get_one::<String>("SELECT body->>'status' FROM indexed").unwrap();
        assert_eq!(body.as_deref(), Some("review"));
        Spi::run("SET LOCAL enable_seqscan = off").unwrap();
        let plan = Spi::get_one::<pgrx::Json>(
            "EXPLAIN (FORMAT JSON) SELECT id FROM indexed WHERE doc::jsonb @> '{\"status\": \"review\"}'",
        )
        .unwrap()
        .unwrap();
        assert!(plan.0.to_string().contains("indexed_gin"), "{}", plan.0);
        let found = Spi::get_one::<i32>(
            "SELECT id FROM indexed WHERE doc::jsonb @> '{\"status\": \"review\"}'",
        );
        assert_eq!(found.unwrap(), Some(1));
    }

    #[pg_test]
    fn reads_the_document_as_of_earlier_heads() {
        let doc = sample("project");
        let first = doc.get_changes(&[])[0].hash().to_string();
        let then = Spi::get_one::<JsonB>(&format!(
            "SELECT automerge_to_jsonb('{}'::automerge, ARRAY['{first}'])",
            hex_of(&doc.save())
        ));
        assert_eq!(
            then.unwrap().unwrap().0,
            json!({"title": "Launch plan", "status": "draft", "priority": 2})
        );
    }

    #[pg_test]
    fn bad_heads_are_invalid_parameters() {
        let doc = hex_of(&sample("project").save());
        let unknown = "ab".repeat(32);
        for heads in ["ARRAY['nope']", &format!("ARRAY['{unknown}']")] {
            let sql = format!("SELECT automerge_to_jsonb('{doc}'::automerge, {heads})");
            assert_eq!(sqlstate_of(&sql), "22023", "{heads}");
        }
    }

    #[pg_test]
    fn nesting_too_deep_for_json_is_statement_too_complex() {
        use pg_automerge_core::json::MAX_DEPTH;
        let deep = hex_of(&fixtures::hostile::deeply_nested(MAX_DEPTH).save());
        for sql in [
            format!("SELECT '{deep}'::automerge::jsonb"),
            format!("SELECT '{deep}'::automerge->'next'"),
        ] {
            assert_eq!(sqlstate_of(&sql), "54001", "{sql:.60}");
        }
        // One level less is read, and the document itself is stored either way.
        let within = hex_of(&fixtures::hostile::deeply_nested(MAX_DEPTH - 1).save());
        let read = Spi::get_one::<bool>(&format!("SELECT '{within}'::automerge::jsonb ? 'next'"));
        assert_eq!(read.unwrap(), Some(true));
        let stored = Spi::get_one::<i64>(&format!("SELECT automerge_change_count('{deep}')"));
        assert_eq!(stored.unwrap(), Some(1));
    }
}
