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
    if Command::new("node").arg("--version").output().is_err() {
        println!("SKIPPED: Node.js is not installed, so examples/node-client did not run");
        return;
    }
    let dir = project_root().join("examples/node-client");
    assert!(
        dir.join("node_modules/@automerge/automerge").exists(),
        "examples/node-client has no node_modules: `cargo xtask test` installs them with npm ci"
    );
    let output = Command::new("node")
        .arg("client.mjs")
        .current_dir(&dir)
        .env("PG_AUTOMERGE_CONNECTION", conninfo())
        .output()
        .expect("running node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "node client failed:\n{stdout}\n{stderr}");
    println!("Node.js client: {}", stdout.trim());
}
