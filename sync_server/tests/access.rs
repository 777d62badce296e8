//! samod clients against two servers with access control on one database, which
//! `cargo xtask test --only sync` sets up with the example of docs/sync-server.md
//! ("Access control": an `owner` column, `document_shares`, RLS policies) and names in
//! `SYNC_ACCESS_SERVER_URLS` (two, comma-separated), `SYNC_ACCESS_DATABASE_URL`,
//! `SYNC_JWT_SECRET_FILE` and `SYNC_JWT_AUDIENCE`. The servers run with
//! `--max-documents-per-connection 20 --max-message-bytes 1048576`.

mod common;

use common::{database, env, eventually};

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use automerge::transaction::Transactable;
use automerge::{AutoCommit, Automerge, ChangeHash, ReadDoc, ROOT};
use jsonwebtoken::{EncodingKey, Header};
use samod::{BackoffConfig, DocHandle, PeerId, Repo, Url};
use serde_json::{json, Value};
use sync_server::client::{connect_as, WebSocketDialer};
use tokio_postgres::NoTls;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Error as WsError;

/// The bounds the servers run with.
const MAX_DOCUMENTS: usize = 20;
const MAX_MESSAGE_BYTES: usize = 1 << 20;

fn servers() -> Vec<String> {
    env("SYNC_ACCESS_SERVER_URLS").split(',').map(str::to_string).collect()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A user's claims as the app's backend would sign them.
fn claims(sub: &str) -> Value {
    json!({"sub": sub, "role": "app_user", "aud": env("SYNC_JWT_AUDIENCE"), "exp": now() + 600})
}

fn sign(claims: &Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(&Header::default(), claims, &EncodingKey::from_secret(secret)).unwrap()
}

fn secret() -> Vec<u8> {
    let mut secret = std::fs::read(env("SYNC_JWT_SECRET_FILE")).unwrap();
    if secret.ends_with(b"\n") {
        secret.pop();
    }
    secret
}

fn token(sub: &str) -> String {
    sign(&claims(sub), &secret())
}

fn with_token(server: &str, token: &str) -> String {
    format!("{server}/?token={token}")
}

/// A user's repo connected to `server` with their token, announcing their peer id.
async fn user(server: &str, sub: &str) -> Repo {
    connect_as(&with_token(server, &token(sub)), Some(PeerId::from(sub)))
        .await
        .expect("connecting with a valid token")
        .0
}

fn field(handle: &DocHandle, key: &str) -> Option<String> {
    handle.with_document(|doc| match doc.get(ROOT, key).ok()?? {
        (automerge::Value::Scalar(s), _) => s.as_str().map(str::to_string),
        _ => None,
    })
}

fn change(handle: &DocHandle, key: &str, value: &str) -> ChangeHash {
    handle.with_document(|doc| {
        let mut tx = doc.transaction();
        tx.put(ROOT, key, value).unwrap();
        tx.commit().0.expect("a change")
    })
}

/// A document `owner` made through `server`, once its row exists (owned by them).
async fn owned_document(db: &tokio_postgres::Client, owner: &Repo) -> DocHandle {
    let mut initial = AutoCommit::new();
    initial.put(ROOT, "title", "Shared notes").unwrap();
    let handle = owner.create(initial.document().clone()).await.unwrap();
    let id = handle.document_id().to_string();
    eventually("the created document's row", || async {
        let row = db.query_opt("SELECT owner FROM documents WHERE id = $1", &[&id]).await.unwrap();
        row.is_some()
    })
    .await;
    let owner_column: Option<String> =
        db.query_one("SELECT owner FROM documents WHERE id = $1", &[&id]).await.unwrap().get(0);
    assert_eq!(owner_column.as_deref(), Some(owner.peer_id().to_string().as_str()));
    handle
}

async fn share(db: &tokio_postgres::Client, handle: &DocHandle, user: &str, can_write: bool) {
    db.execute(
        "INSERT INTO document_shares (document_id, user_id, can_write) VALUES ($1, $2, $3) \
         ON CONFLICT (document_id, user_id) DO UPDATE SET can_write = EXCLUDED.can_write",
        &[&handle.document_id().to_string(), &user, &can_write],
    )
    .await
    .unwrap();
}

async fn find(repo: &Repo, handle: &DocHandle) -> Option<DocHandle> {
    tokio::time::timeout(Duration::from_secs(20), repo.find(handle.document_id().clone()))
        .await
        .expect("find ends within 20s")
        .unwrap()
}

/// Whether the change is anywhere in storage: the document's row, or any of its chunks
/// (each chunk loaded on its own, snapshots and incremental changes alike).
async fn stored(db: &tokio_postgres::Client, handle: &DocHandle, hash: ChangeHash) -> bool {
    let id = handle.document_id().to_string();
    let hex = hash.to_string();
    let in_row: bool = db
        .query_one(
            "SELECT automerge_has_changes(doc, ARRAY[$2]) FROM documents WHERE id = $1",
            &[&id, &hex],
        )
        .await
        .unwrap()
        .get(0);
    let chunks = db
        .query("SELECT key, data FROM automerge_repo_chunks WHERE document_id = $1", &[&id])
        .await
        .unwrap();
    let in_chunks = chunks.iter().any(|row| {
        let key: String = row.get(0);
        let data: Vec<u8> = row.get(1);
        key.contains(&hex)
            || Automerge::load(&data).is_ok_and(|doc| doc.get_change_by_hash(&hash).is_some())
    });
    in_row || in_chunks
}

#[tokio::test]
async fn tokens_are_checked_at_the_upgrade() {
    let server = &servers()[0];
    let good = claims("ana");
    let mut expired = good.clone();
    expired["exp"] = json!(now() - 10);
    let mut wrong_audience = good.clone();
    wrong_audience["aud"] = json!("another-service");
    let mut no_role = good.clone();
    no_role.as_object_mut().unwrap().remove("role");
    let refused = [
        ("no token", server.clone()),
        ("an expired token", with_token(server, &sign(&expired, &secret()))),
        (
            "a bad signature",
            with_token(server, &sign(&good, b"not the server's secret at all, but long")),
        ),
        ("the wrong audience", with_token(server, &sign(&wrong_audience, &secret()))),
        ("no role claim", with_token(server, &sign(&no_role, &secret()))),
        (
            "an anonymous peer id without an anonymous role",
            format!("{server}/?peer_id=anonymous-1"),
        ),
        ("garbage", with_token(server, "not-a-jwt")),
    ];
    for (what, url) in refused {
        match tokio_tungstenite::connect_async(&url).await {
            Err(WsError::Http(response)) => {
                assert_eq!(response.status(), 401, "{what}");
                assert!(response.body().as_ref().is_none_or(|b| b.is_empty()), "{what}: a body");
            }
            Ok(_) => panic!("{what}: the upgrade succeeded"),
            Err(error) => panic!("{what}: {error}"),
        }
    }
    // The same token is accepted in the query and in the Authorization header.
    let token = sign(&good, &secret());
    tokio_tungstenite::connect_async(with_token(server, &token)).await.expect("token in the query");
    let mut request = server.as_str().into_client_request().unwrap();
    request.headers_mut().insert("Authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.expect("token in the header");
}

#[tokio::test]
async fn a_client_cannot_claim_another_peers_id() {
    let server = &servers()[0];
    let db = database("SYNC_ACCESS_DATABASE_URL").await;
    let ana = user(server, "ana").await;
    let handle = owned_document(&db, &ana).await;
    share(&db, &handle, "ben", false).await;

    // Ben, who may only read, announces himself as ana with his own token.
    let impostor = Repo::build_tokio().with_peer_id(PeerId::from("ana")).load().await;
    let url = Url::parse(&with_token(server, &token("ben"))).unwrap();
    let dialer = impostor.dial(BackoffConfig::default(), Arc::new(WebSocketDialer(url))).unwrap();
    let established = tokio::time::timeout(Duration::from_secs(5), dialer.established()).await;
    assert!(!matches!(established, Ok(Ok(_))), "a connection as another peer was established");
    assert!(!dialer.is_connected());
    // Nor can he write as ana through it.
    let heads = handle.with_document(|doc| doc.get_heads());
    let rows: Vec<String> = db
        .query_one(
            "SELECT automerge_heads(doc) FROM documents WHERE id = $1",
            &[&handle.document_id().to_string()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, heads.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    impostor.stop().await;
    ana.stop().await;
}

/// The owner writes; a reader on the other server receives every change, and its own are
/// stored nowhere and reach no one; a stranger finds nothing.
#[tokio::test]
async fn owner_reader_and_stranger_on_two_servers() {
    let servers = servers();
    let db = database("SYNC_ACCESS_DATABASE_URL").await;
    // Connected before ana creates the document: samod asks about every connected peer,
    // and a bystander must not become its creator (owner).
    let dan = user(&servers[0], "dan").await;
    let ana = user(&servers[0], "ana").await;
    let handle = owned_document(&db, &ana).await;
    share(&db, &handle, "ben", false).await;
    share(&db, &handle, "cleo", true).await;
    let ben = user(&servers[1], "ben").await;
    let cleo = user(&servers[1], "cleo").await;
    let read_copy = find(&ben, &handle).await.expect("ben may read");
    let write_copy = find(&cleo, &handle).await.expect("cleo may write");

    change(&handle, "status", "from ana");
    eventually("ana's change reaches the reader", || async {
        field(&read_copy, "status").as_deref() == Some("from ana")
    })
    .await;
    let from_cleo = change(&write_copy, "edited_by", "cleo");
    eventually("the writer's change reaches ana and storage", || async {
        field(&handle, "edited_by").as_deref() == Some("cleo")
            && stored(&db, &handle, from_cleo).await
    })
    .await;

    let from_ben = change(&read_copy, "edited_by", "ben");
    // Later changes of ana's reach ben: the server has handled what ben sent before them.
    change(&handle, "status", "after ben");
    eventually("ana's next change reaches the reader", || async {
        field(&read_copy, "status").as_deref() == Some("after ben")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!stored(&db, &handle, from_ben).await, "the reader's change was stored");
    assert!(handle.with_document(|doc| doc.get_change_by_hash(&from_ben).is_none()));
    assert!(write_copy.with_document(|doc| doc.get_change_by_hash(&from_ben).is_none()));
    assert_eq!(field(&handle, "edited_by").as_deref(), Some("cleo"));

    assert!(find(&dan, &handle).await.is_none(), "a stranger found the document");
    for repo in [ana, ben, cleo, dan] {
        repo.stop().await;
    }
}

/// A share taken back mid-session: writing stops, then reading, each within a second.
#[tokio::test]
async fn revocation_stops_a_connected_peer_within_a_second() {
    let servers = servers();
    let db = database("SYNC_ACCESS_DATABASE_URL").await;
    let ana = user(&servers[0], "ana").await;
    let handle = owned_document(&db, &ana).await;
    share(&db, &handle, "ben", true).await;
    let ben = user(&servers[1], "ben").await;
    let copy = find(&ben, &handle).await.expect("ben may write");
    let first = change(&copy, "by_ben", "first");
    eventually("ben's write is stored", || async { stored(&db, &handle, first).await }).await;

    share(&db, &handle, "ben", false).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = change(&copy, "by_ben", "second");
    change(&handle, "status", "read-only now");
    eventually("ana's change still reaches ben", || async {
        field(&copy, "status").as_deref() == Some("read-only now")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!stored(&db, &handle, second).await, "a write after write access was revoked");
    assert_eq!(field(&handle, "by_ben").as_deref(), Some("first"));

    db.execute(
        "DELETE FROM document_shares WHERE document_id = $1 AND user_id = 'ben'",
        &[&handle.document_id().to_string()],
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    change(&handle, "status", "revoked");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(field(&copy, "status").as_deref(), Some("read-only now"), "read after revocation");
    ana.stop().await;
    ben.stop().await;
}

/// A connection that syncs one document more than the bound is closed (samod dials again
/// with a new connection); a message over the size bound closes its connection, and its
/// document is not stored.
#[tokio::test]
async fn connections_are_bounded() {
    let server = &servers()[0];
    let db = database("SYNC_ACCESS_DATABASE_URL").await;
    let repo = Repo::build_tokio().with_peer_id(PeerId::from("eve")).load().await;
    let url = Url::parse(&with_token(server, &token("eve"))).unwrap();
    let dialer = repo.dial(BackoffConfig::default(), Arc::new(WebSocketDialer(url))).unwrap();
    dialer.established().await.expect("connected");
    let first = dialer.connection_id().unwrap();
    for n in 0..=MAX_DOCUMENTS {
        let mut doc = AutoCommit::new();
        doc.put(ROOT, "n", n as i64).unwrap();
        repo.create(doc.document().clone()).await.unwrap();
    }
    eventually("the connection is closed and made again", || async {
        dialer.connection_id().is_some_and(|id| id != first)
    })
    .await;

    let second = dialer.connection_id().unwrap();
    let mut big = AutoCommit::new();
    big.put(ROOT, "blob", "x".repeat(2 * MAX_MESSAGE_BYTES)).unwrap();
    let handle = repo.create(big.document().clone()).await.unwrap();
    eventually("the connection with the large message is closed", || async {
        dialer.connection_id() != Some(second)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let row = db
        .query_opt("SELECT 1 FROM documents WHERE id = $1", &[&handle.document_id().to_string()])
        .await
        .unwrap();
    assert!(row.is_none(), "the document of an oversized message was stored");
    repo.stop().await;
}
