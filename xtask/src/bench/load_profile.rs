//! Inside the automerge crate's load, for `--load-breakdown`: `perf record` with DWARF call
//! graphs while criterion runs the whole load alone on one fixture (`--profile-time`),
//! then, of the samples taken inside `Automerge::load`, the share in each of its own
//! functions (automerge 0.12) and in a few leaf functions. No public API runs these parts
//! alone; the profile is what separates them.

use std::collections::HashSet;
use std::fs;
use std::process::Command;

use anyhow::{bail, Context, Result};
use report_table::{Align, Table};
use xshell::{cmd, Shell};

use benches::load_phases::{self, WHOLE};

use super::measure::BenchFiles;
use crate::flags::BenchScale;
use crate::project_root;
use crate::util::note;

/// The frame every sample of a load has (every public load function ends in it).
const LOAD: &str = "automerge::automerge::Automerge::load_with_options_and_mark_validation";

/// The load's own functions whose share (of the load's samples, with all they call) the
/// report gives, with what each does; indented ones run inside the one above.
const FUNCTIONS: [(&str, &str); 11] = [
    ("automerge::storage::chunk::Chunk::parse", "the chunk parsed, its checksum taken"),
    ("automerge::storage::document::compression::decompress", "· its columns inflated"),
    ("automerge::op_set2::op_set::OpSet::load", "the op set built from the op columns"),
    ("automerge::change_graph::ChangeGraphCols::load", "the change columns read"),
    (
        "automerge::op_set2::change::collector::IndexedChangeCollector::process_ops",
        "every op walked once: each change rebuilt, the index fed",
    ),
    ("automerge::op_set2::op_set::op_iter::OpIter::try_next", "· ops read back from the op set"),
    (
        "automerge::op_set2::change::collector::ChangeCollector::process_op_internal",
        "· each op encoded into its change",
    ),
    ("automerge::op_set2::op_set::index::IndexBuilder::process_op", "· the op set's index fed"),
    (
        "automerge::op_set2::change::collector::ChangeCollector::collect",
        "the changes finished: columns written, each hashed",
    ),
    ("automerge::op_set2::op_set::index::IndexBuilder::finish", "the index finished"),
    ("automerge::change_graph::ChangeGraphCols::finalize", "the change graph built"),
];

/// Leaf functions (the sample's own frame) by the prefixes of their names: where they are
/// called from does not matter.
const LEAVES: [(&[&str], &str); 3] = [
    (&["sha2::"], "SHA-256 (own time)"),
    (
        &[
            "malloc",
            "_int_malloc",
            "free",
            "cfree",
            "_int_free",
            "realloc",
            "_int_realloc",
            "malloc_consolidate",
            "unlink_chunk",
            "<pg_automerge_core::memory::CountingAllocator",
        ],
        "the allocator (own time)",
    ),
    (&["__memmove", "__memcpy", "__memset"], "copying memory (own time)"),
];

/// One fixture's profile: how many samples were taken and how many of them inside a load,
/// and the share of those in each of [`FUNCTIONS`], then each of [`LEAVES`].
pub(super) struct Profile {
    pub fixture: String,
    pub samples: usize,
    pub in_load: usize,
    pub shares: Vec<f64>,
}

/// Why a run has no profile.
pub(super) enum Unprofiled {
    /// A quick run's debug build: its stacks are too deep for perf to unwind to the load
    /// (almost no sample reaches it), and perf takes minutes to read them.
    Quick,
    NoPerf,
}

/// Profiles the whole load on each fixture, for ten seconds of loads each.
pub(super) fn profile(
    sh: &Shell,
    files: &BenchFiles,
    scale: BenchScale,
    fixtures: &[&str],
) -> Result<Result<Vec<Profile>, Unprofiled>> {
    if scale == BenchScale::Small {
        return Ok(Err(Unprofiled::Quick));
    }
    if cmd!(sh, "perf --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        note("perf is missing (Debian's linux-perf): the load is not profiled");
        return Ok(Err(Unprofiled::NoPerf));
    }
    let dir = project_root().join("target/load-profile");
    fs::create_dir_all(&dir)?;
    let mut profiles = Vec::new();
    for fixture in fixtures {
        let data = dir.join(format!("{fixture}.data"));
        let filter = format!("^core/{}/{WHOLE}/{fixture}$", load_phases::OPERATION);
        let cargo = files.cargo_bench("load_breakdown", scale, Some(&filter));
        let mut perf = Command::new("perf");
        perf.args(["record", "--freq", "199", "--call-graph", "dwarf,16384", "--output"])
            .arg(&data)
            .arg("--")
            .arg(cargo.get_program())
            .args(cargo.get_args())
            .args(["--profile-time", "10"])
            .current_dir(project_root())
            .stdout(std::process::Stdio::null());
        for (key, value) in cargo.get_envs() {
            if let Some(value) = value {
                perf.env(key, value);
            }
        }
        // What the bench records untimed belongs to the run already read, not here.
        perf.env("PG_AUTOMERGE_BENCH_PEAKS", dir.join("peaks.csv"))
            .env("PG_AUTOMERGE_BENCH_STORAGE", dir.join("storage.csv"));
        let status = perf.status().context("starting perf record")?;
        if !status.success() {
            bail!("perf record of the load on {fixture} failed ({status})");
        }
        let script = cmd!(sh, "perf script --input {data} -F ip,sym").quiet().read()?;
        fs::remove_file(&data)?;
        profiles.push(shares(fixture, &script));
    }
    Ok(Ok(profiles))
}

/// The shares of one fixture's samples, from `perf script -F ip,sym`: a block of frames
/// (address, then symbol) per sample, leaf first, blocks separated by blank lines.
fn shares(fixture: &str, script: &str) -> Profile {
    let mut samples = 0;
    let mut in_load = 0;
    let mut counts = vec![0usize; FUNCTIONS.len() + LEAVES.len()];
    for block in script.split("\n\n").filter(|block| !block.trim().is_empty()) {
        samples += 1;
        let frames: Vec<&str> = block
            .lines()
            .filter_map(|line| line.trim().split_once(' ').map(|(_, symbol)| symbol))
            .map(|symbol| symbol.trim_end_matches(" (inlined)"))
            .collect();
        if !frames.contains(&LOAD) {
            continue;
        }
        in_load += 1;
        let seen: HashSet<&str> = frames.iter().copied().collect();
        for (count, (function, _)) in counts.iter_mut().zip(FUNCTIONS) {
            *count += usize::from(seen.contains(function));
        }
        let leaf = frames.first().copied().unwrap_or_default();
        for (count, (prefixes, _)) in counts[FUNCTIONS.len()..].iter_mut().zip(LEAVES) {
            *count += usize::from(prefixes.iter().any(|prefix| leaf.starts_with(prefix)));
        }
    }
    let shares = counts.iter().map(|&n| n as f64 / in_load.max(1) as f64).collect();
    Profile { fixture: fixture.to_string(), samples, in_load, shares }
}

/// The report's section: a row per function and leaf, a column per fixture.
pub(super) fn markdown(profiles: Result<&[Profile], &Unprofiled>) -> String {
    let mut out = String::from("\n## Inside the load (perf)\n\n");
    let profiles = match profiles {
        Ok(profiles) => profiles,
        Err(Unprofiled::Quick) => {
            out.push_str("Not profiled in a quick run: debug builds' stacks are too deep.\n");
            return out;
        }
        Err(Unprofiled::NoPerf) => {
            out.push_str("Not profiled: perf is missing (Debian's `linux-perf`).\n");
            return out;
        }
    };
    out.push_str(
        "`perf record --freq 199 --call-graph dwarf` while criterion ran the whole load alone \
         on one fixture (`--profile-time`): of the samples taken inside `Automerge::load`, the \
         share in each of its functions with all they call (a `·` function runs inside the \
         one above it), then the share whose own frame is SHA-256, the allocator or a memory \
         copy, wherever called from. Functions are automerge 0.12's, by name (a `—` would be \
         one inlined away). A sample whose stack was too deep to unwind to the load is not \
         counted: the last row says how many were.\n\n",
    );
    let mut table = Table::new(
        [("part of the load", Align::Left)]
            .into_iter()
            .chain(profiles.iter().map(|p| (p.fixture.as_str(), Align::Right))),
    );
    let labels = FUNCTIONS.iter().map(|(_, what)| *what).chain(LEAVES.iter().map(|(_, w)| *w));
    for (i, label) in labels.enumerate() {
        let cells = profiles.iter().map(|p| percent(p.shares[i]));
        table.row([label.to_string()].into_iter().chain(cells));
    }
    let counted = profiles.iter().map(|p| format!("{} of {}", p.in_load, p.samples));
    table.row(["samples in a load, of all".to_string()].into_iter().chain(counted));
    out.push_str(&table.to_string());
    out
}

fn percent(share: f64) -> String {
    match share {
        0.0 => "—".into(),
        share if share < 0.01 => "<1%".into(),
        share => format!("{:.0}%", 100.0 * share),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_count_inside_the_load_by_function_and_leaf() {
        let script = format!(
            "\n\t  10 sha2::sha256::compress\n\t  20 {collect}\n\t  30 {LOAD}\n\t  40 main\n\n\
             \t  11 malloc\n\t  21 {process}\n\t  31 {LOAD} (inlined)\n\n\
             \t  12 criterion_plot::version\n\t  42 main\n",
            collect = FUNCTIONS[8].0,
            process = FUNCTIONS[4].0,
        );
        let profile = shares("rich-text-small", &script);
        assert_eq!((profile.samples, profile.in_load), (3, 2));
        assert_eq!(profile.shares[8], 0.5, "collect");
        assert_eq!(profile.shares[4], 0.5, "process_ops");
        assert_eq!(profile.shares[0], 0.0, "parse");
        assert_eq!(profile.shares[FUNCTIONS.len()], 0.5, "sha2");
        assert_eq!(profile.shares[FUNCTIONS.len() + 1], 0.5, "the allocator");
        let text = markdown(Ok(&[profile]));
        assert!(text.contains("| 2 of 3 |"), "{text}");
        assert!(text.contains("| · each op encoded into its change | — |"), "{text}");
    }
}
