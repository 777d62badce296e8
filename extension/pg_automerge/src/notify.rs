//! `automerge_notify(channel, document column, key columns…)`: an AFTER ROW trigger that
//! sends exactly one NOTIFY per write that changes a document, with a JSON payload:
//!
//! `{"table": "public.docs", "operation": "UPDATE", "key": {"id": 1},
//!   "heads": [...], "previous_heads": [...]}`
//!
//! `heads` is absent on DELETE and `previous_heads` on INSERT. An UPDATE that leaves the
//! document's heads and the key as they were (a merge or apply that brought nothing new)
//! sends nothing. NOTIFY payloads must stay under 8000 bytes: a payload that would not is
//! sent without its heads, then without its key, with `"truncated": true` and a
//! `heads_digest` (16 hex digits of the heads): it is always valid JSON, and stays distinct
//! from the other writes of the transaction, which Postgres would otherwise fold into one.

use std::ffi::CStr;
use std::num::NonZeroUsize;

use pg_automerge_core::heads;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode, PgTupleDesc};
use serde_json::{json, Map, Value as Json};

use crate::datum::DocHeader;
use crate::errors::{raise_sqlstate, OrRaise};

const FUNCTION: &str = "automerge_notify";
/// Postgres refuses NOTIFY payloads of 8000 bytes or more.
const PAYLOAD_LIMIT: usize = 8000;

fn protocol_error(message: &str) -> ! {
    raise_sqlstate(
        PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
        message.to_string(),
        Some("Use: CREATE TRIGGER … AFTER INSERT OR UPDATE OR DELETE ON t FOR EACH ROW EXECUTE FUNCTION automerge_notify('channel', 'doc_column', 'key_column', …)"),
        FUNCTION,
    )
}

#[pg_trigger]
fn automerge_notify<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgTriggerError> {
    let after_row = matches!(trigger.when()?, PgTriggerWhen::After)
        && matches!(trigger.level(), PgTriggerLevel::Row);
    if !after_row {
        protocol_error("automerge_notify must be an AFTER … FOR EACH ROW trigger");
    }
    let args = trigger.extra_args()?;
    let [channel, doc_column, key_columns @ ..] = args.as_slice() else {
        protocol_error("automerge_notify needs a channel and the document column as arguments");
    };
    let data = trigger.trigger_data();
    // SAFETY: the trigger manager passes a valid relation whose descriptor outlives the call.
    let tupdesc = unsafe { PgTupleDesc::from_pg_unchecked((*data.tg_relation).rd_att) };
    let operation = trigger.op()?;
    // tg_trigtuple is the inserted or deleted row, or the old row of an UPDATE.
    let (new, old) = match operation {
        PgTriggerOperation::Insert => (data.tg_trigtuple, std::ptr::null_mut()),
        PgTriggerOperation::Update => (data.tg_newtuple, data.tg_trigtuple),
        PgTriggerOperation::Delete => (std::ptr::null_mut(), data.tg_trigtuple),
        PgTriggerOperation::Truncate => protocol_error("automerge_notify does not handle TRUNCATE"),
    };
    let new_heads = document_heads(new, &tupdesc, doc_column);
    let previous_heads = document_heads(old, &tupdesc, doc_column);
    let key_of = |row| -> Map<String, Json> {
        key_columns.iter().map(|c| (c.clone(), column_json(row, &tupdesc, c))).collect()
    };
    let key = key_of(if new.is_null() { old } else { new });
    if matches!(operation, PgTriggerOperation::Update)
        && new_heads == previous_heads
        && key == key_of(old)
    {
        return Ok(None);
    }
    let table = format!("{}.{}", trigger.table_schema()?, trigger.table_name()?);
    let table = distributed_table_of_shard(&table).unwrap_or(table);
    let payload = payload(&table, operation.to_string().as_str(), key, new_heads, previous_heads);
    Spi::run_with_args("SELECT pg_notify($1, $2)", &[channel.as_str().into(), payload.into()])
        .unwrap_or_else(|err| error!("{FUNCTION}: {err}"));
    Ok(None)
}

/// On a Citus worker, the trigger fires on a shard (`public.docs_102008`): the payload names
/// the distributed table (`public.docs`) that clients write to. A shard of a reference
/// table is refused: it has a placement on every node, each of which would notify.
fn distributed_table_of_shard(table: &str) -> Option<String> {
    let (_, suffix) = table.rsplit_once('_')?;
    let shard_id: i64 = suffix.parse().ok()?;
    let citus = Spi::get_one::<bool>("SELECT to_regclass('pg_catalog.pg_dist_shard') IS NOT NULL")
        .ok()
        .flatten()
        .unwrap_or(false);
    if !citus {
        return None;
    }
    let owner = Spi::get_two_with_args::<String, bool>(
        "SELECT n.nspname || '.' || c.relname, p.partmethod = 'n' AND p.repmodel = 't' \
         FROM pg_dist_shard s JOIN pg_dist_partition p ON p.logicalrelid = s.logicalrelid \
         JOIN pg_class c ON c.oid = s.logicalrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE s.shardid = $1",
        &[shard_id.into()],
    );
    let (Some(distributed), Some(reference)) = owner.ok()? else { return None };
    if reference {
        raise_sqlstate(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{FUNCTION} cannot notify for the reference table {distributed}"),
            Some("A reference table has a copy on every node, each of which would send its own notification: notify from a distributed table, or from a trigger on a plain table."),
            FUNCTION,
        );
    }
    Some(distributed)
}

/// The JSON payload, made smaller until it fits Postgres' limit.
fn payload(
    table: &str,
    operation: &str,
    key: Map<String, Json>,
    heads: Option<Vec<String>>,
    previous_heads: Option<Vec<String>>,
) -> String {
    let heads_for_digest = heads.clone().or_else(|| previous_heads.clone());
    let mut full = json!({ "table": table, "operation": operation, "key": key });
    if let Some(heads) = heads {
        full["heads"] = json!(heads);
    }
    if let Some(previous) = previous_heads {
        full["previous_heads"] = json!(previous);
    }
    let digest = heads_digest(heads_for_digest.as_deref().unwrap_or(&[]));
    let candidates = [
        full,
        json!({ "table": table, "operation": operation, "key": key, "heads_digest": digest, "truncated": true }),
        json!({ "table": table, "operation": operation, "heads_digest": digest, "truncated": true }),
    ];
    candidates
        .iter()
        .map(Json::to_string)
        .find(|text| text.len() < PAYLOAD_LIMIT)
        .expect("a table name and an operation fit in 8000 bytes")
}

/// 64 bits of FNV-1a over the heads, in hex: short, and different for different heads.
fn heads_digest(heads: &[String]) -> String {
    let hash = heads.iter().flat_map(|h| h.bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The raw datum of `column` in `tuple`, with the column's type, or `None` when NULL.
fn column_datum(
    tuple: pg_sys::HeapTuple,
    tupdesc: &PgTupleDesc<'_>,
    column: &str,
) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    let (attno, attribute) = (0..tupdesc.len())
        .filter_map(|i| tupdesc.get(i).map(|att| (i + 1, att)))
        .find(|(_, att)| !att.is_dropped() && att.name() == column)
        .unwrap_or_else(|| {
            raise_sqlstate(
                PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
                format!("column \"{column}\" given to {FUNCTION} does not exist"),
                None,
                FUNCTION,
            )
        });
    // SAFETY: `tuple` is a row of this relation, described by `tupdesc`.
    unsafe { pgrx::heap_getattr_raw(tuple, NonZeroUsize::new(attno).unwrap(), tupdesc.as_ptr()) }
        .map(|datum| (datum, attribute.type_oid().value()))
}

fn document_heads(
    tuple: pg_sys::HeapTuple,
    tupdesc: &PgTupleDesc<'_>,
    column: &str,
) -> Option<Vec<String>> {
    if tuple.is_null() {
        return None;
    }
    let (datum, type_oid) = column_datum(tuple, tupdesc, column)?;
    if !is_automerge(type_oid) {
        raise_sqlstate(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("column \"{column}\" given to {FUNCTION} is not of type automerge"),
            None,
            FUNCTION,
        );
    }
    // SAFETY: the column is of type automerge, and not null.
    let header = unsafe { DocHeader::read(datum) }.or_raise(FUNCTION);
    Some(heads::to_hex(&header.summary.heads))
}

/// Whether a type is ours: its input function is `automerge_in`. (Looking the type up by
/// name would depend on the search_path of whoever writes to the table.)
fn is_automerge(type_oid: pg_sys::Oid) -> bool {
    let mut input = pg_sys::Oid::INVALID;
    let mut io_param = pg_sys::Oid::INVALID;
    // SAFETY: catalog lookups of an existing column's type.
    unsafe {
        pg_sys::getTypeInputInfo(type_oid, &mut input, &mut io_param);
        let name = pg_sys::get_func_name(input);
        !name.is_null() && CStr::from_ptr(name).to_bytes() == b"automerge_in"
    }
}

/// A key column's value: numbers and booleans as JSON ones, anything else as its text.
fn column_json(tuple: pg_sys::HeapTuple, tupdesc: &PgTupleDesc<'_>, column: &str) -> Json {
    let Some((datum, type_oid)) = column_datum(tuple, tupdesc, column) else { return Json::Null };
    let mut output_function = pg_sys::Oid::INVALID;
    let mut is_varlena = false;
    // SAFETY: the datum is of type `type_oid`, whose output function turns it into a C string.
    let text = unsafe {
        pg_sys::getTypeOutputInfo(type_oid, &mut output_function, &mut is_varlena);
        CStr::from_ptr(pg_sys::OidOutputFunctionCall(output_function, datum))
            .to_string_lossy()
            .into_owned()
    };
    let number_types = [pg_sys::INT2OID, pg_sys::INT4OID, pg_sys::INT8OID, pg_sys::OIDOID];
    if number_types.contains(&type_oid) {
        text.parse::<i64>().map_or(Json::String(text), Json::from)
    } else if type_oid == pg_sys::BOOLOID {
        Json::Bool(text == "t")
    } else {
        Json::String(text)
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    // What a LISTEN client receives for committed, rolled-back and no-op writes is tested
    // with real sessions in extension/cluster_tests: notifications are only delivered at
    // commit, which a #[pg_test] never reaches.
    use pgrx::prelude::*;
    use serde_json::{json, Map, Value};

    use crate::test_support::sqlstate_of;

    fn key(value: Value) -> Map<String, Value> {
        Map::from_iter([("id".to_string(), value)])
    }

    #[pg_test]
    fn payloads_name_table_operation_key_and_heads() {
        let text = super::payload(
            "public.docs",
            "UPDATE",
            key(json!(1)),
            Some(vec!["aa".into()]),
            Some(vec!["bb".into()]),
        );
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"table": "public.docs", "operation": "UPDATE", "key": {"id": 1},
                   "heads": ["aa"], "previous_heads": ["bb"]})
        );
        let insert = super::payload("public.docs", "INSERT", key(json!(2)), Some(vec![]), None);
        assert_eq!(
            serde_json::from_str::<Value>(&insert).unwrap(),
            json!({"table": "public.docs", "operation": "INSERT", "key": {"id": 2}, "heads": []})
        );
    }

    #[pg_test]
    fn large_payloads_are_truncated_to_valid_json() {
        let many_heads: Vec<String> = (0..200).map(|i| format!("{i:064x}")).collect();
        let text =
            super::payload("public.docs", "UPDATE", key(json!(1)), Some(many_heads.clone()), None);
        assert!(text.len() < 8000);
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"table": "public.docs", "operation": "UPDATE", "key": {"id": 1},
                   "heads_digest": super::heads_digest(&many_heads), "truncated": true})
        );
        let text = super::payload(
            "public.docs",
            "INSERT",
            key(json!("k".repeat(9000))),
            Some(vec![]),
            None,
        );
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"table": "public.docs", "operation": "INSERT",
                   "heads_digest": super::heads_digest(&[]), "truncated": true})
        );
    }

    #[pg_test]
    fn different_heads_have_different_digests() {
        let a = super::heads_digest(&["aa".into()]);
        assert_ne!(a, super::heads_digest(&["ab".into()]));
        assert_eq!(a.len(), 16);
    }

    #[pg_test]
    fn a_write_through_the_trigger_succeeds() {
        Spi::run(
            "CREATE TABLE docs (id int PRIMARY KEY, label text, doc automerge NOT NULL); \
             CREATE TRIGGER docs_notify AFTER INSERT OR UPDATE OR DELETE ON docs \
                 FOR EACH ROW EXECUTE FUNCTION automerge_notify('docs_changed', 'doc', 'id', 'label');",
        )
        .unwrap();
        for sql in [
            "INSERT INTO docs VALUES (1, 'a', '\\x')",
            "UPDATE docs SET doc = doc || doc",
            "DELETE FROM docs",
        ] {
            assert_eq!(sqlstate_of(sql), "no error", "{sql}");
        }
    }

    #[pg_test]
    fn misuse_is_refused() {
        Spi::run("CREATE TABLE t (id int, doc automerge, body text)").unwrap();
        let triggers = [
            ("BEFORE INSERT ON t FOR EACH ROW", "'c', 'doc'", "39P01"),
            ("AFTER INSERT ON t FOR EACH STATEMENT", "'c', 'doc'", "39P01"),
            ("AFTER INSERT ON t FOR EACH ROW", "'c'", "39P01"),
            ("AFTER INSERT ON t FOR EACH ROW", "'c', 'body'", "42804"),
            ("AFTER INSERT ON t FOR EACH ROW", "'c', 'nope'", "42703"),
        ];
        for (i, (when, args, sqlstate)) in triggers.iter().enumerate() {
            Spi::run(&format!(
                "DROP TRIGGER IF EXISTS t_notify ON t; \
                 CREATE TRIGGER t_notify {when} EXECUTE FUNCTION automerge_notify({args})"
            ))
            .unwrap();
            let insert = format!("INSERT INTO t VALUES ({i}, '\\x', 'text')");
            assert_eq!(sqlstate_of(&insert), *sqlstate, "{when} ({args})");
        }
    }
}
