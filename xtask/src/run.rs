//! `cargo xtask run`: the main job. Builds the extension and installs it into a private
//! copy of the PostgreSQL install (so that `cargo xtask test`, which installs its own build
//! into the shared one, never replaces the library this cluster runs), starts a local
//! cluster from that copy with `CREATE EXTENSION pg_automerge` done and sample documents
//! loaded, starts the sync server (docs/sync-server.md) on it, and prints the psql line
//! and the server's ws:// URL. A cluster of its own that is down (a crash, a restart of
//! the machine) is started again, and one that runs another build's library is restarted.
//! `run --stop` stops both.

use anyhow::Result;
use xshell::Shell;

use crate::cluster::{clusters_dir, Cluster};
use crate::flags::{RunFlags, SetupFlags};
use crate::install::PgInstall;
use crate::postgres::PgMajor;
use crate::sync;
use crate::util::{note, sha256_of, step};

/// The database `run` and the documentation examples use.
pub const DATABASE: &str = "pg_automerge";

const PURPOSE: &str = "run";

/// The name of run's sync server's pid and log files.
const SYNC_SERVER: &str = "run-sync-server";

/// The private install of the `purpose` cluster of `major`: a copy of the major's server,
/// beside the cluster's directory, which only this purpose installs into.
pub fn private_install(sh: &Shell, major: PgMajor, purpose: &str) -> Result<PgInstall> {
    let root = clusters_dir(sh)?.join(format!("{purpose}-pg{}-install", major.number()));
    PgInstall::private(major, &root)
}

impl RunFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        if self.stop {
            return stop_all(sh);
        }
        let major = self.pg;
        SetupFlags { pg: major.into() }.run(sh)?;
        let install = step(&format!("{major}: run's private install"), || {
            private_install(sh, major, PURPOSE)
        })?;
        step("build and install the extension (release)", || install.install_extension(sh, true))?;
        let library = sha256_of(&install.library()?)?;
        let cluster = step(&format!("start a {major} cluster with sample documents"), || {
            let cluster =
                Cluster::new(sh, major, PURPOSE)?.with_install(install).with_compactor(DATABASE);
            stop_if_its_library_changed(&cluster, &library)?;
            let cluster = start_with_samples(cluster, Fresh::No)?;
            std::fs::write(library_stamp(&cluster), &library)?;
            Ok(cluster)
        })?;
        step("build the sync server (release)", || sync::build_server(true))?;
        let url = step("start the sync server", || {
            sync::start_detached(sh, &cluster, DATABASE, SYNC_SERVER, true)
        })?;
        println!();
        println!(
            "{major} is running with pg_automerge and the table sample_documents. Connect with:"
        );
        println!();
        println!("    {}", cluster.psql_line(DATABASE));
        println!();
        println!(
            "automerge-repo clients connect to the sync server at the URL below; it runs with"
        );
        println!("--allow-anonymous (no token needed; see docs/sync-server.md#access-control):");
        println!();
        println!("    {url}");
        println!();
        println!("Stop both with: cargo xtask run --stop");
        Ok(())
    }
}

/// Stops the cluster when it runs another pg_automerge library than the one just installed
/// (the cluster's directory keeps the SHA-256 of the library it was started with): the
/// library is preloaded, so every backend forks from a postmaster that keeps the library it
/// started with, and the cluster would go on running the code of an earlier build.
fn stop_if_its_library_changed(cluster: &Cluster, installed: &str) -> Result<()> {
    let started_with = std::fs::read_to_string(library_stamp(cluster)).unwrap_or_default();
    if cluster.is_running() && started_with.trim() != installed {
        note(format!(
            "the {} cluster runs the pg_automerge library of an earlier build: restarting it",
            cluster.major
        ));
        cluster.stop()?;
    }
    Ok(())
}

/// Where the cluster's directory keeps the SHA-256 of the library it runs.
fn library_stamp(cluster: &Cluster) -> std::path::PathBuf {
    cluster.dir.join("pg_automerge-library.sha256")
}

/// Stops `run`'s clusters that run. Stopping needs no install of their own: `pg_ctl stop`
/// only signals the postmaster.
fn stop_all(sh: &Shell) -> Result<()> {
    if sync::stop_detached(sh, SYNC_SERVER)? {
        println!("stopped the sync server");
    }
    for major in PgMajor::ALL {
        let cluster = Cluster::new(sh, major, PURPOSE)?;
        if cluster.is_running() {
            cluster.stop()?;
            println!("stopped the {major} cluster in {}", cluster.dir.display());
        } else if let Some(pid) = cluster.stale_postmaster_pid() {
            println!(
                "the {major} cluster in {} was already down (its postmaster, process {pid}, \
                 is gone: a crash, or the machine restarted)",
                cluster.dir.display()
            );
        }
    }
    Ok(())
}

/// Whether the cluster is made anew, or kept with what users put in it.
#[derive(PartialEq, Eq)]
pub enum Fresh {
    Yes,
    No,
}

/// Starts `cluster` (initialising it the first time, and starting it again when it was
/// left down), creates the database with the extension, and (re)loads the sample documents.
pub fn start_with_samples(cluster: Cluster, fresh: Fresh) -> Result<Cluster> {
    if fresh == Fresh::Yes {
        cluster.wipe()?;
    }
    cluster.init()?;
    cluster.ensure_up()?;
    cluster.psql(
        "postgres",
        &format!(
            "SELECT 'CREATE DATABASE {DATABASE}' \
             WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{DATABASE}') \\gexec"
        ),
    )?;
    cluster.psql(DATABASE, &samples_script())?;
    note(format!("loaded {} sample documents", fixtures::samples().len()));
    Ok(cluster)
}

/// SQL that creates the extension and the sample table if they are missing (or updates the
/// extension a cluster kept from an earlier run), and puts the sample documents in it.
pub fn samples_script() -> String {
    let rows: Vec<String> = fixtures::samples()
        .iter()
        .map(|sample| format!("('{}', '\\x{}')", sample.name, hex::encode(sample.doc.save())))
        .collect();
    format!(
        "CREATE EXTENSION IF NOT EXISTS pg_automerge;\n\
         ALTER EXTENSION pg_automerge UPDATE;\n\
         CREATE TABLE IF NOT EXISTS sample_documents (name text PRIMARY KEY, doc automerge NOT NULL);\n\
         INSERT INTO sample_documents (name, doc) VALUES\n  {}\n\
         ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc;\n",
        rows.join(",\n  ")
    )
}
