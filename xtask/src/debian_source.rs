//! PostgreSQL majors that Debian 12 does not package are built from the upstream tarball
//! inside Debian's source package (the `.orig.tar.*`), fetched with a private apt
//! configuration so that the machine's own apt sources are never touched.
//!
//! Debian's mirrors are caches: an index can list a version whose files are gone. We then
//! fall back to earlier point releases of the same major, fetched by name from the pool,
//! and say which version we used. Either way the tarball's sha256 is checked against the
//! `.dsc` that names it.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::postgres::{cache_dir, PgMajor};
use crate::util::{note, run_logged, sha256_of};

const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// How many point releases below the newest listed one the fallback tries.
const FALLBACK_POINT_RELEASES: u32 = 6;

pub fn mirror() -> String {
    std::env::var("PG_AUTOMERGE_DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.to_string())
}

/// Builds `major` from Debian's source package unless the cache already has it; returns
/// the version that is installed.
pub fn ensure_built(sh: &Shell, major: PgMajor, package: &str, suites: &[&str]) -> Result<String> {
    let root = cache_dir().join(format!("pg{}", major.number()));
    let stamp = root.join("built-version");
    if major.pg_config().exists() {
        if let Ok(version) = fs::read_to_string(&stamp) {
            note(format!(
                "{major} {} already built in {}",
                version.trim(),
                major.build_prefix().display()
            ));
            return Ok(version.trim().to_string());
        }
    }
    let download = root.join("download");
    fs::create_dir_all(&download)?;
    let source = fetch(sh, package, suites, &download)?;
    note(format!("building {package} {} (about 3 minutes)", source.version));
    build(&source, &root, &major.build_prefix())?;
    fs::write(&stamp, &source.upstream_version)?;
    Ok(source.upstream_version)
}

struct Source {
    /// The Debian version, such as `17.11-0+deb13u1`.
    version: String,
    /// The upstream version, such as `17.11`.
    upstream_version: String,
    tarball: PathBuf,
}

fn fetch(sh: &Shell, package: &str, suites: &[&str], into: &Path) -> Result<Source> {
    let apt = PrivateApt::new(package, suites)?;
    apt.update(sh)?;
    let listed = apt.listed_versions(sh, package)?;
    if listed.is_empty() {
        bail!("no version of {package} is listed in Debian's {} sources", suites.join(", "));
    }
    note(format!("{package} versions listed: {}", listed.join(", ")));
    let mut tried = Vec::new();
    for version in &listed {
        match apt.download(sh, package, version, into) {
            Ok(()) => return verified(package, version, into),
            Err(err) => {
                note(format!("{package} {version} is listed but could not be downloaded: {err:#}"));
                tried.push(version.clone());
            }
        }
    }
    for version in earlier_point_releases(&listed[0]) {
        if download_from_pool(sh, package, &version, into).is_ok() {
            note(format!(
                "using {package} {version}, an earlier point release still on the mirror \
                 (its .dsc comes from the pool, not from a signed index)"
            ));
            return verified(package, &version, into);
        }
        tried.push(version);
    }
    bail!("could not download the source of {package}; tried {}", tried.join(", "))
}

/// An apt configuration of our own, in the cache, listing only the source suites we need.
struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    fn new(package: &str, suites: &[&str]) -> Result<Self> {
        let dir = cache_dir().join("apt").join(package);
        fs::create_dir_all(dir.join("lists/partial"))?;
        fs::create_dir_all(dir.join("cache/archives/partial"))?;
        let mirror = mirror();
        let sources: String = suites
            .iter()
            .map(|suite| {
                // Security updates live in their own archive beside the main one.
                let archive = if suite.ends_with("-security") {
                    mirror.replace("/debian", "/debian-security")
                } else {
                    mirror.clone()
                };
                format!("deb-src [signed-by={KEYRING}] {archive} {suite} main\n")
            })
            .collect();
        fs::write(dir.join("sources.list"), sources)?;
        Ok(PrivateApt { dir })
    }

    fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        vec![
            "-o".into(),
            format!("Dir::Etc::sourcelist={d}/sources.list"),
            "-o".into(),
            "Dir::Etc::sourceparts=-".into(),
            "-o".into(),
            format!("Dir::State::Lists={d}/lists"),
            "-o".into(),
            format!("Dir::Cache={d}/cache"),
            "-o".into(),
            "APT::Sandbox::User=root".into(),
        ]
    }

    fn update(&self, sh: &Shell) -> Result<()> {
        let options = self.options();
        cmd!(sh, "apt-get {options...} -qq update").quiet().ignore_stdout().run()?;
        Ok(())
    }

    /// The versions the index lists, newest first.
    fn listed_versions(&self, sh: &Shell, package: &str) -> Result<Vec<String>> {
        let options = self.options();
        let showsrc = cmd!(sh, "apt-cache {options...} showsrc {package}").quiet().read()?;
        let mut versions: Vec<String> = Vec::new();
        let mut package_matches = false;
        for line in showsrc.lines() {
            if let Some(name) = line.strip_prefix("Package: ") {
                package_matches = name.trim() == package;
            } else if let Some(version) = line.strip_prefix("Version: ") {
                let version = version.trim().to_string();
                if package_matches && !versions.contains(&version) {
                    versions.push(version);
                }
            }
        }
        versions.sort_by(|a, b| compare_debian_versions(sh, b, a));
        Ok(versions)
    }

    fn download(&self, sh: &Shell, package: &str, version: &str, into: &Path) -> Result<()> {
        let options = self.options();
        let _dir = sh.push_dir(into);
        let spec = format!("{package}={version}");
        let output = cmd!(sh, "apt-get {options...} -qq source --download-only {spec}")
            .quiet()
            .ignore_status()
            .output()?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = stderr.lines().find(|l| l.starts_with("E:")).unwrap_or("apt-get failed");
            bail!("{reason}");
        }
        Ok(())
    }
}

fn compare_debian_versions(sh: &Shell, a: &str, b: &str) -> std::cmp::Ordering {
    let greater =
        cmd!(sh, "dpkg --compare-versions {a} gt {b}").quiet().ignore_stderr().run().is_ok();
    let equal = a == b;
    match (equal, greater) {
        (true, _) => std::cmp::Ordering::Equal,
        (false, true) => std::cmp::Ordering::Greater,
        (false, false) => std::cmp::Ordering::Less,
    }
}

/// `17.12-0+deb13u1` → `17.11-0+deb13u1`, `17.11-1`, … : earlier point releases of the
/// same major, with the Debian revisions such uploads usually carry.
fn earlier_point_releases(version: &str) -> Vec<String> {
    let Some((upstream, revision)) = version.split_once('-') else { return Vec::new() };
    let Some((major, minor)) = upstream.split_once('.') else { return Vec::new() };
    let Ok(minor) = minor.parse::<u32>() else { return Vec::new() };
    let mut revisions = vec![revision.to_string()];
    for usual in ["1", "2", "3", "0+deb13u1", "0+deb13u2"] {
        if !revisions.iter().any(|r| r == usual) {
            revisions.push(usual.to_string());
        }
    }
    (minor.saturating_sub(FALLBACK_POINT_RELEASES)..minor)
        .rev()
        .flat_map(|m| revisions.iter().map(move |r| format!("{major}.{m}-{r}")))
        .collect()
}

fn download_from_pool(sh: &Shell, package: &str, version: &str, into: &Path) -> Result<()> {
    let pool = format!("{}/pool/main/{}/{package}", mirror(), &package[..1]);
    let dsc = dsc_name(package, version);
    fetch_url(sh, &format!("{pool}/{}", dsc.replace('+', "%2b")), &into.join(&dsc))?;
    let (tarball, _) = orig_checksum(&into.join(&dsc))?;
    fetch_url(sh, &format!("{pool}/{tarball}"), &into.join(&tarball))
}

fn fetch_url(sh: &Shell, url: &str, dest: &Path) -> Result<()> {
    let output = cmd!(sh, "/usr/lib/apt/apt-helper download-file {url} {dest}")
        .quiet()
        .ignore_status()
        .output()?;
    if !output.status.success() {
        bail!("{url}: not served");
    }
    Ok(())
}

fn dsc_name(package: &str, version: &str) -> String {
    let without_epoch = version.split_once(':').map_or(version, |(_, v)| v);
    format!("{package}_{without_epoch}.dsc")
}

/// The `.orig.tar.*` file a `.dsc` names, with its sha256.
fn orig_checksum(dsc: &Path) -> Result<(String, String)> {
    let text = fs::read_to_string(dsc).with_context(|| format!("reading {}", dsc.display()))?;
    let mut in_sha256 = false;
    for line in text.lines() {
        if line.starts_with("Checksums-Sha256:") {
            in_sha256 = true;
        } else if in_sha256 && line.starts_with(' ') {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if let [sha, _size, name] = fields[..] {
                if name.contains(".orig.tar.") {
                    return Ok((name.to_string(), sha.to_string()));
                }
            }
        } else {
            in_sha256 = false;
        }
    }
    bail!("{} names no .orig.tar.* with a sha256", dsc.display())
}

fn verified(package: &str, version: &str, dir: &Path) -> Result<Source> {
    let (tarball, expected) = orig_checksum(&dir.join(dsc_name(package, version)))?;
    let path = dir.join(&tarball);
    let actual = sha256_of(&path)?;
    if actual != expected {
        fs::remove_file(&path)?;
        bail!("{tarball}: sha256 {actual} does not match the .dsc's {expected}");
    }
    note(format!("{tarball}: sha256 matches the .dsc"));
    let upstream_version = version.split_once('-').map_or(version, |(u, _)| u).to_string();
    Ok(Source { version: version.to_string(), upstream_version, tarball: path })
}

fn build(source: &Source, root: &Path, prefix: &Path) -> Result<()> {
    let src = root.join("src");
    if src.exists() {
        fs::remove_dir_all(&src)?;
    }
    fs::create_dir_all(&src)?;
    let log = root.join("build.log");
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get()).to_string();
    let prefix_arg = format!("--prefix={}", prefix.display());
    let steps: [(&str, Vec<&str>); 4] = [
        ("tar", vec!["-xf", source.tarball.to_str().unwrap(), "--strip-components=1"]),
        // cassert makes the test clusters catch an extension's misuse of Postgres' APIs.
        (
            "./configure",
            vec![&prefix_arg, "--enable-debug", "--enable-cassert", "--without-icu", "--with-lz4"],
        ),
        ("make", vec!["-j", &jobs]),
        ("make", vec!["install"]),
    ];
    run_logged(&steps, &src, &log)?;
    fs::remove_dir_all(&src)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earlier_point_releases_count_down_from_the_listed_one() {
        let candidates = earlier_point_releases("17.12-0+deb13u1");
        assert_eq!(candidates[0], "17.11-0+deb13u1");
        assert!(candidates.contains(&"17.6-1".to_string()));
        assert!(!candidates.iter().any(|c| c.starts_with("17.12") || c.starts_with("17.5-")));
    }

    #[test]
    fn dsc_names_drop_the_epoch() {
        assert_eq!(dsc_name("postgresql-18", "1:18.6-3"), "postgresql-18_18.6-3.dsc");
    }

    #[test]
    fn finds_the_orig_tarball_in_a_dsc() {
        let dir = std::env::temp_dir().join(format!("xtask-dsc-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dsc = dir.join("p.dsc");
        fs::write(
            &dsc,
            "Format: 3.0 (quilt)\nChecksums-Sha1:\n aa 1 p_1.0.orig.tar.bz2\nChecksums-Sha256:\n \
             bb 1 p_1.0-1.debian.tar.xz\n cc 2 p_1.0.orig.tar.bz2\nFiles:\n dd 1 x\n",
        )
        .unwrap();
        assert_eq!(orig_checksum(&dsc).unwrap(), ("p_1.0.orig.tar.bz2".into(), "cc".into()));
        fs::remove_dir_all(dir).unwrap();
    }
}
