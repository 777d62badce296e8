//! Local PostgreSQL clusters for `run` and for the tests, each a directory under
//! `target/` with its data, server log and port file. What a cluster does (initdb, start,
//! stop, psql) is `cluster_tests::server::Server`'s, which the tests that control clusters
//! share.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use anyhow::Result;
use cluster_tests::server::Server;
use xshell::{cmd, Shell};

use crate::install::PgInstall;
use crate::postgres::{cluster_user, PgMajor};
use crate::project_root;
use crate::util::note;

pub use cluster_tests::server::SUPERUSER;

pub struct Cluster {
    pub major: PgMajor,
    /// Holds `data/`, the server log, the socket and the port file.
    pub dir: PathBuf,
    /// The install whose server programs (and so libraries) the cluster runs.
    pub install: PgInstall,
    pub server: Server,
}

/// A cluster is driven through its server: `cluster.psql(…)`, `cluster.port`.
impl std::ops::Deref for Cluster {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

impl Cluster {
    /// The cluster named `purpose` (such as "run" or "test") for `major`, under `target/`.
    /// Its port is chosen once and kept, so that a later `run --stop` finds it.
    pub fn new(sh: &Shell, major: PgMajor, purpose: &str) -> Result<Cluster> {
        let dir = clusters_dir(sh)?.join(format!("{purpose}-pg{}", major.number()));
        fs::create_dir_all(&dir)?;
        let port_file = dir.join("port");
        let port = match fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()) {
            Some(port) => port,
            None => {
                let port = free_port()?;
                fs::write(&port_file, port.to_string())?;
                port
            }
        };
        if let Some(user) = cluster_user() {
            cmd!(sh, "chown -R {user} {dir}").quiet().run()?;
        }
        let install = PgInstall::shared(major);
        let server = Server {
            bindir: install.bindir(),
            client_bindir: major.bindir(),
            data_dir: dir.join("data"),
            log_file: dir.join("server.log"),
            port,
            user: cluster_user().map(str::to_string),
            settings: Vec::new(),
        };
        Ok(Cluster { major, dir, install, server })
    }

    /// This cluster, run from `install` rather than from the major's shared install.
    pub fn with_install(mut self, install: PgInstall) -> Cluster {
        self.server.bindir = install.bindir();
        self.install = install;
        self
    }

    /// This cluster, started with `name = value` as well (`wal_level = logical`, say).
    pub fn with_setting(mut self, name: &str, value: &str) -> Cluster {
        self.server.settings.push(format!("-c {name}={value}"));
        self
    }

    /// This cluster, with the background compactor working in `database`
    /// (docs/operations.md, "Background compaction").
    pub fn with_compactor(self, database: &str) -> Cluster {
        self.with_setting("pg_automerge.compactor_database", database)
    }

    /// Starts a cluster whatever state it was left in, saying what it found when that was
    /// not a clean stop: down after a crash or a restart of the machine (a stale
    /// `postmaster.pid`), or a postmaster that no longer answers, which is stopped first.
    /// A cluster that runs and answers is left alone.
    pub fn ensure_up(&self) -> Result<()> {
        if let Some(pid) = self.postmaster() {
            // A server in crash recovery rejects connections for a while, then answers.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while std::time::Instant::now() < deadline {
                if self.answers(5) {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            note(format!(
                "the {} cluster's postmaster (process {pid}) runs but has not answered for a \
                 minute: stopping it and starting it again (server log: {})",
                self.major,
                self.log_file.display()
            ));
            self.stop()?;
        } else if let Ok(pid) = self.postmaster_pid() {
            note(format!(
                "the {} cluster was down: its postmaster (process {pid}) is gone without \
                 shutting down (a crash, or the machine restarted); starting it again \
                 (server log: {})",
                self.major,
                self.log_file.display()
            ));
        }
        self.start_after_crash()
    }

    /// The server's version for a report's provenance, saying so when the server was built
    /// with assertions (`--enable-cassert`, as setup builds 17 and 18 for the tests): such a
    /// server spends much of its time checking memory contexts, so figures measured on it
    /// are not what a packaged server gives.
    pub fn server_description(&self, database: &str) -> Result<String> {
        let query = "SELECT current_setting('server_version') || CASE \
                     WHEN current_setting('debug_assertions')::boolean \
                     THEN ', built with assertions (--enable-cassert)' ELSE '' END;";
        self.psql_value(database, query)
    }

    /// The line a person types to connect.
    pub fn psql_line(&self, database: &str) -> String {
        format!("{} {}", self.psql_path().display(), self.connection_args(database).join(" "))
    }
}

/// `target/xtask` when the cluster user can reach it; otherwise (a checkout inside a home
/// directory closed to other users, say) a directory under /var/tmp of this checkout's own.
pub fn clusters_dir(sh: &Shell) -> Result<PathBuf> {
    let in_target = project_root().join("target/xtask");
    fs::create_dir_all(&in_target)?;
    let Some(user) = cluster_user() else { return Ok(in_target) };
    if cmd!(sh, "sudo -u {user} -- test -x {in_target}").quiet().ignore_stderr().run().is_ok() {
        return Ok(in_target);
    }
    let fallback = Path::new("/var/tmp").join(format!("pg_automerge-{}", checkout_id()));
    fs::create_dir_all(&fallback)?;
    Ok(fallback)
}

/// A short name for this checkout, for paths that must not collide with another's, or be
/// long (pgrx puts a Unix socket in its test cluster's directory).
pub fn checkout_id() -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(project_root().as_os_str().as_encoded_bytes())[..4])
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
