//! `cargo xtask soak`: builds the image (release), then runs the soak crate's driver in
//! release against it (its configuration as a JSON argument: xtask does not link the soak
//! crate, which would make every xtask build compile testcontainers and plotters), which writes results/soak-<date>[-variant]/ and fails when an
//! invariant does not hold.

use std::process::Command;

use anyhow::{bail, Result};
use xshell::{cmd, Shell};

use crate::flags::{OnOff, SoakFlags};
use crate::image;
use crate::project_root;
use crate::provenance::Provenance;
use crate::step::step;

/// The full-length run, whose report is `results/soak-<date>/`.
const FULL_LENGTH_SECS: u64 = 70 * 60;
const INITIAL_DOCUMENTS: u64 = 200;

pub fn run(sh: &Shell, flags: &SoakFlags) -> Result<()> {
    if let Err(reason) = step("Docker engine", || image::ensure_docker(sh))? {
        bail!("the soak needs a Docker engine: {reason}");
    }
    let tag = image::build(sh, &flags.base, false)?;
    // The report's setup table: the machine, toolchain and checkout, as every report says them.
    let extension_build =
        format!("release, against PostgreSQL {} headers", image::IMAGE_MAJOR.number());
    let provenance =
        Provenance::collect(sh, &command_line(), &[("extension build", extension_build)])?;
    let name = results_name(flags, &provenance.date);
    remove_leftover_containers(sh, &name)?;
    let results_dir = project_root().join("results").join(&name);
    // The table grows by 2,500 documents in 70 minutes: a shorter run grows at that rate.
    let growth = 2500 * flags.duration.as_secs().min(FULL_LENGTH_SECS) / FULL_LENGTH_SECS;
    let config = serde_json::json!({
        "image": tag,
        "run": name,
        "duration_secs": flags.duration.as_secs(),
        "memory_bytes": flags.memory,
        "connections": flags.connections,
        "gin_fastupdate": flags.gin_fastupdate == OnOff::On,
        "trim_threshold": flags.trim_threshold,
        "max_load_memory": flags.max_load_memory,
        "initial_documents": INITIAL_DOCUMENTS,
        "final_documents": INITIAL_DOCUMENTS + growth,
        "documents": "WithLarge",
        "sample_interval_secs": 5,
        "results_dir": results_dir,
        "command": command_line(),
        "build": provenance.entries_except_command(),
        "progress": true,
    });
    step(&format!("soak for {} s against {tag}", flags.duration.as_secs()), || {
        let status = Command::new("cargo")
            .args(["run", "--quiet", "--release", "-p", "soak", "--"])
            .arg(config.to_string())
            .current_dir(project_root())
            .status()?;
        if !status.success() {
            bail!("the soak failed ({status}); see {}", results_dir.display());
        }
        Ok(())
    })
}

/// `soak-<date>` for the default run; other settings add what differs.
fn results_name(flags: &SoakFlags, date: &str) -> String {
    let mut name = format!("soak-{date}");
    if flags.gin_fastupdate == OnOff::Off {
        name.push_str("-gin-fastupdate-off");
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
    if flags.max_load_memory != "1GB" {
        name.push_str(&format!("-max-load-{}", flags.max_load_memory.to_lowercase()));
    }
    name
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

/// Containers that an interrupted run of the same name left behind (testcontainers labels
/// all of its own; the soak crate adds the run's name), and no other: runs of other names,
/// and the tests, may be running beside this one.
pub fn remove_leftover_containers(sh: &Shell, run: &str) -> Result<()> {
    let managed = "label=org.testcontainers.managed-by=testcontainers";
    let named = format!("label=org.pg_automerge.run={run}");
    let leftovers = cmd!(sh, "docker ps -aq --filter {managed} --filter {named}").quiet().read()?;
    let ids: Vec<&str> = leftovers.split_whitespace().collect();
    if !ids.is_empty() {
        cmd!(sh, "docker rm -f {ids...}").quiet().ignore_stdout().run()?;
    }
    Ok(())
}
