//! `cargo xtask package`: Debian packages made with dpkg-deb from trees laid out here. One
//! of the extension per PostgreSQL major, named and laid out as PGDG's extension packages
//! are (`postgresql-17-pgvector`: the library in /usr/lib/postgresql/17/lib, the control
//! file and scripts in /usr/share/postgresql/17/extension) and depending on that major's
//! server package; and one of the sync server, with a systemd unit, a config file and a
//! system user of its own (sync_server/debian/). docs/install.md says how to use them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use cluster_tests::versions;
use xshell::{cmd, Shell};

use crate::flags::PackageFlags;
use crate::install::{self, files_below};
use crate::postgres::{cache_dir, PgMajor};
use crate::util::{note, step};
use crate::{cargo_target_dir, project_root, sync};

/// The sync server's package.
pub const SYNC_SERVER_PACKAGE: &str = "pg-automerge-sync-server";

/// The release before the workspace's version, whose packages the install tests upgrade
/// from, and the commit it was released at (the parent of the commit that began the next
/// version). A new release moves this to the one just made.
pub const PREVIOUS_RELEASE: (&str, &str) = ("0.5.0", "2c35f437e57ec5740ab8551661944ab675f6260e");

/// Where `cargo xtask package` puts the packages unless told otherwise.
pub fn default_out_dir() -> PathBuf {
    project_root().join("target/packages")
}

/// The extension's package for `major`, named as PGDG names extension packages.
pub fn extension_package(major: PgMajor) -> String {
    format!("postgresql-{}-pg-automerge", major.number())
}

/// A package's file name, as Debian names them.
pub fn deb_file_name(package: &str, version: &str, architecture: &str) -> String {
    format!("{package}_{version}_{architecture}.deb")
}

impl PackageFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        let out = self.out.clone().unwrap_or_else(default_out_dir);
        let release = !self.debug;
        let mut made = Vec::new();
        for major in self.pg.majors() {
            made.push(step(&format!("{major}: {}", extension_package(major)), || {
                extension_deb(sh, &project_root(), &cargo_target_dir(), major, release, &out)
            })?);
        }
        made.push(step(SYNC_SERVER_PACKAGE, || sync_server_deb(sh, release, &out))?);
        for deb in made {
            println!("{}", deb.display());
        }
        Ok(())
    }
}

/// The packages of the extension and of the sync server the install tests use: the
/// workspace's, and the previous release's extension to upgrade from.
pub struct TestPackages {
    pub current: Vec<(PgMajor, PathBuf)>,
    pub previous: Vec<(PgMajor, PathBuf)>,
    pub sync_server: PathBuf,
}

impl TestPackages {
    pub fn build(sh: &Shell, majors: &[PgMajor]) -> Result<TestPackages> {
        let out = project_root().join("target/packages-debug");
        let mut current = Vec::new();
        for &major in majors {
            current.push((
                major,
                extension_deb(sh, &project_root(), &cargo_target_dir(), major, false, &out)?,
            ));
        }
        let sync_server = sync_server_deb(sh, false, &out)?;
        let mut previous = Vec::new();
        for &major in majors {
            previous.push((major, previous_release_deb(sh, major)?));
        }
        // Only needed until the previous release's packages are kept.
        let previous_target = previous_release_target();
        if previous_target.exists() {
            fs::remove_dir_all(&previous_target)?;
        }
        Ok(TestPackages { current, previous, sync_server })
    }
}

/// The previous release's extension package for `major`, in its debug profile: built from
/// that release's commit once per machine and kept in the cache.
fn previous_release_deb(sh: &Shell, major: PgMajor) -> Result<PathBuf> {
    let (version, commit) = PREVIOUS_RELEASE;
    let kept = cache_dir().join("packages").join(format!("{version}-{}-debug", &commit[..12]));
    let deb = kept.join(deb_file_name(&extension_package(major), version, &architecture(sh)?));
    if deb.exists() {
        note(format!("{} is kept from an earlier run", deb.display()));
        return Ok(deb);
    }
    let tree = project_root().join("target/previous-release").join(version);
    if !tree.join("Cargo.toml").exists() {
        export_commit(sh, commit, &tree)?;
    }
    // Its own target directory: a cdylib's file has no hash in its name, so the two
    // versions' builds in one directory would each take the other's library for fresh.
    // Seeded with a copy of ours, whose dependencies it shares, to build only its crates.
    let target = previous_release_target();
    if !target.join("debug").exists() {
        fs::create_dir_all(&target)?;
        let ours = cargo_target_dir().join("debug");
        note("copying target/debug to build the previous release beside it");
        cmd!(sh, "cp -a {ours} {target}").quiet().run()?;
    }
    let made = extension_deb(sh, &tree, &target, major, false, &kept)?;
    assert_eq!(made, deb, "the previous release's package has the expected name");
    Ok(deb)
}

/// Where the previous release is built (see [`previous_release_deb`]).
fn previous_release_target() -> PathBuf {
    project_root().join("target/previous-release-target")
}

/// The files of `commit` in `dir`, from this clone's history.
fn export_commit(sh: &Shell, commit: &str, dir: &Path) -> Result<()> {
    let root = project_root();
    let object = format!("{commit}^{{commit}}");
    let known = cmd!(sh, "git -C {root} cat-file -e {object}").quiet().run();
    if known.is_err() {
        bail!(
            "commit {commit} (release {}) is not in this clone's history; a shallow clone \
             needs `git fetch --unshallow` for the install tests' upgrade from it",
            PREVIOUS_RELEASE.0
        );
    }
    let partial = dir.with_extension("partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)?;
    }
    fs::create_dir_all(&partial)?;
    let mut archive = Command::new("git")
        .args(["-C"])
        .arg(&root)
        .args(["archive", "--format=tar", commit])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting git archive")?;
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&partial)
        .stdin(archive.stdout.take().expect("stdout is piped"))
        .status()
        .context("starting tar")?;
    if !archive.wait()?.success() || !tar.success() {
        bail!("exporting commit {commit} into {} failed", partial.display());
    }
    fs::rename(&partial, dir)?;
    Ok(())
}

/// Builds the extension of the workspace at `tree` for `major` in `target_dir` and makes
/// its package in `out`; returns the package's path.
pub fn extension_deb(
    sh: &Shell,
    tree: &Path,
    target_dir: &Path,
    major: PgMajor,
    release: bool,
    out: &Path,
) -> Result<PathBuf> {
    let version = versions::workspace_version(tree)?;
    let name = format!("deb-{version}-{}", major.pgrx_name());
    let built = install::package_tree(sh, tree, target_dir, major, release, &name)?;
    let package = extension_package(major);
    let root = staging_dir(&package)?;
    let number = major.number();
    let lib = root.join(format!("usr/lib/postgresql/{number}/lib"));
    let extension = root.join(format!("usr/share/postgresql/{number}/extension"));
    fs::create_dir_all(&lib)?;
    fs::create_dir_all(&extension)?;
    // pgrx lays the files out at the paths of the pg_config it built against, which for
    // our own builds of 17 and 18 are not Debian's: place them by kind instead.
    for file in files_below(&built)? {
        let name = file.file_name().context("a packaged file has a name")?;
        let dir = if file.extension().is_some_and(|e| e == "so") { &lib } else { &extension };
        fs::copy(&file, dir.join(name))?;
    }
    write_copyright(&root, &package)?;
    let control = format!(
        "Depends: postgresql-{number}, libc6 (>= 2.34), libgcc-s1\n\
         Section: database\n\
         Priority: optional\n\
         Description: Automerge CRDT documents as a PostgreSQL {number} column type\n \
         pg_automerge stores Automerge documents in an `automerge` column: validated on\n \
         the way in, read as jsonb without a load, merged and written incrementally.\n \
         Add pg_automerge to shared_preload_libraries, then CREATE EXTENSION pg_automerge.\n"
    );
    build_deb(sh, &root, &control, &package, &version, out)
}

/// Builds the sync server and makes its package in `out`; returns the package's path.
pub fn sync_server_deb(sh: &Shell, release: bool, out: &Path) -> Result<PathBuf> {
    sync::build_server(release)?;
    let profile = if release { "release" } else { "debug" };
    let version = versions::current()?;
    let root = staging_dir(SYNC_SERVER_PACKAGE)?;
    let debian = project_root().join("sync_server/debian");
    let placed = [
        (cargo_target_dir().join(profile).join("pg_automerge_sync_server"), "usr/bin"),
        (debian.join("pg-automerge-sync-server.service"), "usr/lib/systemd/system"),
        (debian.join("sync-server.conf"), "etc/pg-automerge-sync-server"),
        (project_root().join("docs/sync-server.md"), "usr/share/doc/pg-automerge-sync-server"),
    ];
    for (file, dir) in placed {
        let dir = root.join(dir);
        fs::create_dir_all(&dir)?;
        let name = file.file_name().context("a packaged file has a name")?;
        fs::copy(&file, dir.join(name)).with_context(|| format!("copying {}", file.display()))?;
    }
    write_copyright(&root, SYNC_SERVER_PACKAGE)?;
    fs::create_dir_all(root.join("DEBIAN"))?;
    fs::copy(debian.join("postinst"), root.join("DEBIAN/postinst"))?;
    fs::write(root.join("DEBIAN/conffiles"), "/etc/pg-automerge-sync-server/sync-server.conf\n")?;
    // The server needs the extension in its database's server, of whichever major.
    let extensions: Vec<String> = PgMajor::ALL.iter().map(|&m| extension_package(m)).collect();
    let control = format!(
        "Depends: libc6 (>= 2.34), libgcc-s1, passwd\n\
         Suggests: {}\n\
         Section: net\n\
         Priority: optional\n\
         Description: automerge-repo sync server whose storage is PostgreSQL (pg_automerge)\n \
         Serves automerge-repo clients over WebSocket and keeps every document as an\n \
         automerge value in PostgreSQL, where SQL can query and write it. Runs as a\n \
         systemd service; configure it in /etc/pg-automerge-sync-server/sync-server.conf.\n",
        extensions.join(" | ")
    );
    build_deb(sh, &root, &control, SYNC_SERVER_PACKAGE, &version, out)
}

/// An empty directory to lay out `package`'s files in.
fn staging_dir(package: &str) -> Result<PathBuf> {
    let root = project_root().join("target/deb-staging").join(package);
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(&root)?;
    Ok(root)
}

/// Debian's copyright file of `package`: the project's licence.
fn write_copyright(root: &Path, package: &str) -> Result<()> {
    let doc = root.join("usr/share/doc").join(package);
    fs::create_dir_all(&doc)?;
    let license = fs::read_to_string(project_root().join("LICENSE"))?;
    let text = format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: pg_automerge\n\n\
         Files: *\n\
         License: MIT\n {}\n",
        license.trim().replace("\n\n", "\n.\n").replace('\n', "\n ")
    );
    fs::write(doc.join("copyright"), text)?;
    Ok(())
}

/// `dpkg-deb --build` of `root` into `out`, its control file the fields every package has
/// followed by `fields`; returns the package's path.
fn build_deb(
    sh: &Shell,
    root: &Path,
    fields: &str,
    package: &str,
    version: &str,
    out: &Path,
) -> Result<PathBuf> {
    let control = format!(
        "Package: {package}\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: The pg_automerge developers <pg_automerge@localhost>\n\
         Installed-Size: {size}\n\
         {fields}",
        arch = architecture(sh)?,
        size = installed_size_kib(root)?,
    );
    fs::create_dir_all(root.join("DEBIAN"))?;
    fs::write(root.join("DEBIAN/control"), control)?;
    fs::create_dir_all(out)?;
    let deb = out.join(deb_file_name(package, version, &architecture(sh)?));
    // zstd: every system whose glibc the binaries need has a dpkg that reads it, and it
    // packs a debug build's 130 MB library in seconds where xz takes minutes.
    cmd!(sh, "dpkg-deb --root-owner-group -Zzstd --build {root} {deb}")
        .quiet()
        .ignore_stdout()
        .run()
        .with_context(|| format!("dpkg-deb --build {}", root.display()))?;
    fs::remove_dir_all(root)?;
    Ok(deb)
}

/// The sum of the files' sizes below `root`, in KiB, as Debian's Installed-Size.
fn installed_size_kib(root: &Path) -> Result<u64> {
    let mut bytes = 0;
    for file in files_below(root)? {
        bytes += fs::metadata(&file)?.len();
    }
    Ok(bytes.div_ceil(1024))
}

/// This machine's Debian architecture (`amd64`).
pub fn architecture(sh: &Shell) -> Result<String> {
    Ok(cmd!(sh, "dpkg --print-architecture").quiet().read()?.trim().to_string())
}
