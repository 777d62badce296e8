//! The extension on every node: created at an older release on the coordinator (Citus
//! creates it on the workers), then updated there.

use anyhow::{ensure, Result};
use cluster_tests::server::Server;
use cluster_tests::{versions, CITUS_DATABASE, CITUS_OLDER_RELEASE};

use super::nodes;

fn extension_version(node: &Server) -> Result<String> {
    let version = node.psql(
        CITUS_DATABASE,
        "\\t on\nSELECT extversion FROM pg_extension WHERE extname = 'pg_automerge';",
    )?;
    Ok(version.trim().to_string())
}

/// Every node reports the older release after CREATE, and the current version after
/// `ALTER EXTENSION pg_automerge UPDATE` on the coordinator.
#[test]
#[ignore = "needs the nodes that `cargo xtask test --only citus` provisions"]
fn alter_extension_update_on_the_coordinator_reaches_every_node() -> Result<()> {
    let nodes = nodes();
    let coordinator = &nodes.coordinator;
    coordinator.psql(
        CITUS_DATABASE,
        &format!("CREATE EXTENSION pg_automerge VERSION '{CITUS_OLDER_RELEASE}';"),
    )?;
    for node in nodes.all() {
        let version = extension_version(node)?;
        ensure!(
            version == CITUS_OLDER_RELEASE,
            "port {}: version `{version}` after CREATE",
            node.port
        );
    }
    coordinator.psql(CITUS_DATABASE, "ALTER EXTENSION pg_automerge UPDATE;")?;
    let current = versions::current()?;
    for node in nodes.all() {
        let version = extension_version(node)?;
        ensure!(version == current, "port {}: version `{version}` after UPDATE", node.port);
    }
    Ok(())
}
