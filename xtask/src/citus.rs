//! Citus, the distributed engine the `citus` test step runs pg_automerge on, built from the
//! vendored upstream tarball for each major we build from source, into that major's install
//! in the cache. Where the major's `pg_config` already has a `citus.so` we did not build
//! (the user's packages), that one is used.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};

use crate::install::{files_below, install_file, PgInstall};
use crate::postgres::{cache_dir, PgMajor};
use crate::project_root;
use crate::util::{note, run_logged};

pub const VERSION: &str = "14.0.1";
/// The sha256 of the vendored `citus-14.0.1.tar.gz`, as upstream's release page gives it.
const TARBALL_SHA256: &str = "acfa9a77cd84a8e1edab26cca4a71355f39c910c01586da89560e0240d4b05ba";

/// The Debian packages Citus's configure needs beyond PostgreSQL's (columnar compression).
pub const BUILD_PACKAGES: &[&str] = &["libzstd-dev", "liblz4-dev"];

/// The majors the `citus` step runs on: Citus 14 supports PostgreSQL 16 to 18.
pub const MAJORS: [PgMajor; 2] = [PgMajor::Pg17, PgMajor::Pg18];

/// The vendored tarball: `PG_AUTOMERGE_CITUS_TARBALL`, else `shared/vendor/` beside the
/// checkout or beside any directory above it (a clone made inside a workspace finds the
/// workspace's); `None` where there is none.
pub fn tarball() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PG_AUTOMERGE_CITUS_TARBALL") {
        return Some(PathBuf::from(path));
    }
    let name = format!("shared/vendor/citus-{VERSION}.tar.gz");
    project_root().ancestors().skip(1).map(|dir| dir.join(&name)).find(|path| path.exists())
}

/// Where `major`'s install has (or will have) Citus's library.
fn library(major: PgMajor) -> Result<PathBuf> {
    Ok(PgInstall::shared(major).pkglibdir()?.join("citus.so"))
}

/// Whether `major`'s install has a Citus (ours or the user's).
pub fn installed(major: PgMajor) -> Result<bool> {
    Ok(library(major)?.exists())
}

/// Makes sure `major`'s install has Citus: already there (ours, for this PostgreSQL
/// version, or the user's), or built now (about 2.5 minutes on two cores). Where neither
/// is possible (no tarball found), says so and leaves it out: the `citus` step then says it
/// was skipped.
pub fn ensure_built(major: PgMajor) -> Result<()> {
    let library = library(major)?;
    let root = cache_dir().join("citus").join(major.pgrx_name());
    let stamp = root.join("built");
    let wanted = format!("citus {VERSION} {TARBALL_SHA256} for {}", pg_version(major)?);
    let ours = fs::read_to_string(&stamp).ok();
    if library.exists() {
        match ours {
            Some(built) if built == wanted => {
                note(format!("Citus {VERSION} already built for {major}"));
                return Ok(());
            }
            None => {
                note(format!("{major} has a Citus of its own ({}): using it", library.display()));
                return Ok(());
            }
            // Ours, for an earlier point release of PostgreSQL: build it again.
            Some(_) => {}
        }
    }
    let Some(tarball) = tarball() else {
        note(format!(
            "NOT building Citus for {major}: no citus-{VERSION}.tar.gz in a shared/vendor/ \
             beside the checkout or above it, and PG_AUTOMERGE_CITUS_TARBALL is not set; \
             the citus test step will be skipped"
        ));
        return Ok(());
    };
    note(format!("building Citus {VERSION} for {major} (about 2.5 minutes)"));
    build(major, &root, &tarball)?;
    fs::write(&stamp, wanted)?;
    Ok(())
}

fn pg_version(major: PgMajor) -> Result<String> {
    let output = Command::new(major.pg_config()).arg("--version").output()?;
    ensure!(output.status.success(), "{} --version failed", major.pg_config().display());
    Ok(String::from_utf8(output.stdout)?.trim().to_string())
}

fn verify(path: &Path) -> Result<()> {
    let mut file = fs::File::open(path).with_context(|| {
        format!(
            "opening the Citus tarball {} (set PG_AUTOMERGE_CITUS_TARBALL to its path)",
            path.display()
        )
    })?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    let actual = hex::encode(hasher.finalize());
    ensure!(
        actual == TARBALL_SHA256,
        "{}: sha256 {actual}, expected {TARBALL_SHA256}",
        path.display()
    );
    Ok(())
}

/// Configures and builds in a scratch tree, installs into a staging directory
/// (`DESTDIR`), then puts each file into the major's install by rename, as every install
/// here does: a running server keeps the library it mapped.
fn build(major: PgMajor, root: &Path, tarball: &Path) -> Result<()> {
    verify(tarball)?;
    let (src, stage) = (root.join("src"), root.join("stage"));
    for dir in [&src, &stage] {
        if dir.exists() {
            fs::remove_dir_all(dir)?;
        }
    }
    fs::create_dir_all(&src)?;
    let log = root.join("build.log");
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).to_string();
    let pg_config = format!("PG_CONFIG={}", major.pg_config().display());
    let destdir = format!("DESTDIR={}", stage.display());
    let steps: [(&str, Vec<&str>); 4] = [
        ("tar", vec!["-xzf", tarball.to_str().context("a UTF-8 path")?, "--strip-components=1"]),
        // libcurl only serves Citus's anonymous statistics collection.
        ("./configure", vec!["--without-libcurl", &pg_config]),
        ("make", vec!["-j", &jobs]),
        ("make", vec!["install", &destdir]),
    ];
    run_logged(&steps, &src, &log)?;
    for file in files_below(&stage)? {
        install_file(&file, &Path::new("/").join(file.strip_prefix(&stage)?))?;
    }
    fs::remove_dir_all(&src)?;
    fs::remove_dir_all(&stage)?;
    Ok(())
}
