//! Runs SQL through psql against the cluster that `cargo xtask test` starts, so that the
//! snapshot tests in `tests/` see exactly what a user's psql shows.

use std::io::Write;
use std::process::{Command, Stdio};

/// The environment variables through which xtask names the cluster.
pub const PSQL_ENV: &str = "PG_AUTOMERGE_PSQL";
pub const CONNECTION_ENV: &str = "PG_AUTOMERGE_CONNECTION";

/// psql's output (results and errors, in order) for `sql`.
pub fn psql(sql: &str) -> String {
    let psql = std::env::var(PSQL_ENV).unwrap_or_else(|_| {
        panic!("{PSQL_ENV} is not set: these tests run through `cargo xtask test`")
    });
    let connection = std::env::var(CONNECTION_ENV).expect("set together with PG_AUTOMERGE_PSQL");
    let mut child = Command::new(psql)
        .args(["-X", "-q", "-v", "VERBOSITY=default"])
        .args(connection.split_whitespace())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting psql");
    child.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    // One statement per case keeps stdout and stderr in order when joined.
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in String::from_utf8_lossy(&output.stderr).lines() {
        let line = line.strip_prefix("psql:<stdin>:").map_or(line, |rest| {
            rest.split_once(": ").map_or(line, |(_, message)| message)
        });
        text.push_str(line);
        text.push('\n');
    }
    text
}
