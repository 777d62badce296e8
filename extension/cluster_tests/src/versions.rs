//! The extension's SQL versions. The current version is the workspace's (the control file's
//! `default_version = '@CARGO_VERSION@'`), and pgrx generates its install script from the
//! code. A released version's install script is frozen in `extension/pg_automerge/sql/` as
//! `pg_automerge--<version>.sql`; `pg_automerge--<from>--<to>.sql` files there are the
//! upgrade scripts, which `cargo pgrx install` copies beside the generated one (it copies
//! no install script of an older version).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::project_root;

const EXTENSION: &str = "pg_automerge";

/// Every released version, oldest first, with the SHA-256 of its frozen install script:
/// a released script never changes, and the tidy test holds it to this digest.
pub const RELEASES: &[(&str, &str)] = &[
    ("0.1.0", "42b79e05404de9f694b6fa3fe1a65a72f886d4aae61f264e93ecf74ed4d86bff"),
    ("0.2.0", "ff59eea797646745603ace46f4cb98de3726c984b77fe5eb34d4902f6e1712ea"),
    ("0.3.0", "f326a8be4ef0449bf20fd596de7151aa06ed1f1636a57ae270ffb4e867440069"),
    ("0.4.0", "995f13c14e6c6a5fc5842b7560123dc674a987da884be184812a11c5d27cf36c"),
    ("0.5.0", "52aea7c5ba53ca765bd9d56ad3d82d33011f5dfe4680b94b2aae79dd36d4b821"),
];

pub fn sql_dir() -> PathBuf {
    project_root().join("extension/pg_automerge/sql")
}

/// The workspace's version, which `cargo pgrx install` puts in the control file.
pub fn current() -> Result<String> {
    workspace_version(&project_root())
}

/// The `[workspace.package] version` of the workspace at `root` (this one, or an older
/// release's sources).
pub fn workspace_version(root: &Path) -> Result<String> {
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))?.parse()?;
    manifest
        .get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .with_context(|| {
            format!("{}/Cargo.toml has no [workspace.package] version", root.display())
        })
}

pub fn install_script_name(version: &str) -> String {
    format!("{EXTENSION}--{version}.sql")
}

pub fn upgrade_script_name(from: &str, to: &str) -> String {
    format!("{EXTENSION}--{from}--{to}.sql")
}

pub fn install_script(version: &str) -> Result<String> {
    let path = sql_dir().join(install_script_name(version));
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// The scripts in `sql/`, each as its versions: one for an install script, two (from, to)
/// for an upgrade script.
pub fn scripts() -> Result<Vec<Vec<String>>> {
    let mut scripts = Vec::new();
    for entry in std::fs::read_dir(sql_dir())? {
        let name = entry?.file_name().to_string_lossy().to_string();
        if let Some(versions) =
            name.strip_prefix(&format!("{EXTENSION}--")).and_then(|n| n.strip_suffix(".sql"))
        {
            scripts.push(versions.split("--").map(str::to_string).collect());
        }
    }
    scripts.sort();
    Ok(scripts)
}

/// The released versions, oldest first.
pub fn released() -> Vec<String> {
    RELEASES.iter().map(|(version, _)| version.to_string()).collect()
}

/// The upgrade scripts, as (from, to) pairs.
pub fn upgrades() -> Result<Vec<(String, String)>> {
    Ok(scripts()?
        .into_iter()
        .filter(|s| s.len() == 2)
        .map(|s| (s[0].clone(), s[1].clone()))
        .collect())
}

/// The chain of upgrade scripts that takes `from` to `to`, as ALTER EXTENSION … UPDATE
/// would find it (any path will do for the test), or None.
pub fn upgrade_path(from: &str, to: &str, upgrades: &[(String, String)]) -> Option<Vec<String>> {
    let mut paths = vec![vec![from.to_string()]];
    let mut seen = std::collections::BTreeSet::from([from.to_string()]);
    while let Some(path) = paths.pop() {
        let last = path.last().unwrap();
        if last == to {
            return Some(path);
        }
        for (a, b) in upgrades {
            if a == last && seen.insert(b.clone()) {
                let mut longer = path.clone();
                longer.push(b.clone());
                paths.push(longer);
            }
        }
    }
    None
}

/// `1.2.3` as numbers, so that versions sort as releases do (`0.10.0` after `0.9.0`).
pub fn numeric(version: &str) -> Vec<u64> {
    version.split(['.', '-']).map(|part| part.parse().unwrap_or(0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_upgrade_chains() {
        let upgrades: Vec<(String, String)> =
            [("0.1.0", "0.2.0"), ("0.2.0", "0.3.0"), ("0.1.0", "0.1.1")]
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
        assert_eq!(upgrade_path("0.1.0", "0.3.0", &upgrades).unwrap(), ["0.1.0", "0.2.0", "0.3.0"]);
        assert_eq!(upgrade_path("0.3.0", "0.3.0", &upgrades).unwrap(), ["0.3.0"]);
        assert_eq!(upgrade_path("0.1.1", "0.3.0", &upgrades), None);
    }

    #[test]
    fn orders_versions_numerically() {
        assert!(numeric("0.10.0") > numeric("0.9.1"));
    }
}
