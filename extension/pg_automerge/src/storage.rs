//! What a stored value keeps besides the document, and the settings (in `gucs.rs`) that
//! choose it:
//!
//! - `pg_automerge.keep_jsonb` (on): writes keep the document's JSON in the stored value,
//!   so the `jsonb` cast (and through it `->>`, `@>`, GIN rechecks, generated columns)
//!   reads it instead of loading the document. Off: smaller values and cheaper writes,
//!   and every such read loads.
//! - `pg_automerge.append_limit` (64): how many changes incremental writes may append to a
//!   stored value without loading it (changes that only set or delete root keys); the write
//!   after that loads, applies and re-saves. 0 makes every incremental write load.
//! - `pg_automerge.document_cache` (64MB): the document that client input loaded is held
//!   until the end of the transaction, for the merge of an upsert that follows, if it keeps
//!   at most this much memory. 0 holds none.
//! - `automerge_storage(doc)` shows what a value keeps and what loading it is estimated to
//!   take; `automerge_compact(doc)` (in `compaction.rs`) re-saves it with its JSON, as a
//!   write that loads would.

use pg_automerge_core::estimate::estimate_stored;
use pg_automerge_core::format;
use pgrx::prelude::*;

use crate::datum::{DocHeader, StoredDoc};
use crate::errors::OrRaise;

/// What a stored value holds: its format version, its size, the Automerge bytes, the kept
/// JSON (null when it keeps none), how many changes were appended since its last save, the
/// estimated peak of loading it (from the header alone: what `max_load_memory` is checked
/// against when a write, a merge or `automerge_compact` loads it), and the structure index
/// that lets writes append (null before format version 3).
// pgrx reads the result's column names from the `name!` types spelled out here: an alias
// would hide them.
#[allow(clippy::type_complexity)]
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_storage(
    doc: StoredDoc<'_>,
) -> TableIterator<
    'static,
    (
        name!(format_version, i32),
        name!(stored_bytes, i64),
        name!(payload_bytes, i64),
        name!(jsonb_bytes, Option<i64>),
        name!(appended_changes, i64),
        name!(estimated_load_bytes, i64),
        name!(structure_bytes, Option<i64>),
    ),
> {
    let value = format::decode(doc.stored()).or_raise("automerge_storage");
    let kept = value.kept.as_ref();
    let row = (
        i32::from(value.version),
        doc.stored().len() as i64,
        value.payload.len() as i64,
        kept.and_then(|kept| kept.json).map(|json| json.stored_len() as i64),
        kept.map_or(0, |kept| i64::from(kept.appended_changes)),
        i64::try_from(estimate_stored(&value.summary, value.payload).peak_bytes())
            .unwrap_or(i64::MAX),
        // A version 2 value's root table is read as an index of its root, which it does not
        // store as such.
        kept.filter(|_| value.version >= 3)
            .and_then(|kept| kept.structure.as_ref())
            .map(|index| index.len() as i64),
    );
    TableIterator::once(row)
}

/// How many changes were appended to the value since its last save, from its header
/// alone (its first TOAST chunk): what a load replays after the save, and what the
/// compactor (`pg_automerge.compactor_database`) looks for.
#[pg_extern(immutable, strict, parallel_safe)]
fn automerge_appended_changes(doc: DocHeader<'_>) -> i32 {
    i32::try_from(doc.appended_changes).unwrap_or(i32::MAX)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use automerge::transaction::Transactable;
    use automerge::{AutoCommit, ObjType, ReadDoc, ROOT};
    use pgrx::datum::DatumWithOid;
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;

    use crate::test_support::sample;

    /// A client's copy of the `project` sample, stored as row 1 of `docs`.
    fn stored_project() -> AutoCommit {
        Spi::run("CREATE TABLE docs (id int PRIMARY KEY, doc automerge NOT NULL)").unwrap();
        let mut client = AutoCommit::load(&sample("project").save()).unwrap();
        Spi::run_with_args("INSERT INTO docs VALUES (1, $1)", &[client.save().into()]).unwrap();
        client
    }

    /// Writes the client's changes since `heads` as an incremental write.
    fn write_since(client: &mut AutoCommit, heads: &[automerge::ChangeHash]) {
        let change = client.save_after(heads);
        Spi::run_with_args("UPDATE docs SET doc = doc || $1 WHERE id = 1", &[change.into()])
            .unwrap();
    }

    /// (format_version, has kept JSON, appended_changes) of row 1; the appended changes
    /// read from the header alone agree.
    fn storage() -> (i32, bool, i64) {
        let (version, json, appended) = Spi::get_three::<i32, bool, i64>(
            "SELECT s.format_version, s.jsonb_bytes IS NOT NULL, s.appended_changes \
             FROM docs, automerge_storage(doc) s WHERE id = 1",
        )
        .map(|(v, j, a)| (v.unwrap(), j.unwrap(), a.unwrap()))
        .unwrap();
        let from_header =
            Spi::get_one::<i32>("SELECT automerge_appended_changes(doc) FROM docs WHERE id = 1");
        assert_eq!(from_header, Ok(Some(appended as i32)));
        (version, json, appended)
    }

    fn json_of_row() -> serde_json::Value {
        Spi::get_one::<JsonB>("SELECT doc::jsonb FROM docs WHERE id = 1").unwrap().unwrap().0
    }

    fn expected_json(client: &mut AutoCommit) -> serde_json::Value {
        pg_automerge_core::json::document(client.document(), None).unwrap()
    }

    #[pg_test]
    fn values_keep_their_json_and_small_writes_append() {
        let mut client = stored_project();
        assert_eq!(storage(), (3, true, 0));
        let heads = client.get_heads();
        client.put(ROOT, "status", "done").unwrap();
        write_since(&mut client, &heads);
        assert_eq!(storage(), (3, true, 1), "appended, JSON followed the root put");
        assert_eq!(json_of_row(), expected_json(&mut client));
        // Compacting saves anew with the JSON; the document is the same.
        Spi::run("UPDATE docs SET doc = automerge_compact(doc)").unwrap();
        assert_eq!(storage(), (3, true, 0));
        assert_eq!(json_of_row(), expected_json(&mut client));
        // The edits a JS client sends append too, each patching the kept jsonb at its
        // path without a load: a list insert and delete, a string set as a text object,
        // a splice into it, a nested object made with content, a field of it, a counter.
        let loads =
            || Spi::get_one::<i64>("SELECT loads FROM automerge_memory_usage()").unwrap().unwrap();
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        let tags = client.get(ROOT, "tags").unwrap().unwrap().1;
        let edits: [&dyn Fn(&mut AutoCommit); 7] = [
            &|c| c.insert(&tags, 0, "urgent").unwrap(),
            &|c| c.delete(&tags, 1).unwrap(),
            &|c| {
                let title = c.put_object(ROOT, "title", ObjType::Text).unwrap();
                c.splice_text(&title, 0, 0, "Launch 🚀 plan").unwrap();
            },
            &|c| {
                let title = c.get(ROOT, "title").unwrap().unwrap().1;
                c.splice_text(&title, 0, 6, "Ship").unwrap();
            },
            &|c| {
                let owner = c.put_object(ROOT, "owner", ObjType::Map).unwrap();
                c.put(&owner, "name", "ana").unwrap();
                let roles = c.put_object(&owner, "roles", ObjType::List).unwrap();
                c.insert(&roles, 0, "lead").unwrap();
            },
            &|c| {
                let owner = c.get(ROOT, "owner").unwrap().unwrap().1;
                c.put(&owner, "name", "bo").unwrap();
            },
            &|c| c.increment(ROOT, "views", 4).unwrap(),
        ];
        for (n, edit) in edits.iter().enumerate() {
            let heads = client.get_heads();
            edit(&mut client);
            write_since(&mut client, &heads);
            assert_eq!(storage(), (3, true, n as i64 + 1), "edit {n} appended");
            assert_eq!(json_of_row(), expected_json(&mut client), "edit {n}");
        }
        assert_eq!(loads(), 0);
        assert_eq!(json_of_row()["title"], "Ship 🚀 plan");
    }

    #[pg_test]
    fn an_upsert_of_a_full_save_loads_once() {
        let mut client = stored_project();
        let upsert = "INSERT INTO docs VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET doc = docs.doc || EXCLUDED.doc";
        let loads =
            || Spi::get_one::<i64>("SELECT loads FROM automerge_memory_usage()").unwrap().unwrap();
        // The second save's stored head is the client's own earlier change: the merge checks
        // the save it holds from the input's load instead of loading it again.
        for status in ["done", "archived"] {
            client.put(ROOT, "status", status).unwrap();
            Spi::run("SELECT automerge_memory_reset()").unwrap();
            Spi::run_with_args(upsert, &[client.save().into()]).unwrap();
            assert_eq!(loads(), 1, "{status}");
            assert_eq!(json_of_row(), expected_json(&mut client));
        }
        // Without the cache, the merge loads the save to check it.
        Spi::run("SET LOCAL pg_automerge.document_cache = 0").unwrap();
        client.put(ROOT, "status", "reopened").unwrap();
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        Spi::run_with_args(upsert, &[client.save().into()]).unwrap();
        assert_eq!(loads(), 2);
        assert_eq!(json_of_row(), expected_json(&mut client));
    }

    #[pg_test]
    fn storage_shows_the_load_estimate_without_loading() {
        use fixtures::generated::{generate, Kind, Scale, Spec};
        Spi::run("CREATE TABLE sized (id int, doc automerge)").unwrap();
        let kinds = [Kind::MapList, Kind::RichText, Kind::PlainText];
        for (id, kind) in kinds.into_iter().enumerate() {
            let bytes = generate(Spec { kind, scale: Scale::Small, compacted: false });
            Spi::run_with_args(
                "INSERT INTO sized VALUES ($1, $2)",
                &[(id as i32).into(), bytes.into()],
            )
            .unwrap();
        }
        Spi::run("SELECT automerge_memory_reset()").unwrap();
        let rows: Vec<(i32, i64, i64)> = Spi::connect(|client| {
            client
                .select(
                    "SELECT id, s.estimated_load_bytes, s.payload_bytes \
                     FROM sized, automerge_storage(doc) s ORDER BY s.estimated_load_bytes DESC",
                    None,
                    &[],
                )
                .unwrap()
                .map(|row| {
                    (
                        row.get(1).unwrap().unwrap(),
                        row.get(2).unwrap().unwrap(),
                        row.get(3).unwrap().unwrap(),
                    )
                })
                .collect()
        });
        let loads =
            Spi::get_one::<i64>("SELECT loads FROM automerge_memory_usage()").unwrap().unwrap();
        assert_eq!(loads, 0, "the estimate reads the header only");
        assert_eq!(rows.len(), 3);
        // The plain text has the most operations, the list of maps the fewest.
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 1, 0], "{rows:?}");
        for (id, estimate, _) in &rows {
            let stored = Spi::get_one_with_args::<Vec<u8>>(
                "SELECT doc::bytea FROM sized WHERE id = $1",
                &[(*id).into()],
            );
            let bytes = stored.unwrap().unwrap();
            let expected = pg_automerge_core::estimate::estimate_client_bytes(&bytes).unwrap();
            // From the header and from the bytes, the same order of magnitude.
            let ratio = *estimate as f64 / expected.peak_bytes() as f64;
            assert!((0.5..2.0).contains(&ratio), "{id}: {estimate} against {expected:?}");
        }
    }

    #[pg_test]
    fn the_settings_choose_what_writes_keep() {
        Spi::run("SET LOCAL pg_automerge.keep_jsonb = off").unwrap();
        let mut client = stored_project();
        assert_eq!(storage(), (3, false, 0));
        assert_eq!(json_of_row(), expected_json(&mut client));
        Spi::run("SET LOCAL pg_automerge.keep_jsonb = on").unwrap();
        Spi::run("SET LOCAL pg_automerge.append_limit = 0").unwrap();
        let heads = client.get_heads();
        client.put(ROOT, "status", "done").unwrap();
        write_since(&mut client, &heads);
        assert_eq!(storage(), (3, true, 0), "loaded, applied and saved with its JSON");
        assert_eq!(json_of_row(), expected_json(&mut client));
    }

    #[pg_test]
    fn reading_kept_json_takes_no_rust_heap() {
        let text = fixtures::generated::generate(fixtures::generated::Spec {
            kind: fixtures::generated::Kind::RichText,
            scale: fixtures::generated::Scale::Small,
            compacted: false,
        });
        Spi::run("CREATE TABLE texts (keep bool, doc automerge)").unwrap();
        for keep in ["on", "off"] {
            Spi::run(&format!("SET LOCAL pg_automerge.keep_jsonb = {keep}")).unwrap();
            Spi::run_with_args(
                &format!("INSERT INTO texts VALUES ('{keep}', $1)"),
                &[text.clone().into()],
            )
            .unwrap();
        }
        let peak = |keep: bool| {
            Spi::run("SELECT automerge_memory_reset()").unwrap();
            let title = Spi::get_one::<String>(&format!(
                "SELECT doc->>'title' FROM texts WHERE keep = {keep}"
            ));
            assert!(title.unwrap().is_some());
            Spi::get_one::<i64>(
                "SELECT peak_allocated_bytes - allocated_bytes FROM automerge_memory_usage()",
            )
            .unwrap()
            .unwrap()
        };
        let (kept, loaded) = (peak(true), peak(false));
        assert!(
            kept < 4096 && loaded > 100_000,
            "kept JSON read: {kept} bytes; loaded: {loaded} bytes"
        );
    }

    #[pg_test]
    fn values_written_by_earlier_releases_still_read_and_write() {
        let mut client = stored_project();
        let old = fixtures::legacy::format_version_1(client.document());
        // SAFETY: the datum is an `automerge` varlena, as the stored column holds.
        let value = unsafe {
            DatumWithOid::new(crate::datum::StoredDoc::owned(old), pgrx::regtypein("automerge"))
        };
        Spi::run_with_args("UPDATE docs SET doc = $1 WHERE id = 1", &[value]).unwrap();
        assert_eq!(storage(), (1, false, 0));
        assert_eq!(json_of_row(), expected_json(&mut client));
        let heads =
            Spi::get_one::<Vec<String>>("SELECT automerge_heads(doc) FROM docs").unwrap().unwrap();
        assert_eq!(heads, pg_automerge_core::heads::to_hex(&client.get_heads()));
        let before = client.get_heads();
        client.put(ROOT, "status", "done").unwrap();
        write_since(&mut client, &before);
        assert_eq!(storage(), (3, true, 0), "the first write saves it in the current format");
        assert_eq!(json_of_row()["status"], json!("done"));
    }

    /// A row of `versions` holding `stored` as it is.
    fn insert_version(version: i32, stored: Vec<u8>) {
        // SAFETY: the datum is an `automerge` varlena, as the stored column holds.
        let value = unsafe {
            DatumWithOid::new(crate::datum::StoredDoc::owned(stored), pgrx::regtypein("automerge"))
        };
        Spi::run_with_args("INSERT INTO versions VALUES ($1, $2)", &[version.into(), value])
            .unwrap();
    }

    #[pg_test]
    fn every_read_gives_the_same_on_every_format_version() {
        use pg_automerge_core::save::to_stored;
        use pg_automerge_core::settings::WriteSettings;
        let doc = sample("project");
        let text_kept = to_stored(&doc, WriteSettings::UNLIMITED).unwrap();
        Spi::run("CREATE TABLE versions (version int PRIMARY KEY, doc automerge NOT NULL)")
            .unwrap();
        insert_version(1, fixtures::legacy::format_version_1(&doc));
        insert_version(2, fixtures::legacy::format_version_2(&text_kept));
        insert_version(3, to_stored(&doc, crate::gucs::write_settings()).unwrap());
        let versions = Spi::get_one::<Vec<i32>>(
            "SELECT array_agg(s.format_version ORDER BY version) FROM versions, automerge_storage(doc) s",
        );
        assert_eq!(versions.unwrap().unwrap(), vec![1, 2, 3]);
        // Only version 3 stores the structure index; the project's index has its root keys.
        let indexed = Spi::get_one::<Vec<Option<bool>>>(
            "SELECT array_agg(s.structure_bytes > 0 ORDER BY version) FROM versions, automerge_storage(doc) s",
        );
        assert_eq!(indexed.unwrap().unwrap(), vec![None, None, Some(true)]);
        let heads = pg_automerge_core::heads::to_hex(&doc.get_heads());
        let reads = [
            "doc->>'title'",
            "doc->'tags'->>1",
            "doc #>> '{tags,0}'",
            "(doc @> '{\"status\": \"review\"}')::text",
            "(doc ? 'due')::text",
            "doc::jsonb::text",
            "jsonb_typeof(doc->'priority')",
            "automerge_heads(doc)::text",
            "automerge_change_count(doc)::text",
            "(doc = (SELECT doc FROM versions WHERE version = 3))::text",
            "automerge_hash(doc)::text",
            &format!("automerge_has_changes(doc, ARRAY['{}'])::text", heads[0]),
            "encode(doc::bytea, 'hex')",
            "automerge_to_jsonb(doc, automerge_heads(doc))::text",
        ];
        let expected = [
            "Launch plan",
            "web",
            "q1",
            "true",
            "true",
            "",
            "number",
            "",
            "",
            "true",
            "",
            "true",
            "",
            "",
        ];
        for (read, expected) in reads.iter().zip(expected) {
            let sql = format!("SELECT array_agg({read} ORDER BY version) FROM versions");
            let values = Spi::get_one::<Vec<Option<String>>>(&sql).unwrap().unwrap();
            assert!(values[0].is_some(), "{read}: {values:?}");
            assert!(values.iter().all(|v| *v == values[0]), "{read}: {values:?}");
            assert!(
                expected.is_empty() || values[0].as_deref() == Some(expected),
                "{read}: {values:?}"
            );
        }
        // The next write stores each in the current format, with its JSON.
        let mut client = AutoCommit::load(&doc.save()).unwrap();
        let before = client.get_heads();
        client.put(ROOT, "status", "done").unwrap();
        let change = client.save_after(&before);
        Spi::run_with_args("UPDATE versions SET doc = doc || $1", &[change.into()]).unwrap();
        let rewritten = Spi::get_one::<i64>(
            "SELECT count(*) FROM versions, automerge_storage(doc) s \
             WHERE s.format_version = 3 AND s.jsonb_bytes IS NOT NULL AND doc->>'status' = 'done'",
        );
        assert_eq!(rewritten.unwrap(), Some(3));
    }

    /// How many blocks of `table`'s TOAST relation `sql` reads (from shared buffers or not).
    fn toast_blocks(table: &str, sql: &str) -> i64 {
        let fetched = || {
            Spi::get_one::<i64>(&format!(
                "SELECT pg_stat_get_xact_blocks_fetched(reltoastrelid) FROM pg_class \
                 WHERE oid = '{table}'::regclass"
            ))
            .unwrap()
            .unwrap()
        };
        let before = fetched();
        Spi::run(sql).unwrap();
        fetched() - before
    }

    #[pg_test]
    fn a_header_read_fetches_one_toast_chunk() {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "title", "Large").unwrap();
        let text = doc.put_object(ROOT, "content", automerge::ObjType::Text).unwrap();
        // Words in an order that neither deflate nor LZ4 can fold away.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let words: Vec<&str> = (0..100_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ["ka", "to", "ri", "men", "sa", "lo", "ve", "din"][(state % 8) as usize]
            })
            .collect();
        doc.splice_text(&text, 0, 0, &words.join(" ")).unwrap();
        Spi::run("CREATE TABLE big (id int PRIMARY KEY, doc automerge NOT NULL)").unwrap();
        Spi::run_with_args("INSERT INTO big VALUES (1, $1)", &[doc.save().into()]).unwrap();
        let heads = pg_automerge_core::heads::to_hex(&doc.get_heads());
        let whole = toast_blocks("big", "SELECT length(doc::bytea) FROM big");
        assert!(whole > 10, "the value spans {whole} TOAST blocks");
        for sql in [
            "SELECT automerge_heads(doc) FROM big",
            "SELECT automerge_change_count(doc) FROM big",
            "SELECT automerge_hash(doc) FROM big",
            &format!("SELECT automerge_has_changes(doc, ARRAY['{}']) FROM big", heads[0]),
        ] {
            assert_eq!(toast_blocks("big", sql), 1, "{sql}");
        }
        // Equality reads each side's header: one block each.
        assert_eq!(toast_blocks("big", "SELECT a.doc = b.doc FROM big a, big b"), 2);
        // A jsonb read fetches the header and the JSON, not the Automerge bytes after it.
        let title = toast_blocks("big", "SELECT doc->>'title' FROM big");
        assert!(title < whole, "a jsonb read fetched {title} of {whole} blocks");
    }
}
