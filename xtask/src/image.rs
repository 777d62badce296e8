//! `cargo xtask image`: the pg_automerge Docker images (docker/Dockerfile), one per
//! PostgreSQL major, each installing the extension's Debian package on a public PostgreSQL
//! image or, where no registry is reachable, on a Debian base made here with debootstrap
//! (the Debian release that packages that major). Also starts the Docker engine when it is
//! missing, for `test` and `soak`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::debian_source::mirror;
use crate::flags::{ImageFlags, DEBOOTSTRAP_BASE};
use crate::package;
use crate::postgres::{cache_dir, is_root, PgMajor};
use crate::sync;
use crate::util::{note, step, Skippable};
use crate::{cargo_target_dir, project_root};

/// The major of the image the soak and the container tests run, and whose Debian base the
/// sync server's image is built on.
pub const IMAGE_MAJOR: PgMajor = PgMajor::Pg17;
const DOCKERD_LOG: &str = "/var/log/pg_automerge-dockerd.log";
const DOCKER_SOCKET: &str = "/var/run/docker.sock";

impl ImageFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        if let Skippable::Skipped(reason) = step("Docker engine", || ensure_docker(sh))? {
            bail!("{reason}");
        }
        if self.sync_server {
            let tag = build_sync_server(sh, &self.base, self.debug)?;
            println!(
                "built {tag}; run it with: docker run -d -p 3030:3030 -e DATABASE_URL=… {tag}"
            );
            return Ok(());
        }
        if self.base != DEBOOTSTRAP_BASE && self.pg.majors().len() > 1 {
            bail!("--base {} is an image of one major: name that major with --pg", self.base);
        }
        for major in self.pg.majors() {
            let tag = build(sh, major, &self.base, self.debug)?;
            println!(
                "built {tag}; run it with: docker run -d -p 5432:5432 -e POSTGRES_PASSWORD=… {tag}"
            );
        }
        Ok(())
    }
}

/// The image's tag for a major and build profile.
pub fn tag(major: PgMajor, debug: bool) -> String {
    format!("pg_automerge:pg{}{}", major.number(), if debug { "-debug" } else { "" })
}

/// Builds `major`'s image on `base` with the extension in the debug or release profile;
/// returns its tag.
pub fn build(sh: &Shell, major: PgMajor, base: &str, debug: bool) -> Result<String> {
    let profile = if debug { "debug" } else { "release" };
    let out = project_root().join(format!("target/docker/deb-{}-{profile}", major.pgrx_name()));
    let deb = step(&format!("{major}: the extension's package ({profile})"), || {
        package::extension_deb(sh, &project_root(), &cargo_target_dir(), major, !debug, &out)
    })?;
    build_with_package(sh, major, base, debug, &deb)
}

/// [`build`] with the extension's package `deb` of that profile, already made.
pub fn build_with_package(
    sh: &Shell,
    major: PgMajor,
    base: &str,
    debug: bool,
    deb: &Path,
) -> Result<String> {
    let base = base_image(sh, major, base)?;
    let context = build_context(sh, major, debug, deb)?;
    let tag = tag(major, debug);
    step(&format!("docker build {tag} on {base}"), || {
        let dockerfile = project_root().join("docker/Dockerfile");
        let base_arg = format!("BASE={base}");
        let major_arg = format!("PG_MAJOR={}", major.number());
        cmd!(sh, "docker build --quiet -f {dockerfile} --build-arg {base_arg} --build-arg {major_arg} -t {tag} {context}")
            .quiet()
            .ignore_stdout()
            .run()?;
        Ok(())
    })?;
    Ok(tag)
}

/// `base` as given, or `major`'s Debian base made with debootstrap when it names that.
fn base_image(sh: &Shell, major: PgMajor, base: &str) -> Result<String> {
    if base == DEBOOTSTRAP_BASE {
        step(&format!("{major}: Debian base image"), || debian_base(sh, major))
    } else {
        Ok(base.to_string())
    }
}

/// The sync server's image tag for a build profile.
fn sync_server_tag(debug: bool) -> String {
    format!("pg_automerge-sync-server:{}", if debug { "debug" } else { "latest" })
}

/// Builds the sync server's image (docker/sync-server.Dockerfile) with its debug or release
/// binary on `base` (the debootstrap Debian base by default); returns its tag.
pub fn build_sync_server(sh: &Shell, base: &str, debug: bool) -> Result<String> {
    let base = base_image(sh, IMAGE_MAJOR, base)?;
    let profile = if debug { "debug" } else { "release" };
    step(&format!("build the sync server ({profile})"), || sync::build_server(!debug))?;
    let context = project_root().join(format!("target/docker/context-sync-server-{profile}"));
    if context.exists() {
        fs::remove_dir_all(&context)?;
    }
    fs::create_dir_all(&context)?;
    let binary = "pg_automerge_sync_server";
    fs::copy(cargo_target_dir().join(profile).join(binary), context.join(binary))?;
    let tag = sync_server_tag(debug);
    step(&format!("docker build {tag} on {base}"), || {
        let dockerfile = project_root().join("docker/sync-server.Dockerfile");
        let base_arg = format!("BASE={base}");
        cmd!(sh, "docker build --quiet -f {dockerfile} --build-arg {base_arg} -t {tag} {context}")
            .quiet()
            .ignore_stdout()
            .run()?;
        Ok(())
    })?;
    Ok(tag)
}

/// Makes sure a Docker engine answers. As root, installs Debian's docker.io when `dockerd`
/// is missing and starts it in the background. Skipped, with the reason, when no engine
/// can run here, which the tests report as a skip.
pub fn ensure_docker(sh: &Shell) -> Result<Skippable<()>> {
    if engine_answers(sh) {
        note(format!("Docker engine {}", server_version(sh)));
        return Ok(Skippable::Ran(()));
    }
    if !is_root() {
        return Ok(Skippable::Skipped(
            "no Docker engine answers, and starting one needs root".into(),
        ));
    }
    if cmd!(sh, "which dockerd").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        note("installing Debian's docker.io");
        let _frontend = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
        cmd!(sh, "apt-get -qq update").quiet().run()?;
        cmd!(sh, "apt-get -qq install -y --no-install-recommends docker.io").quiet().run()?;
    }
    note(format!("starting dockerd (log: {DOCKERD_LOG})"));
    let log = fs::File::create(DOCKERD_LOG).with_context(|| format!("creating {DOCKERD_LOG}"))?;
    let mut dockerd = Command::new("dockerd");
    dockerd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
    // Its own process group, so that interrupting xtask leaves the engine running; and none
    // of xtask's inherited descriptors, such as the lock file `flock` holds for a caller,
    // which the engine would otherwise hold for as long as it runs.
    std::os::unix::process::CommandExt::process_group(&mut dockerd, 0);
    // SAFETY: close_range is async-signal-safe, and the closure touches nothing else.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut dockerd, || {
            if libc::close_range(3, libc::c_uint::MAX, 0) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    dockerd.spawn().context("starting dockerd")?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if Path::new(DOCKER_SOCKET).exists() && engine_answers(sh) {
            note(format!("Docker engine {} is up", server_version(sh)));
            return Ok(Skippable::Ran(()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let log_tail = fs::read_to_string(DOCKERD_LOG).unwrap_or_default();
    let log_tail: Vec<&str> = log_tail.lines().rev().take(5).collect();
    Ok(Skippable::Skipped(format!(
        "dockerd did not answer within 60 s; its log ends with: {}",
        log_tail.join(" | ")
    )))
}

fn engine_answers(sh: &Shell) -> bool {
    cmd!(sh, "docker info").quiet().ignore_stdout().ignore_stderr().run().is_ok()
}

fn server_version(sh: &Shell) -> String {
    let format = "{{.Server.Version}}";
    cmd!(sh, "docker version --format {format}").quiet().read().unwrap_or_default()
}

fn image_exists(sh: &Shell, tag: &str) -> bool {
    cmd!(sh, "docker image inspect {tag}").quiet().ignore_stdout().ignore_stderr().run().is_ok()
}

/// The Debian release that packages `major`: its base image has Debian's own build.
fn debian_suite(major: PgMajor) -> &'static str {
    match major {
        PgMajor::Pg15 => "bookworm",
        PgMajor::Pg17 => "trixie",
        PgMajor::Pg18 => "sid",
    }
}

/// Debian's PostgreSQL of `major` in a minimal Debian root made with debootstrap from the
/// machine's own mirror, imported as an image. Made once: an existing tag is kept.
pub fn debian_base(sh: &Shell, major: PgMajor) -> Result<String> {
    let suite = debian_suite(major);
    let base_tag = format!("pg_automerge-base:{suite}-postgresql-{}", major.number());
    if image_exists(sh, &base_tag) {
        note(format!("{base_tag} exists"));
        return Ok(base_tag);
    }
    if !is_root() {
        bail!("making the Debian base image needs root (debootstrap); or pass --base postgres:17");
    }
    if cmd!(sh, "which debootstrap").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        let _frontend = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
        cmd!(sh, "apt-get -qq install -y --no-install-recommends debootstrap").quiet().run()?;
    }
    let root = cache_dir().join("docker-base-root");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    let package = format!("--include=postgresql-{}", major.number());
    let mirror = mirror();
    note(format!("debootstrap {suite} with {package} from {mirror} (about a minute)"));
    cmd!(sh, "debootstrap --variant=minbase {package} {suite} {root} {mirror}")
        .quiet()
        .ignore_stdout()
        .run()?;
    // The package made a cluster of its own; the entrypoint makes ours in PGDATA.
    for made in ["var/lib/postgresql", "etc/postgresql"] {
        let major_dir = root.join(made).join(major.number().to_string());
        if major_dir.exists() {
            fs::remove_dir_all(major_dir)?;
        }
    }
    import(&root, &base_tag)?;
    fs::remove_dir_all(&root)?;
    Ok(base_tag)
}

/// `tar -c -C root . | docker import - tag`.
fn import(root: &Path, tag: &str) -> Result<()> {
    let mut tar = Command::new("tar")
        .arg("-c")
        .arg("-C")
        .arg(root)
        .arg(".")
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tar")?;
    let archive = tar.stdout.take().expect("stdout is piped");
    let imported = Command::new("docker")
        .args([
            "import",
            "--change",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "-",
            tag,
        ])
        .stdin(archive)
        .stdout(Stdio::null())
        .status()
        .context("starting docker import")?;
    let tarred = tar.wait()?;
    if !tarred.success() || !imported.success() {
        bail!(
            "importing {} as {tag} failed (tar {tarred}, docker import {imported})",
            root.display()
        );
    }
    Ok(())
}

/// target/docker/context-pg<major>-<profile>: what docker/Dockerfile copies in, the
/// extension's Debian package `deb` among them.
fn build_context(sh: &Shell, major: PgMajor, debug: bool, deb: &Path) -> Result<PathBuf> {
    let profile = if debug { "debug" } else { "release" };
    let release_flag = (!debug).then_some("--release");
    cmd!(sh, "cargo build --quiet {release_flag...} -p pg_automerge_entrypoint").run()?;
    let context =
        project_root().join(format!("target/docker/context-{}-{profile}", major.pgrx_name()));
    if context.exists() {
        fs::remove_dir_all(&context)?;
    }
    fs::create_dir_all(&context)?;
    fs::copy(deb, context.join("pg_automerge.deb"))?;
    fs::copy(project_root().join("docker/pg_automerge.conf"), context.join("pg_automerge.conf"))?;
    fs::copy(
        cargo_target_dir().join(profile).join("pg_automerge-entrypoint"),
        context.join("pg_automerge-entrypoint"),
    )?;
    Ok(context)
}
