//! What the test files that run against servers share.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

/// A variable `cargo xtask test --only sync` sets.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: these tests run through `cargo xtask test --only sync`")
    })
}

/// A connection to the database named by the variable `url_variable`.
pub async fn database(url_variable: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&env(url_variable), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Polls `probe` every 50 ms for up to 30 s.
pub async fn eventually<F, Fut>(what: &str, probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_within(Duration::from_secs(30), what, probe).await
}

/// Polls `probe` every 50 ms for up to `patience`.
pub async fn eventually_within<F, Fut>(patience: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + patience;
    while !probe().await {
        assert!(Instant::now() < deadline, "{what}: not within {patience:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
