//! `cargo xtask test`'s check that the tests leave a user's `run` cluster alone: a cluster
//! made as `run` makes its own (a private install, the extension preloaded, the sample
//! documents) is up and answering while the whole PostgreSQL 17 step runs beside it; then
//! the same postmaster must answer, its server log must show no process terminated by a
//! signal, and it must still run the library installed for it, unchanged.
//!
//! It installs the debug build rather than `run`'s release build: the quick benchmarks and
//! the image build it in any case, where a release build would add minutes to every test run
//! and check nothing more.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};
use xshell::Shell;

use crate::cluster::Cluster;
use crate::install::mapped_library;
use crate::postgres::PgMajor;
use crate::run::{private_install, start_with_samples, Fresh, DATABASE};
use crate::util::{note, Counts};

/// The major whose test step runs beside the cluster.
pub const MAJOR: PgMajor = PgMajor::Pg17;
const PURPOSE: &str = "beside-tests";
/// Reads the sample documents through the extension.
const QUERY: &str = "\\pset tuples_only on\n\
    SELECT count(*), sum(length(doc::jsonb::text)) FROM sample_documents;";

/// The cluster as it was when the tests began.
pub struct Before {
    cluster: Cluster,
    postmaster: u32,
    library: PathBuf,
    inode: u64,
    sha256: Vec<u8>,
    log_offset: u64,
    answer: String,
}

/// Installs the extension into the cluster's private install, starts it from that install,
/// and records what it runs.
pub fn start(sh: &Shell) -> Result<Before> {
    let install = private_install(sh, MAJOR, PURPOSE)?;
    install.install_extension(sh, false)?;
    let cluster = Cluster::new(sh, MAJOR, PURPOSE)?.with_install(install.clone());
    cluster.wipe()?;
    let log_offset = fs::metadata(&cluster.log_file).map(|m| m.len()).unwrap_or(0);
    let cluster = start_with_samples(cluster, Fresh::Yes)?;
    let postmaster = cluster.postmaster().context("the cluster started but has no postmaster")?;
    let library = fs::canonicalize(install.library()?)?;
    let mapped = mapped_library(postmaster)?;
    ensure!(
        mapped.path == library && !mapped.deleted,
        "the cluster runs {}, not its install's {}",
        mapped.path.display(),
        library.display()
    );
    let answer = cluster.psql(DATABASE, QUERY)?;
    note(format!(
        "{MAJOR} cluster {} (postmaster {postmaster}) runs {}",
        cluster.dir.display(),
        library.display()
    ));
    Ok(Before {
        postmaster,
        inode: mapped.inode,
        sha256: sha256(&library)?,
        library,
        log_offset,
        answer,
        cluster,
    })
}

/// The checks after the tests, each counted; the cluster is stopped afterwards.
pub fn check(before: Before) -> Result<Counts> {
    let mut counts = Counts::default();
    let mut check = |name: &str, result: Result<()>| match result {
        Ok(()) => {
            counts.passed += 1;
            println!("test side_by_side::{name} ... ok");
        }
        Err(err) => {
            counts.failed += 1;
            println!("test side_by_side::{name} ... FAILED: {err:#}");
        }
    };
    let cluster = &before.cluster;
    check(
        "the_same_postmaster_answers_as_before",
        (|| {
            let now = cluster.postmaster();
            ensure!(
                now == Some(before.postmaster),
                "the postmaster was {}, now {now:?}",
                before.postmaster
            );
            let answer = cluster.psql(DATABASE, QUERY)?;
            ensure!(
                answer == before.answer,
                "it answered {:?}, before {:?}",
                answer,
                before.answer
            );
            Ok(())
        })(),
    );
    check(
        "no_process_was_terminated_by_a_signal",
        (|| {
            let log = fs::read(&cluster.log_file)?;
            let log = String::from_utf8_lossy(&log[before.log_offset as usize..]);
            let signals: Vec<&str> =
                log.lines().filter(|l| l.contains("terminated by signal")).collect();
            ensure!(signals.is_empty(), "the server log says:\n{}", signals.join("\n"));
            Ok(())
        })(),
    );
    check(
        "it_still_runs_the_library_installed_for_it",
        (|| {
            let mapped = mapped_library(before.postmaster)?;
            ensure!(
                mapped.path == before.library && mapped.inode == before.inode && !mapped.deleted,
                "it maps {} (inode {}{}), not {} (inode {})",
                mapped.path.display(),
                mapped.inode,
                if mapped.deleted { ", deleted" } else { "" },
                before.library.display(),
                before.inode
            );
            let installed = fs::metadata(&before.library)?.ino();
            ensure!(installed == before.inode, "its install's library was replaced");
            ensure!(sha256(&before.library)? == before.sha256, "its library's contents changed");
            Ok(())
        })(),
    );
    cluster.stop()?;
    println!("side by side with a run cluster: {counts}");
    Ok(counts)
}

fn sha256(path: &std::path::Path) -> Result<Vec<u8>> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha256::digest(&bytes).to_vec())
}
