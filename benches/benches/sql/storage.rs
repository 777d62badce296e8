//! Untimed: what each variant stores, and the WAL of its writes.

use benches::{record_storage, selected, JSONB};

use crate::session::{Path, Session};
use crate::tables::FixtureRows;
use crate::writes::{APPLY, JSONB_SET_TITLE, JSONB_UPSERT, UPSERT};

/// Untimed: what each variant stores for the fixture, and the WAL one write inserts.
pub fn storage(session: &Session, rows: &FixtureRows) {
    let name = &rows.name;
    if !selected(&format!("sql/storage/{name}")) {
        return;
    }
    for path in Path::BOTH {
        session.use_path(path);
        let variant = path.variant();
        let stored = session.query_row(
            &path.sql(
                "SELECT pg_column_size(doc)::bigint, s.format_version::bigint, s.stored_bytes, s.payload_bytes,
                        s.jsonb_bytes, s.structure_bytes
                 FROM {docs}, automerge_storage(doc) s WHERE name = $1",
            ),
            &[name],
        );
        let measures = [
            "column_bytes",
            "format_version",
            "stored_bytes",
            "payload_bytes",
            "jsonb_bytes",
            "structure_bytes",
        ];
        for (column, measure) in measures.into_iter().enumerate() {
            record_storage(name, variant, measure, stored.get(column));
        }
        let apply = path.sql(APPLY);
        let wal = session.wal_bytes(
            || rows.author(path).retitle().1,
            |change| {
                session.execute(&apply, &[name, &change]);
            },
        );
        record_storage(name, variant, "wal_incremental_write_bytes", Some(wal));
        let appended = path
            .sql("SELECT s.appended_changes FROM {docs}, automerge_storage(doc) s WHERE name = $1");
        record_storage(name, variant, "appended_changes", session.query_one(&appended, &[name]));
        let upsert = path.sql(UPSERT);
        let wal = session.wal_bytes(
            || rows.next_save(path),
            |save| {
                session.execute(&upsert, &[name, &save]);
            },
        );
        record_storage(name, variant, "wal_upsert_bytes", Some(wal));
    }
    session.use_path(Path::Fast);
    let column = session
        .query_one("SELECT pg_column_size(j)::bigint FROM bench_jsonb WHERE name = $1", &[name]);
    record_storage(name, JSONB, "column_bytes", Some(column));
    let wal = session.wal_bytes(
        || rows.next_jsonb_edit(),
        |title| {
            session.execute(JSONB_SET_TITLE, &[name, &title]);
        },
    );
    record_storage(name, JSONB, "wal_incremental_write_bytes", Some(wal));
    let wal = session.wal_bytes(
        || rows.next_jsonb_edit(),
        |title| {
            session.execute(JSONB_UPSERT, &[name, &title, &rows.json]);
        },
    );
    record_storage(name, JSONB, "wal_upsert_bytes", Some(wal));
}
