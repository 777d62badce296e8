//! Helpers for tests that talk to a real cluster, the one `cargo xtask test` starts for
//! each PostgreSQL major (with the extension and the sample documents loaded). xtask names
//! it through two environment variables. `server` controls clusters and `versions` knows
//! the extension's SQL versions, for the reliability and Citus tests and for xtask alike.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification};

pub mod server;
pub mod versions;

/// The psql of the cluster's major.
pub const PSQL_ENV: &str = "PG_AUTOMERGE_PSQL";
/// A libpq connection string to the database with the samples.
pub const CONNECTION_ENV: &str = "PG_AUTOMERGE_CONNECTION";
/// The cluster's server log, for tests that check what the postmaster recorded.
pub const SERVER_LOG_ENV: &str = "PG_AUTOMERGE_SERVER_LOG";
/// The roles the reliability tests' servers are handed over as (`server::Server::env`).
pub const RELIABILITY_PRIMARY: &str = "PRIMARY";
pub const RELIABILITY_STANDBY: &str = "STANDBY";
pub const RELIABILITY_SUBSCRIBER: &str = "SUBSCRIBER";
/// The roles the Citus tests' servers are handed over as: a coordinator and two workers.
pub const CITUS_COORDINATOR: &str = "CITUS_COORDINATOR";
pub const CITUS_WORKERS: [&str; 2] = ["CITUS_WORKER_1", "CITUS_WORKER_2"];
/// The database every Citus node serves: Citus needs the same name on each.
pub const CITUS_DATABASE: &str = "citus_documents";
/// The release the Citus tests create first and update from, whose install script xtask
/// puts beside the current version's.
pub const CITUS_OLDER_RELEASE: &str = "0.4.0";

/// The database of the test cluster where the background compactor works, apart from the
/// samples' database: there, other tests see values as their writes left them.
pub const COMPACTOR_DATABASE: &str = "compactor";

/// The value of a variable `cargo xtask test` sets for these tests.
fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: these tests run through `cargo xtask test`"))
}

pub fn conninfo() -> String {
    env(CONNECTION_ENV)
}

/// The workspace root.
pub fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace")
}

/// psql's output (results, then errors) for `sql`: one statement per call keeps the order.
pub fn psql(sql: &str) -> String {
    let mut child = Command::new(env(PSQL_ENV))
        .args(["-X", "-q", "-d", &conninfo()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting psql");
    child.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in String::from_utf8_lossy(&output.stderr).lines() {
        text.push_str(strip_psql_location(line));
        text.push('\n');
    }
    text
}

/// Drops the `psql:<stdin>:12: ` that psql puts before errors when it reads a script, so
/// that output reads as a person's psql shows it.
pub fn strip_psql_location(line: &str) -> &str {
    let Some(rest) = line.strip_prefix("psql:<stdin>:") else { return line };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    rest[digits..].strip_prefix(": ").unwrap_or(line)
}

/// A connection whose driver runs on its own task.
pub async fn connect() -> Client {
    connect_with(&conninfo()).await
}

/// A connection to `database` of the cluster.
pub async fn connect_to(database: &str) -> Client {
    let conninfo: Vec<String> = conninfo()
        .split(' ')
        .map(|part| match part.starts_with("dbname=") {
            true => format!("dbname={database}"),
            false => part.to_string(),
        })
        .collect();
    connect_with(&conninfo.join(" ")).await
}

async fn connect_with(conninfo: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await.expect("connecting");
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            eprintln!("connection closed: {err}");
        }
    });
    client
}

/// A connection that hands every NOTIFY it receives to the returned channel.
pub async fn connect_listening() -> (Client, mpsc::UnboundedReceiver<Notification>) {
    let (client, mut connection) =
        tokio_postgres::connect(&conninfo(), NoTls).await.expect("connecting");
    let (sender, receiver) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(notification)) => {
                    let _ = sender.send(notification);
                }
                Ok(_) => {}
                Err(err) => panic!("listening connection failed: {err}"),
            }
        }
    });
    (client, receiver)
}

/// The lines only one side has, marked - and +, for failure messages.
pub fn line_differences(left: &str, right: &str) -> String {
    let (l, r): (BTreeSet<&str>, BTreeSet<&str>) =
        (left.lines().collect(), right.lines().collect());
    let mut out: Vec<String> = l.difference(&r).map(|line| format!("- {line}")).collect();
    out.extend(r.difference(&l).map(|line| format!("+ {line}")));
    out.join("\n")
}
