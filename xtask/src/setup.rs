//! `cargo xtask setup`: install what building and testing need, and only what is missing.
//! Every step is idempotent, so `test` and `run` call it each time at little cost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::citus;
use crate::debian_source;
use crate::flags::SetupFlags;
use crate::postgres::{is_root, PgMajor, Provenance};
use crate::util::{note, step};

/// Debian packages needed to build Postgres and pgrx extensions and to run test clusters
/// as an unprivileged user. The PostgreSQL 15 packages come from `PgMajor::provenance`.
const BUILD_PACKAGES: &[&str] = &[
    "build-essential",
    "pkg-config",
    "clang",
    "libclang-dev",
    "bison",
    "flex",
    "libreadline-dev",
    "zlib1g-dev",
    "liblz4-dev",
    "libssl-dev",
    "bzip2",
    "xz-utils",
    "ca-certificates",
    "debian-archive-keyring",
    "sudo",
    // perf, for `cargo xtask bench --sync --profile`.
    "linux-perf",
];

impl SetupFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        step("check the platform", check_platform)?;
        step("Debian packages", || install_packages(sh))?;
        step("cargo-pgrx", || install_cargo_pgrx(sh))?;
        let mut pg_configs = BTreeMap::new();
        for major in self.pg.majors() {
            let pg_config = step(&format!("{major}"), || provide_major(sh, major))?;
            pg_configs.insert(major, pg_config);
            if citus::MAJORS.contains(&major) {
                step(&format!("Citus {} for {major}", citus::VERSION), || {
                    citus::ensure_built(major)
                })?;
            }
        }
        step("pgrx configuration", || configure_pgrx(sh, &pg_configs))
    }
}

fn check_platform() -> Result<()> {
    if !cfg!(target_os = "linux") || !Path::new("/etc/debian_version").exists() {
        bail!(
            "setup installs what it needs on Debian 12 only. On this machine, provide yourself: \
             {} for PostgreSQL 15, 17 and 18 with their server headers; clang and libclang; \
             cargo-pgrx at the pgrx version of Cargo.lock; then run `cargo pgrx init --pg15 \
             <pg_config> --pg17 <pg_config> --pg18 <pg_config>`",
            "pg_config"
        );
    }
    note(format!(
        "Debian {}, running as {}",
        std::fs::read_to_string("/etc/debian_version")?.trim(),
        if is_root() { "root" } else { "an unprivileged user" }
    ));
    Ok(())
}

fn required_packages() -> Vec<&'static str> {
    let mut packages = BUILD_PACKAGES.to_vec();
    packages.extend(citus::BUILD_PACKAGES.iter().filter(|p| !BUILD_PACKAGES.contains(p)));
    for major in PgMajor::ALL {
        if let Provenance::DebianPackages { packages: own, .. } = major.provenance() {
            packages.extend_from_slice(own);
        }
    }
    packages
}

fn is_installed(sh: &Shell, package: &str) -> bool {
    let format = "-f=${Status}";
    cmd!(sh, "dpkg-query -W {format} {package}")
        .quiet()
        .ignore_stderr()
        .read()
        .is_ok_and(|status| status == "install ok installed")
}

fn install_packages(sh: &Shell) -> Result<()> {
    let missing: Vec<&str> =
        required_packages().into_iter().filter(|p| !is_installed(sh, p)).collect();
    if missing.is_empty() {
        note("all installed");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages: {}. Install them as root: apt-get install {}",
            missing.join(" "),
            missing.join(" ")
        );
    }
    note(format!("installing {}", missing.join(" ")));
    let _frontend = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
    cmd!(sh, "apt-get -qq update").quiet().run()?;
    cmd!(sh, "apt-get -qq install -y --no-install-recommends {missing...}").quiet().run()?;
    Ok(())
}

fn install_cargo_pgrx(sh: &Shell) -> Result<()> {
    // cargo-pgrx must match the pgrx that Cargo.lock pins exactly.
    let wanted = crate::provenance::locked_version(sh, "pgrx")?;
    let installed =
        cmd!(sh, "cargo pgrx --version").quiet().ignore_stderr().read().unwrap_or_default();
    if installed.split_whitespace().last() == Some(wanted.as_str()) {
        note(format!("cargo-pgrx {wanted} already installed"));
        return Ok(());
    }
    note(format!("installing cargo-pgrx {wanted} (about 3 minutes)"));
    cmd!(sh, "cargo install cargo-pgrx --version ={wanted} --locked --quiet").run()?;
    Ok(())
}

fn provide_major(sh: &Shell, major: PgMajor) -> Result<PathBuf> {
    match major.provenance() {
        Provenance::DebianPackages { .. } => {
            let pg_config = major.pg_config();
            if !pg_config.exists() {
                bail!("{} is missing although its packages are installed", pg_config.display());
            }
            let version = cmd!(sh, "{pg_config} --version").quiet().read()?;
            note(format!("{version} from Debian's packages"));
        }
        Provenance::DebianSource { package, suites } => {
            if !is_root() && !major.pg_config().exists() {
                bail!(
                    "{major} must be built from Debian's source package {package}, which needs \
                     root for apt; run `cargo xtask setup` as root once, or build it yourself \
                     with --prefix={}",
                    major.build_prefix().display()
                );
            }
            let version = debian_source::ensure_built(sh, major, package, suites)?;
            note(format!("{major} is {version}, built from Debian's {package} source package"));
        }
    }
    Ok(major.pg_config())
}

fn pgrx_config_path() -> Result<PathBuf> {
    if let Some(home) = std::env::var_os("PGRX_HOME") {
        return Ok(PathBuf::from(home).join("config.toml"));
    }
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".pgrx/config.toml"))
}

/// Runs `cargo pgrx init` only when a pg_config path changed: re-running it makes pgrx
/// rebuild its bindings.
fn configure_pgrx(sh: &Shell, pg_configs: &BTreeMap<PgMajor, PathBuf>) -> Result<()> {
    let config_path = pgrx_config_path()?;
    let current: toml::Table = std::fs::read_to_string(&config_path)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_default();
    let configured = current.get("configs").and_then(|c| c.as_table());
    let up_to_date = pg_configs.iter().all(|(major, path)| {
        configured.and_then(|c| c.get(&major.pgrx_name())).and_then(|v| v.as_str()) == path.to_str()
    });
    if up_to_date {
        note(format!("{} already names these pg_configs", config_path.display()));
        return Ok(());
    }
    // Keep the majors configured before that this run did not ask for.
    let mut args = Vec::new();
    for major in PgMajor::ALL {
        let path = match pg_configs.get(&major) {
            Some(path) => path.display().to_string(),
            None => {
                match configured.and_then(|c| c.get(&major.pgrx_name())).and_then(|v| v.as_str()) {
                    Some(path) if Path::new(path).exists() => path.to_string(),
                    _ => continue,
                }
            }
        };
        args.push(format!("--{}", major.pgrx_name()));
        args.push(path);
    }
    cmd!(sh, "cargo pgrx init {args...}").run()?;
    Ok(())
}
