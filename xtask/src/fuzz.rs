//! `cargo xtask fuzz --time 20m`: runs the mutation fuzzer (the `fuzz` crate, its wrong-change
//! target included: `fuzz/src/wrong_writes.rs`) over the core crate's byte inputs and writes `results/fuzz-<date>-<commit>.md` from what it reports.
//! `cargo xtask test` runs it too, for a bounded time ([`BOUNDED_TIME`]).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use report_table::Table;
use xshell::Shell;

use crate::flags::{FuzzFlags, FuzzTarget};
use crate::project_root;
use crate::provenance::Provenance;
use crate::util::{note, step};

/// How long `cargo xtask test` fuzzes: long enough to run every seed and tens of
/// thousands of mutants, short enough for every CI run.
pub const BOUNDED_TIME: &str = "60s";

/// What a campaign reported on its last line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FuzzCounts {
    pub executions: u64,
    pub failures: u64,
    pub caught: u64,
    pub corpus: u64,
    pub seeds: u64,
    pub reached_load: u64,
    pub loaded: u64,
    pub seconds: u64,
}

impl std::fmt::Display for FuzzCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} executions, {} failures", self.executions, self.failures)
    }
}

/// What the fuzzer printed: its counts, the panics it saw caught, its failures.
#[derive(Debug, Default)]
pub struct Campaign {
    pub counts: FuzzCounts,
    pub caught: Vec<String>,
    pub failures: Vec<String>,
}

impl FuzzFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        // The code that is fuzzed is what the checkout holds now, not when the run ends.
        let target = self.target.name();
        let command =
            format!("cargo xtask fuzz --time {} --seed {} --target {target}", self.time, self.seed);
        let provenance = Provenance::collect(sh, &command, &[])?;
        let campaign = step(&format!("fuzz the core crate for {} ({target})", self.time), || {
            campaign(&self.time, self.seed, self.target)
        })?;
        // Named by date, commit, target and seed, so that runs do not overwrite each other.
        let name = match self.target {
            FuzzTarget::All => format!("fuzz-{}-{}", provenance.date, provenance.commit),
            _ => {
                format!("fuzz-{}-{}-{target}-seed{}", provenance.date, provenance.commit, self.seed)
            }
        };
        let path = project_root().join(format!("results/{name}.md"));
        let report = report(&provenance, &campaign, self.target)?;
        std::fs::write(&path, report).with_context(|| format!("writing {}", path.display()))?;
        note(format!("wrote {}", path.display()));
        if campaign.counts.failures > 0 {
            bail!("the fuzzer found {} failure(s)", campaign.counts.failures);
        }
        Ok(())
    }
}

/// Builds and runs the fuzzer, passing its output through, and reads what it reports.
pub fn campaign(time: &str, seed: u64, target: FuzzTarget) -> Result<Campaign> {
    let mut fuzz = Command::new("cargo");
    fuzz.args(["run", "--quiet", "--profile", "fuzz", "--package", "fuzz", "--"])
        .args(["--time", time, "--seed", &seed.to_string(), "--target", target.name()])
        .current_dir(project_root())
        .stdout(Stdio::piped());
    let mut child = fuzz.spawn().context("starting the fuzzer")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut campaign = Campaign::default();
    let mut last = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(caught) = line.strip_prefix("caught: ") {
            campaign.caught.push(caught.to_string());
        } else if let Some(failure) = line.strip_prefix("FAILURE ") {
            campaign.failures.push(failure.to_string());
        } else if let Some(counts) = parse_counts(&line) {
            last = Some(counts);
        }
    }
    let status = child.wait()?;
    campaign.counts = last.with_context(|| format!("the fuzzer ({status}) printed no counts"))?;
    if !status.success() && campaign.counts.failures == 0 {
        bail!("the fuzzer failed ({status}) without reporting a failure");
    }
    Ok(campaign)
}

/// `fuzz: 120 executions, 0 failures, 3 kinds of Automerge panic caught, 40 corpus
/// inputs, 54 seeds, 90 reached a load, 30 loaded, 60 s` → the counts; progress lines
/// (`fuzz: ... `) and anything else → `None`.
fn parse_counts(line: &str) -> Option<FuzzCounts> {
    let rest = line.strip_prefix("fuzz: ")?;
    let number_before = |words: &str| -> Option<u64> {
        rest.split(", ").find_map(|part| part.strip_suffix(words)?.trim().parse().ok())
    };
    Some(FuzzCounts {
        executions: number_before("executions")?,
        failures: number_before("failures")?,
        caught: number_before("kinds of Automerge panic caught")?,
        corpus: number_before("corpus inputs")?,
        seeds: number_before("seeds")?,
        reached_load: number_before("reached a load")?,
        loaded: number_before("loaded")?,
        seconds: number_before("s")?,
    })
}

/// The results page: what ran, where, with which versions, and what it found.
fn report(provenance: &Provenance, campaign: &Campaign, target: FuzzTarget) -> Result<String> {
    let counts = &campaign.counts;
    let regressions = std::fs::read_dir(project_root().join("fuzz/regressions"))?.count();
    let list = |items: &[String]| -> String {
        if items.is_empty() {
            "none\n".to_string()
        } else {
            items.iter().map(|item| format!("- {item}\n")).collect()
        }
    };
    let (executions, seeds, failures, reached, loaded, targets) = match target {
        FuzzTarget::All => (
            "executions (each runs the byte targets and the wrong-change target on its input)",
            "seeds (fixture saves, changes, bundles, regression inputs)",
            "failures (a panic escaping the core, a load over twice its estimate plus 4 MB, an \
             input over 5 s)",
            "executions whose input reached Automerge's load",
            "executions whose input loaded as a document",
            "every byte input of the core crate (type input as text and bytes, `doc || bytea`, \
             merge, stored values with a mismatched header, JSON, changes, catch-up bytes and \
             spans now and as of earlier heads), under a 64 MB load limit; and the wrong-change \
             target (`fuzz/src/wrong_writes.rs`): the same input as a choice stream of honest \
             edits and structurally valid but wrong changes written through every entry \
             point, each accepted value checked to load, keep its load's JSON and save \
             loadably (issue 14)",
        ),
        FuzzTarget::AlteredWrites => (
            "executions (each alters one honest JS-shaped change and writes it through one entry point)",
            "seeds (short choice streams)",
            "failures (a write accepted whose value breaks the invariant, a panic escaping the \
             core, an input over 5 s)",
            "executions whose write was accepted (and its value checked)",
            "accepted values that kept the invariant",
            "the altered-change target (`fuzz/src/altered_writes.rs`, issue 35): the input as a \
             choice stream picks a stored client document (texts with marks and blocks, lists, \
             counters, nested maps), one of 64 honest JS-shaped changes on it, an alteration of \
             one field of its header or of one operation (or an operation removed, repeated or \
             moved), and one of the entry points (`||` with and without the fast paths and with \
             a held index, INSERT of save and changes and of changes only, merges both ways, \
             compact); a write must be refused as invalid binary or leave a value that loads, \
             keeps its load's JSON and saves loadably",
        ),
    };
    let mut table = Table::pairs();
    for (name, value) in [
        (executions, counts.executions),
        ("seconds", counts.seconds),
        (seeds, counts.seeds),
        ("corpus at the end (seeds and kept mutants)", counts.corpus),
        (reached, counts.reached_load),
        (loaded, counts.loaded),
        (failures, counts.failures),
        ("kinds of Automerge panic that the core caught and refused", counts.caught),
        ("committed regression inputs (`fuzz/regressions/`)", regressions as u64),
    ] {
        table.row([name.to_string(), value.to_string()]);
    }
    Ok(format!(
        "# Fuzzing pg_automerge_core, {date}\n\n\
         Generated by xtask; do not edit.\n\n\
         {provenance}\
         - targets: {targets}\n\n\
         {table}\n\
         ## Failures\n\n{failure_list}\n\
         ## Panics inside Automerge caught by the core\n\n\
         Each is refused as `invalid_binary_representation` (22P03); an input of each kind \
         is written to `target/fuzz-failures/`.\n\n{caught_list}",
        date = provenance.date,
        provenance = provenance.markdown(),
        failure_list = list(&campaign.failures),
        caught_list = list(&campaign.caught),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fuzzers_last_line() {
        let line = "fuzz: 120 executions, 2 failures, 3 kinds of Automerge panic caught, \
                    40 corpus inputs, 54 seeds, 90 reached a load, 30 loaded, 61 s";
        assert_eq!(
            parse_counts(line),
            Some(FuzzCounts {
                executions: 120,
                failures: 2,
                caught: 3,
                corpus: 40,
                seeds: 54,
                reached_load: 90,
                loaded: 30,
                seconds: 61,
            })
        );
        assert_eq!(parse_counts("fuzz: ... 5 executions, 0 failures"), None);
        assert_eq!(parse_counts("fuzz: slowest input 0.1 s"), None);
    }
}
