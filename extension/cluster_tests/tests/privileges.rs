//! Using documents needs no superuser: a plain role with CREATE on a schema creates tables,
//! indexes and triggers, writes, reads and aggregates. The memory settings are for
//! superusers only, and no function of the extension runs with its owner's rights.

use std::time::Duration;

use automerge::transaction::Transactable;
use automerge::{ActorId, AutoCommit, ROOT};
use cluster_tests::{connect, connect_listening, conninfo};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

/// A connection as `role`.
async fn connect_as(role: &str) -> tokio_postgres::Client {
    // libpq's rule, which tokio-postgres follows: the last `user=` wins.
    let (client, connection) =
        tokio_postgres::connect(&format!("{} user={role}", conninfo()), NoTls)
            .await
            .expect("connecting");
    tokio::spawn(connection);
    client
}

/// Makes `role` anew: no attribute but LOGIN, and USAGE and CREATE on a schema of the
/// same name (owned by the superuser), which it returns.
async fn create_plain_role(role: &str) -> String {
    let admin = connect().await;
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {role} CASCADE;
             DO $$ BEGIN
                 IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                     DROP OWNED BY {role} CASCADE;
                     DROP ROLE {role};
                 END IF;
             END $$;
             CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
             CREATE SCHEMA {role};
             GRANT USAGE, CREATE ON SCHEMA {role} TO {role};"
        ))
        .await
        .unwrap();
    role.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_role_uses_documents_without_superuser() {
    let role = "privileges_writer";
    let schema = create_plain_role(role).await;
    let app = connect_as(role).await;
    let is_superuser: String = app.query_one("SHOW is_superuser", &[]).await.unwrap().get(0);
    assert_eq!(is_superuser, "off");

    app.batch_execute(&format!(
        "CREATE TABLE {schema}.notes (id int PRIMARY KEY, doc automerge NOT NULL,
             title text GENERATED ALWAYS AS (doc->>'title') STORED);
         CREATE INDEX notes_json ON {schema}.notes USING gin ((doc::jsonb));
         CREATE TRIGGER notes_notify AFTER INSERT OR UPDATE OR DELETE ON {schema}.notes
             FOR EACH ROW EXECUTE FUNCTION automerge_notify('privileges_notes', 'doc', 'id');"
    ))
    .await
    .unwrap();
    let (listener, mut notifications) = connect_listening().await;
    listener.batch_execute("LISTEN privileges_notes").await.unwrap();

    let mut doc = AutoCommit::new().with_actor(ActorId::from([0x51; 16]));
    doc.put(ROOT, "title", "Plain").unwrap();
    doc.commit();
    for id in [1, 2] {
        app.execute(
            &format!("INSERT INTO {schema}.notes (id, doc) VALUES ($1, $2::bytea)"),
            &[&id, &doc.save()],
        )
        .await
        .unwrap();
    }
    let before = doc.get_heads();
    doc.put(ROOT, "title", "Still plain").unwrap();
    doc.commit();
    let written = app
        .execute(
            &format!("UPDATE {schema}.notes SET doc = doc || $1::bytea WHERE id = 1"),
            &[&doc.save_after(&before)],
        )
        .await
        .unwrap();
    assert_eq!(written, 1);

    let row = app
        .query_one(
            &format!(
                "SELECT (SELECT title FROM {schema}.notes WHERE id = 1),
                        (SELECT count(*) FROM {schema}.notes WHERE doc::jsonb @> '{{\"title\": \"Plain\"}}'),
                        (SELECT merge_agg(doc)->>'title' FROM {schema}.notes),
                        (SELECT automerge_change_count(merge_agg(doc)) FROM {schema}.notes),
                        (SELECT loads >= 0 FROM automerge_memory_usage())"
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "Still plain");
    assert_eq!(row.get::<_, i64>(1), 1);
    assert_eq!(row.get::<_, String>(2), "Still plain");
    assert_eq!(row.get::<_, i64>(3), 2);
    assert!(row.get::<_, bool>(4));

    // Two inserts and one update that changed a document: three notifications.
    for _ in 0..3 {
        let notification = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
            .await
            .expect("a notification for each write of the plain role")
            .unwrap();
        let payload: serde_json::Value = serde_json::from_str(notification.payload()).unwrap();
        assert_eq!(payload["table"], format!("{schema}.notes"));
    }
    assert!(notifications.try_recv().is_err(), "more notifications than writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_superusers_change_the_memory_settings() {
    let role = "privileges_tuner";
    create_plain_role(role).await;
    let app = connect_as(role).await;
    for setting in ["pg_automerge.max_load_memory", "pg_automerge.trim_threshold"] {
        let shown: String = app.query_one(&format!("SHOW {setting}"), &[]).await.unwrap().get(0);
        assert!(!shown.is_empty(), "{setting} is readable");
        for statement in [format!("SET {setting} = '1GB'"), format!("SET LOCAL {setting} = -1")] {
            let error = app.batch_execute(&statement).await.expect_err(&statement);
            assert_eq!(
                error.code(),
                Some(&SqlState::INSUFFICIENT_PRIVILEGE),
                "{statement}: {error:?}"
            );
        }
        let error = app
            .query_one(&format!("SELECT set_config('{setting}', '1GB', false)"), &[])
            .await
            .expect_err("set_config");
        assert_eq!(error.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    }
    // A superuser may hand one setting to a role (PostgreSQL 15 and later).
    let admin = connect().await;
    admin
        .batch_execute(&format!("GRANT SET ON PARAMETER pg_automerge.max_load_memory TO {role}"))
        .await
        .unwrap();
    let app = connect_as(role).await;
    app.batch_execute("SET pg_automerge.max_load_memory = '1GB'").await.unwrap();
    let shown: String =
        app.query_one("SHOW pg_automerge.max_load_memory", &[]).await.unwrap().get(0);
    assert_eq!(shown, "1GB");
    let error = app.batch_execute("SET pg_automerge.trim_threshold = -1").await.unwrap_err();
    assert_eq!(error.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    admin
        .batch_execute(&format!("REVOKE SET ON PARAMETER pg_automerge.max_load_memory FROM {role}"))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_function_runs_with_the_callers_rights() {
    let admin = connect().await;
    let rows = admin
        .query(
            "SELECT p.oid::regprocedure::text, p.prosecdef, p.proconfig IS NOT NULL
             FROM pg_proc p
             JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_automerge'
             -- `cargo pgrx test` builds add their tests, in schema tests.
             WHERE p.pronamespace::regnamespace::text <> 'tests'",
            &[],
        )
        .await
        .unwrap();
    assert!(rows.len() >= 30, "found only {} functions of the extension", rows.len());
    let definers: Vec<String> =
        rows.iter().filter(|r| r.get::<_, bool>(1)).map(|r| r.get(0)).collect();
    assert!(definers.is_empty(), "SECURITY DEFINER: {definers:?}");
    let with_settings: Vec<String> =
        rows.iter().filter(|r| r.get::<_, bool>(2)).map(|r| r.get(0)).collect();
    assert!(
        with_settings.is_empty(),
        "functions that change settings while they run: {with_settings:?}"
    );
    // EXECUTE stays granted to PUBLIC, as for any function.
    let not_public: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_proc p
             JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_automerge'
             WHERE NOT has_function_privilege('public', p.oid, 'EXECUTE')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(not_public, 0);
}
