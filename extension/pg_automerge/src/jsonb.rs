//! The document as `jsonb`: an implicit cast, so `doc->>'title'`, `@>`, generated columns
//! and GIN expression indexes on `(doc::jsonb)` work. The mapping of each Automerge value
//! is documented in `pg_automerge_core::json` and docs/sql-reference.md.

use std::borrow::Cow;

use pg_automerge_core::format::{self, Header, JsonLayout, Prefix};
use pg_automerge_core::{json, json_reads};
use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable,
};
use pgrx::prelude::*;
use pgrx::{pg_sys, IntoDatum};

use crate::datum::LazyDoc;
use crate::errors::OrRaise;
use crate::kept_json::{jsonb_from_text, kept_datum, JSONB};
use crate::loading;

/// The document as `jsonb`. A value that keeps its JSON as `jsonb` hands it over as it is:
/// its leading bytes fetched (header, actor table, JSON), decompressed into the result,
/// with no parse, no load and no Rust heap. JSON kept as text (values of 0.3.0 and 0.4.0)
/// is parsed; any other value is loaded.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_to_jsonb(doc: LazyDoc<'_>) -> JsonbOut<'_> {
    let header = Header::read(&doc).or_raise("automerge_to_jsonb");
    current_jsonb(doc, &header)
}

/// The document's current JSON, as [`automerge_to_jsonb`] reads it.
fn current_jsonb<'a>(doc: LazyDoc<'a>, header: &Header) -> JsonbOut<'a> {
    const FUNCTION: &str = "automerge_to_jsonb";
    match header.json(doc.prefix(header.json_end())).or_raise(FUNCTION) {
        Some(json) if json.layout == JsonLayout::Jsonb => {
            JsonbOut::Datum(kept_datum(&json).or_raise(FUNCTION))
        }
        _ => JsonbOut::Text(
            format::decode(doc.prefix(usize::MAX))
                .and_then(|value| json_reads::json_text(&value, &JSONB))
                .map(|json| Cow::Owned(json.into_owned()))
                .or_raise(FUNCTION),
        ),
    }
}

/// A `jsonb` result: a datum made already, or JSON text that `jsonb_in` parses in palloc'd
/// memory, so that a large document costs no Rust heap on the way out.
pub enum JsonbOut<'a> {
    Datum(pg_sys::Datum),
    Text(Cow<'a, str>),
}

unsafe impl SqlTranslatable for JsonbOut<'_> {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(JsonB);
    const TYPE_ORIGIN: pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin =
        pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}

impl IntoDatum for JsonbOut<'_> {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        match self {
            JsonbOut::Datum(datum) => Some(datum),
            JsonbOut::Text(text) => Some(jsonb_from_text(&text)),
        }
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl BoxRet for JsonbOut<'_> {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

/// The document as it was when its heads were `heads`: its current JSON, read as the cast
/// reads it, when they are its heads; else from a load.
#[pg_extern(immutable, strict, parallel_safe, name = "automerge_to_jsonb")]
fn automerge_to_jsonb_at(doc: LazyDoc<'_>, heads: Vec<String>) -> JsonbOut<'_> {
    const FUNCTION: &str = "automerge_to_jsonb";
    let header = Header::read(&doc).or_raise(FUNCTION);
    let mut wanted = loading::parse_heads(&heads, FUNCTION);
    wanted.sort();
    wanted.dedup();
    if wanted == header.summary.heads {
        return current_jsonb(doc, &header);
    }
    let loaded = loading::load_bytes(doc.prefix(usize::MAX), FUNCTION);
    let heads = loading::known_heads(&loaded, &heads, FUNCTION);
    let json = json::document(&loaded, Some(&heads)).or_raise(FUNCTION);
    JsonbOut::Text(Cow::Owned(json.to_string()))
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
    fn the_document_at_its_own_heads_is_its_kept_json_without_a_load() {
        with_samples();
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        let differing = Spi::get_one::<i64>(
            "SELECT count(*) FROM samples \
             WHERE automerge_to_jsonb(doc, automerge_heads(doc)) IS DISTINCT FROM doc::jsonb",
        );
        assert_eq!(differing.unwrap(), Some(0));
        let loads = Spi::get_one::<i64>("SELECT loads FROM automerge_memory_usage()");
        assert_eq!(loads.unwrap(), Some(0));
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
