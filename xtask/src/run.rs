//! `cargo xtask run`: the main job. Builds and installs the extension, starts a local
//! cluster with `CREATE EXTENSION pg_automerge` done and sample documents loaded, and
//! prints the psql line to connect. `run --stop` stops it.

use anyhow::Result;
use xshell::{cmd, Shell};

use crate::cluster::Cluster;
use crate::flags::{RunFlags, SetupFlags};
use crate::postgres::PgMajor;
use crate::setup;
use crate::step::{note, step};

/// The database `run` and the documentation examples use.
pub const DATABASE: &str = "pg_automerge";

const PURPOSE: &str = "run";

pub fn run(sh: &Shell, flags: &RunFlags) -> Result<()> {
    if flags.stop {
        return stop_all(sh);
    }
    let major = flags.pg;
    setup::run(sh, &SetupFlags { pg: major.into() })?;
    step("build and install the extension (release)", || install_extension(sh, major, true))?;
    let cluster = step(&format!("start a {major} cluster with sample documents"), || {
        start_with_samples(sh, major, PURPOSE, Fresh::No)
    })?;
    println!();
    println!("{major} is running with pg_automerge and the table sample_documents. Connect with:");
    println!();
    println!("    {}", cluster.psql_line(DATABASE));
    println!();
    println!("Stop it with: cargo xtask run --stop");
    Ok(())
}

fn stop_all(sh: &Shell) -> Result<()> {
    for major in PgMajor::ALL {
        let cluster = Cluster::new(sh, major, PURPOSE)?;
        if cluster.is_running() {
            cluster.stop()?;
            println!("stopped the {major} cluster in {}", cluster.dir.display());
        }
    }
    Ok(())
}

/// Builds the extension and installs it into `major`'s PostgreSQL.
pub fn install_extension(sh: &Shell, major: PgMajor, release: bool) -> Result<()> {
    let _dir = sh.push_dir("extension/pg_automerge");
    let pg_config = major.pg_config();
    let release = release.then_some("--release");
    cmd!(sh, "cargo pgrx install {release...} --pg-config {pg_config}").run()?;
    Ok(())
}

/// Whether the cluster is made anew, or kept with what users put in it.
#[derive(PartialEq, Eq)]
pub enum Fresh {
    Yes,
    No,
}

/// Starts the `purpose` cluster of `major` (initialising it the first time), creates the
/// database with the extension, and (re)loads the sample documents.
pub fn start_with_samples(
    sh: &Shell,
    major: PgMajor,
    purpose: &str,
    fresh: Fresh,
) -> Result<Cluster> {
    let cluster = Cluster::new(sh, major, purpose)?;
    if fresh == Fresh::Yes {
        cluster.wipe()?;
    }
    cluster.init()?;
    cluster.start()?;
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
fn samples_script() -> String {
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
