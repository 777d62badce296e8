//! `cargo xtask soak`: builds the image (release), then runs the soak crate's driver in
//! release against it (its configuration as a JSON argument: xtask does not link the soak
//! crate, which would make every xtask build compile testcontainers and plotters), which writes results/soak-<date>[-variant]/ and fails when an
//! invariant does not hold.

use std::process::Command;

use anyhow::{bail, Result};
use fixtures::load_mix::{self, FULL_LENGTH_SECS};
use xshell::{cmd, Shell};

use crate::cluster::checkout_id;
use crate::flags::{OnOff, SoakFlags, DEFAULT_MAX_LOAD_MEMORY};
use crate::image;
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, step, Skippable};

const INITIAL_DOCUMENTS: u64 = 200;

impl SoakFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        if let Skippable::Skipped(reason) = step("Docker engine", || image::ensure_docker(sh))? {
            bail!("the soak needs a Docker engine: {reason}");
        }
        let tag = image::build(sh, image::IMAGE_MAJOR, &self.base, false)?;
        // The report's setup table: the machine, toolchain and checkout, as every report says them.
        let extension_build =
            format!("release, against PostgreSQL {} headers", image::IMAGE_MAJOR.number());
        let provenance =
            Provenance::collect(sh, &command_line(), &[("extension build", extension_build)])?;
        let name = results_name(self, &provenance.date, &provenance.commit);
        let run = run_label("soak");
        remove_leftover_containers(sh, &run)?;
        let results_dir = project_root().join("results").join(&name);
        let growth = load_mix::growth(self.duration.as_secs());
        let config = serde_json::json!({
            "image": tag,
            "run": run,
            "duration_secs": self.duration.as_secs(),
            "memory_bytes": self.memory,
            "connections": self.connections,
            "gin_fastupdate": self.gin_fastupdate == OnOff::On,
            "compactor": self.compactor == OnOff::On,
            "trim_threshold": self.trim_threshold,
            "max_load_memory": self.max_load_memory,
            "initial_documents": INITIAL_DOCUMENTS,
            "final_documents": INITIAL_DOCUMENTS + growth,
            "documents": "WithLarge",
            "sample_interval_secs": 5,
            "results_dir": results_dir,
            "command": command_line(),
            "build": provenance.entries_except_command(),
            "progress": true,
        });
        step(&format!("soak for {} s against {tag}", self.duration.as_secs()), || {
            let status = Command::new("cargo")
                .args(["run", "--quiet", "--release", "-p", "soak", "--"])
                .arg(config.to_string())
                .current_dir(project_root())
                .status();
            remove_leftover_containers(sh, &run)?;
            let status = status?;
            if !status.success() {
                bail!("the soak failed ({status}); see {}", results_dir.display());
            }
            Ok(())
        })
    }
}

/// `soak-<date>-<commit>` for the default run (two runs of a day at one commit share it);
/// other settings add what differs.
fn results_name(flags: &SoakFlags, date: &str, commit: &str) -> String {
    let mut name = format!("soak-{date}-{commit}");
    if flags.gin_fastupdate == OnOff::Off {
        name.push_str("-gin-fastupdate-off");
    }
    if flags.compactor == OnOff::Off {
        name.push_str("-compactor-off");
    }
    if flags.duration.as_secs() != FULL_LENGTH_SECS {
        name.push_str(&format!("-{}m", flags.duration.as_secs().div_ceil(60)));
    }
    if flags.memory != 4 << 30 {
        name.push_str(&format!("-{}mb", flags.memory >> 20));
    }
    if flags.connections != 8 {
        name.push_str(&format!("-{}-connections", flags.connections));
    }
    if flags.trim_threshold != "64MB" {
        name.push_str(&format!("-trim-{}", flags.trim_threshold.to_lowercase()));
    }
    if flags.max_load_memory != DEFAULT_MAX_LOAD_MEMORY {
        name.push_str(&format!("-max-load-{}", flags.max_load_memory.to_lowercase()));
    }
    name
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

/// The run label of this process's containers of kind `kind` ("soak", "container-tests"):
/// `<kind>.<checkout>.<process id>`, which no other checkout's run, and no container a user
/// started, carries.
/// The label of every container a run starts (testcontainers' and the install tests'),
/// naming the run: soak/src/container.rs sets it on testcontainers' own.
pub const RUN_LABEL: &str = "org.pg_automerge.run";

pub fn run_label(kind: &str) -> String {
    format!("{kind}.{}.{}", checkout_id(), std::process::id())
}

/// Removes the containers that `run` (a [`run_label`]) left behind, and those of runs of the
/// same kind from this checkout whose xtask process is gone (killed before testcontainers
/// removed its containers); never another's: the runs of other checkouts or kinds, and a
/// user's containers, may be running beside this one.
pub fn remove_leftover_containers(sh: &Shell, run: &str) -> Result<()> {
    let labelled = format!("label={RUN_LABEL}");
    let format = format!("{{{{.ID}}}} {{{{.Label \"{RUN_LABEL}\"}}}}");
    let listed = cmd!(sh, "docker ps -a --filter {labelled} --format {format}").quiet().read()?;
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, label)| *label == run || left_by_a_dead_run(label, run))
        .map(|(id, _)| id)
        .collect();
    if !ids.is_empty() {
        note(format!("removing {} container(s) left by {run} or a killed run like it", ids.len()));
        cmd!(sh, "docker rm -f {ids...}").quiet().ignore_stdout().run()?;
    }
    Ok(())
}

/// Whether `label` names a run of the same kind and checkout as `run` whose process is gone.
fn left_by_a_dead_run(label: &str, run: &str) -> bool {
    let split = |label: &str| {
        label.rsplit_once('.').map(|(rest, pid)| (rest.to_string(), pid.parse::<i32>()))
    };
    match (split(label), split(run)) {
        (Some((kind, Ok(pid))), Some((own_kind, _))) if kind == own_kind => {
            // SAFETY: kill(2) with signal 0 only checks that the process exists.
            let exists = unsafe { libc::kill(pid, 0) } == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
            !exists
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_are_only_those_of_killed_runs_of_the_same_kind_and_checkout() {
        let own = run_label("container-tests");
        let checkout = checkout_id();
        // No process has this id (above Linux's pid_max limit of 2^22).
        let dead = format!("container-tests.{checkout}.{}", 1 << 23);
        assert!(left_by_a_dead_run(&dead, &own));
        assert!(!left_by_a_dead_run(&format!("soak.{checkout}.{}", 1 << 23), &own));
        assert!(!left_by_a_dead_run(&format!("container-tests.other.{}", 1 << 23), &own));
        assert!(!left_by_a_dead_run(&own, &own), "this process is alive");
        assert!(!left_by_a_dead_run("a user's label", &own));
    }
}
