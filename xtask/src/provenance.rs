//! What produced a result: the command, the machine, the date and the versions, so that
//! every report under `results/` says where its figures come from.

use std::fs;

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

use crate::project_root;

pub struct Provenance {
    /// `YYYY-MM-DD`, UTC: reports are named by it.
    pub date: String,
    /// The checked-out commit, short: reports of the same day are told apart by it.
    pub commit: String,
    entries: Vec<(String, String)>,
}

impl Provenance {
    /// Reads the machine, toolchain and checkout now; `extra` adds versions the caller knows
    /// (the PostgreSQL server's, say).
    pub fn collect(sh: &Shell, command: &str, extra: &[(&str, String)]) -> Result<Provenance> {
        let date = cmd!(sh, "date -u +%F").quiet().read()?;
        let time = cmd!(sh, "date -u +%FT%TZ").quiet().read()?;
        let commit = cmd!(sh, "git rev-parse --short HEAD")
            .quiet()
            .read()
            .unwrap_or_else(|_| "unknown".into());
        let dirty =
            !cmd!(sh, "git status --porcelain --untracked-files=no").quiet().read()?.is_empty();
        let mut entries = vec![
            ("command".to_string(), format!("`{command}`")),
            ("date".to_string(), time),
            (
                "commit".to_string(),
                if dirty { format!("{commit} (with uncommitted changes)") } else { commit.clone() },
            ),
            ("machine".to_string(), machine()),
            ("operating system".to_string(), os_release()),
            ("rustc".to_string(), cmd!(sh, "rustc -V").quiet().read()?),
        ];
        for package in ["automerge", "pgrx", "criterion"] {
            entries.push((package.to_string(), locked_version(sh, package)?));
        }
        entries.extend(extra.iter().map(|(name, value)| (name.to_string(), value.clone())));
        Ok(Provenance { date, commit, entries })
    }

    /// Every entry but the command, for a report that shows its command on its own.
    pub fn entries_except_command(&self) -> Vec<(String, String)> {
        self.entries.iter().filter(|(name, _)| name != "command").cloned().collect()
    }

    /// A bullet list.
    pub fn markdown(&self) -> String {
        self.entries.iter().map(|(name, value)| format!("- {name}: {value}\n")).collect()
    }
}

/// CPU model, cores and memory, from /proc.
fn machine() -> String {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| {
            line.strip_prefix("model name")?.split_once(':').map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_kb: u64 = meminfo
        .lines()
        .find_map(|line| {
            line.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse().ok()
        })
        .unwrap_or(0);
    format!("{model}, {cores} cores, {:.0} GiB memory", memory_kb as f64 / (1 << 20) as f64)
}

fn os_release() -> String {
    let text = fs::read_to_string("/etc/os-release").unwrap_or_default();
    let pretty =
        text.lines().find_map(|line| line.strip_prefix("PRETTY_NAME=")).unwrap_or("unknown");
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{}, Linux {}", pretty.trim_matches('"'), kernel.trim())
}

/// The version of `package` that Cargo.lock pins.
pub fn locked_version(sh: &Shell, package: &str) -> Result<String> {
    let lock: toml::Table =
        sh.read_file(project_root().join("Cargo.lock"))?.parse().context("parsing Cargo.lock")?;
    lock.get("package")
        .and_then(|p| p.as_array())
        .into_iter()
        .flatten()
        .find(|p| p.get("name").and_then(|n| n.as_str()) == Some(package))
        .and_then(|p| p.get("version")?.as_str().map(str::to_string))
        .with_context(|| format!("Cargo.lock has no {package} package"))
}
