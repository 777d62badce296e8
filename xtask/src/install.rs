//! Where the extension is installed, and how. Each PostgreSQL major has its shared install
//! (the one its `pg_config` names, where `cargo pgrx test` installs the tests' build);
//! `cargo xtask run` has a private copy of the server part of it, so that the tests never
//! replace the library a user's cluster runs. Every file xtask installs is written beside
//! the old one and renamed into place ([`install_file`]): a running server keeps the code
//! it mapped, and the next one to start loads the new file whole.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use xshell::{cmd, Shell};

use crate::postgres::PgMajor;
use crate::project_root;
use crate::util::note;

/// The extension's files start with this name, in the library and extension directories.
const EXTENSION: &str = "pg_automerge";

/// One install of a PostgreSQL major: the shared one, or a copy of its server programs,
/// libraries and share directory at the same paths below a directory of its own
/// (PostgreSQL finds its libraries and share directory relative to its programs).
#[derive(Clone, Debug)]
pub struct PgInstall {
    pub major: PgMajor,
    /// `/` for the shared install.
    root: PathBuf,
}

impl PgInstall {
    /// The install `major.pg_config()` describes.
    pub fn shared(major: PgMajor) -> PgInstall {
        PgInstall { major, root: PathBuf::from("/") }
    }

    /// A private copy of `major`'s shared install below `root`, made when missing or when
    /// the shared install changed since (a new point release); without the shared
    /// install's pg_automerge files, which the caller installs its own of.
    pub fn private(major: PgMajor, root: &Path) -> Result<PgInstall> {
        let install = PgInstall { major, root: root.to_path_buf() };
        let shared = PgInstall::shared(major);
        let source = shared.identity()?;
        let stamp = root.join("copied-from");
        if fs::read_to_string(&stamp).ok().as_deref() == Some(source.as_str()) {
            return Ok(install);
        }
        note(format!("copying {major}'s server into {} (a private install)", root.display()));
        // Made beside and renamed into place, as every install: a server running from an
        // older copy keeps the files it opened.
        let fresh = root.with_extension("new");
        if fresh.exists() {
            fs::remove_dir_all(&fresh)?;
        }
        for dir in [major.bindir(), shared.pkglibdir()?, shared.sharedir()?] {
            copy_tree(&dir, &under(&fresh, &dir))?;
        }
        fs::write(fresh.join("copied-from"), &source)?;
        let old = root.with_extension("old");
        if old.exists() {
            fs::remove_dir_all(&old)?;
        }
        if root.exists() {
            fs::rename(root, &old)?;
        }
        fs::rename(&fresh, root)?;
        if old.exists() {
            fs::remove_dir_all(&old)?;
        }
        Ok(install)
    }

    /// Its server programs: `postgres`, `initdb`, `pg_ctl`.
    pub fn bindir(&self) -> PathBuf {
        under(&self.root, &self.major.bindir())
    }

    pub fn pkglibdir(&self) -> Result<PathBuf> {
        Ok(under(&self.root, &pg_config_dir(self.major, "--pkglibdir")?))
    }

    pub fn sharedir(&self) -> Result<PathBuf> {
        Ok(under(&self.root, &pg_config_dir(self.major, "--sharedir")?))
    }

    pub fn extension_dir(&self) -> Result<PathBuf> {
        Ok(self.sharedir()?.join("extension"))
    }

    /// The extension's shared library in this install.
    pub fn library(&self) -> Result<PathBuf> {
        Ok(self.pkglibdir()?.join(format!("{EXTENSION}.so")))
    }

    /// Builds the extension (release or debug, without the tests' code) and installs it
    /// here, each file renamed into place.
    pub fn install_extension(&self, sh: &Shell, release: bool) -> Result<()> {
        let name = format!(
            "{}-{}",
            if self.root == Path::new("/") { "shared" } else { "private" },
            self.major.pgrx_name()
        );
        let package = package(sh, self.major, release, &name)?;
        for file in files_below(&package)? {
            let relative = file.strip_prefix(&package)?;
            install_file(&file, &self.root.join(relative))?;
        }
        Ok(())
    }

    /// Takes the extension's library out of the directory listing, so that an install that
    /// writes in place (`cargo pgrx test` runs `sudo cp` as root) makes a new file instead of
    /// rewriting the one running servers mapped.
    pub fn unlink_library(&self) -> Result<()> {
        let library = self.library()?;
        match fs::remove_file(&library) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            // Not ours to remove (a system install, as an unprivileged user): pgrx then
            // installs with sudo, which may.
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                note(format!("could not unlink {} first: {err}", library.display()));
                Ok(())
            }
            Err(err) => Err(err).with_context(|| format!("removing {}", library.display())),
        }
    }

    /// What the private copies are made from: the version and the server binary's identity.
    fn identity(&self) -> Result<String> {
        let version = Command::new(self.major.pg_config()).arg("--version").output()?;
        ensure!(version.status.success(), "{} --version failed", self.major.pg_config().display());
        let postgres = fs::metadata(self.bindir().join("postgres"))?;
        Ok(format!(
            "{} (postgres: inode {}, modified {})",
            String::from_utf8_lossy(&version.stdout).trim(),
            postgres.ino(),
            postgres.mtime()
        ))
    }
}

/// `dir`, an absolute path, below `root`.
fn under(root: &Path, dir: &Path) -> PathBuf {
    root.join(dir.strip_prefix("/").unwrap_or(dir))
}

/// A directory of `major`'s shared install, as its pg_config prints it.
fn pg_config_dir(major: PgMajor, flag: &str) -> Result<PathBuf> {
    let output = Command::new(major.pg_config()).arg(flag).output()?;
    ensure!(output.status.success(), "{} {flag} failed", major.pg_config().display());
    Ok(PathBuf::from(String::from_utf8(output.stdout)?.trim()))
}

/// `cargo pgrx package` for `major` into `target/xtask-packages/<name>-<profile>`, emptied
/// first so that no file of an older build lingers; returns that directory, whose files
/// sit at the paths of the shared install below it.
pub fn package(sh: &Shell, major: PgMajor, release: bool, name: &str) -> Result<PathBuf> {
    package_tree(sh, &project_root(), &crate::cargo_target_dir(), major, release, name)
}

/// [`package`] of the workspace at `tree` (the project's own, or an older release's
/// sources), built in `target_dir`.
pub fn package_tree(
    sh: &Shell,
    tree: &Path,
    target_dir: &Path,
    major: PgMajor,
    release: bool,
    name: &str,
) -> Result<PathBuf> {
    let profile = if release { "release" } else { "debug" };
    let out = project_root().join("target/xtask-packages").join(format!("{name}-{profile}"));
    if out.exists() {
        fs::remove_dir_all(&out)?;
    }
    let _dir = sh.push_dir(tree.join("extension/pg_automerge"));
    let _target = sh.push_env("CARGO_TARGET_DIR", target_dir);
    let pg_config = major.pg_config();
    let debug = (!release).then_some("--debug");
    cmd!(sh, "cargo pgrx package {debug...} --pg-config {pg_config} --out-dir {out}").run()?;
    Ok(out)
}

/// Installs `src` as `dest`: copied to a new file beside it, then renamed over it. A server
/// that mapped the old file keeps running the old code; nothing ever rewrites a file that
/// a process may have mapped.
pub fn install_file(src: &Path, dest: &Path) -> Result<()> {
    let bytes = fs::read(src).with_context(|| format!("reading {}", src.display()))?;
    write_file(dest, &bytes, Some(fs::metadata(src)?.permissions()))
}

/// Writes `bytes` as `dest` the way [`install_file`] does, with `permissions` (or the
/// default ones of a new file).
pub fn write_file(dest: &Path, bytes: &[u8], permissions: Option<fs::Permissions>) -> Result<()> {
    let dir = dest.parent().context("an installed file has a directory")?;
    fs::create_dir_all(dir)?;
    let name = dest.file_name().context("an installed file has a name")?.to_string_lossy();
    let beside = dir.join(format!(".{name}.xtask-{}", std::process::id()));
    fs::write(&beside, bytes).with_context(|| format!("writing {}", beside.display()))?;
    if let Some(permissions) = permissions {
        fs::set_permissions(&beside, permissions)?;
    }
    fs::rename(&beside, dest)
        .with_context(|| format!("renaming {} to {}", beside.display(), dest.display()))
}

pub fn files_below(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(files_below(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

/// Copies the tree `from` to `to` (which must not exist), leaving out pg_automerge's files:
/// symbolic links stay links; files are hard links where both are on one file system (every
/// install replaces files by rename, so a link never sees a file change), copies otherwise.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if entry.file_name().to_string_lossy().starts_with(EXTENSION) {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&source)?, &target)?;
        } else if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if fs::hard_link(&source, &target).is_err() {
            fs::copy(&source, &target)
                .with_context(|| format!("copying {} to {}", source.display(), target.display()))?;
        }
    }
    Ok(())
}

/// The file a running server mapped as `library`, from its postmaster's memory map: the
/// path and inode it was opened at, and whether it has been removed or replaced since.
pub struct MappedLibrary {
    pub path: PathBuf,
    pub inode: u64,
    pub deleted: bool,
}

pub fn mapped_library(pid: u32) -> Result<MappedLibrary> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("reading the memory map of process {pid}"))?;
    // address perms offset dev inode path [(deleted)]
    for line in maps.lines() {
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        let Some(path) = fields.get(5).map(|p| p.trim()) else { continue };
        if !path.ends_with(&format!("/{EXTENSION}.so"))
            && !path.ends_with(&format!("/{EXTENSION}.so (deleted)"))
        {
            continue;
        }
        let deleted = path.ends_with(" (deleted)");
        let path = PathBuf::from(path.trim_end_matches(" (deleted)"));
        let inode = fields[4].parse().context("the inode field of /proc/<pid>/maps")?;
        return Ok(MappedLibrary { path, inode, deleted });
    }
    bail!("process {pid} has no {EXTENSION}.so mapped")
}
