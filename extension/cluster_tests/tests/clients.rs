//! The client examples under examples/, run against the cluster.

use std::process::Command;

use cluster_tests::{conninfo, project_root};

#[tokio::test]
async fn rust_client_syncs_with_the_server() {
    let report = rust_client::run(&conninfo()).await.expect("the Rust client loop");
    // The client's last edit and the other replica's title change are concurrent: both
    // survive, as two heads, on the server and the client alike.
    assert_eq!(report.heads.len(), 2, "both concurrent edits are heads");
    println!(
        "Rust client: {} changes sent in {} bytes, in sync with the server",
        report.changes_sent, report.bytes_sent
    );
}

#[test]
fn node_client_agrees_with_the_server() {
    if let Some(stdout) = node_script("client.mjs") {
        println!("Node.js client: {stdout}");
    }
}

/// Issue 35: mark changes made by @automerge/automerge and altered through its own
/// decodeChange/encodeChange are refused through every entry point, naming the rule.
#[test]
fn node_client_crafted_marks_are_refused() {
    if let Some(stdout) = node_script("wrong-marks.mjs") {
        println!("Node.js crafted marks: {stdout}");
    }
}

/// Runs a script of examples/node-client against the cluster, asserting that it succeeds:
/// its output, or `None` where Node.js is not installed.
fn node_script(script: &str) -> Option<String> {
    if Command::new("node").arg("--version").output().is_err() {
        println!("SKIPPED: Node.js is not installed, so examples/node-client/{script} did not run");
        return None;
    }
    let dir = project_root().join("examples/node-client");
    assert!(
        dir.join("node_modules/@automerge/automerge").exists(),
        "examples/node-client has no node_modules: `cargo xtask test` installs them with npm ci"
    );
    let output = Command::new("node")
        .arg(script)
        .current_dir(&dir)
        .env("PG_AUTOMERGE_CONNECTION", conninfo())
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    Some(stdout.trim().to_string())
}
