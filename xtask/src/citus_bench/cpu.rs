//! The CPU time a cluster's processes have used, read from /proc: the postmaster's own, its
//! reaped children's (backends that exited) and its live children's. The difference over a
//! run is what that server spent on the run, whichever of its backends did the work.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::cluster::Cluster;

/// User and system CPU time that `cluster`'s processes have used so far.
pub fn used(cluster: &Cluster) -> Result<Duration> {
    let postmaster = cluster.postmaster().context("the cluster does not run")?;
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?.file_name().to_str().and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may exit while the directory is read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(times) = Times::parse(&stat) else { continue };
        if pid == postmaster {
            ticks += times.own + times.reaped_children;
        } else if times.parent == postmaster {
            ticks += times.own;
        }
    }
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Ok(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

/// What `/proc/<pid>/stat` says of a process's CPU time, in clock ticks.
struct Times {
    parent: u32,
    own: u64,
    reaped_children: u64,
}

impl Times {
    /// Parses the fields after the command name (which may hold spaces and parentheses):
    /// state, ppid, …, utime and stime (the 14th and 15th fields), cutime and cstime.
    fn parse(stat: &str) -> Option<Times> {
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let number = |index: usize| fields.get(index)?.parse::<u64>().ok();
        Some(Times {
            parent: fields.get(1)?.parse().ok()?,
            own: number(11)? + number(12)?,
            reaped_children: number(13)? + number(14)?,
        })
    }
}
