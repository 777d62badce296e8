//! `fuzz --time 60s`: runs a campaign and prints its counts. `cargo xtask test` runs it
//! bounded; `cargo xtask fuzz --time 20m` runs it long and writes a report from the last
//! line, which reads `fuzz: N executions, N failures, N kinds of Automerge panic caught, N corpus inputs, N seeds, N reached a load, N loaded, N s`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use fuzz::{campaign, Settings, Summary, Target};
use pg_automerge_core::memory::CountingAllocator;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[derive(Parser, Debug)]
#[command(about = "Mutation fuzzer over pg_automerge_core's byte inputs")]
struct Flags {
    /// How long to run: a number with s, m or h (90s, 20m, 1h).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    time: Duration,
    /// Stop after this many executions, if that comes first.
    #[arg(long)]
    executions: Option<u64>,
    /// What each input runs through: `all` (every byte input of the core, and the
    /// wrong-change target) or `altered-writes` (one honest change altered at random).
    #[arg(long, value_enum, default_value_t = Target::All)]
    target: Target,
    /// Seed of the mutations: the same seed and executions give the same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where failing inputs are written.
    #[arg(long, default_value = "target/fuzz-failures")]
    failures: PathBuf,
    /// Instead of fuzzing, run these inputs once and print what they break.
    #[arg(long, num_args = 1..)]
    replay: Vec<PathBuf>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) =
        text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 =
        number.parse().map_err(|_| format!("`{text}` does not start with a number"))?;
    let seconds = match unit {
        "s" | "" => number,
        "m" => number * 60,
        "h" => number * 3600,
        _ => return Err(format!("`{text}`: the unit must be s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

fn main() {
    let flags = Flags::parse();
    if !flags.replay.is_empty() {
        replay(&flags.replay);
        return;
    }
    let settings = Settings {
        target: flags.target,
        time: flags.time,
        executions: flags.executions,
        seed: flags.seed,
        slow: Duration::from_secs(5),
        hang: Duration::from_secs(60),
        failures_dir: flags.failures,
    };
    let summary = campaign(&settings, |summary| println!("fuzz: ... {}", counts(summary)));
    for (failure, path) in &summary.failures {
        println!("FAILURE in {}: {} (input: {})", failure.target, failure.what, path.display());
    }
    for (message, path) in &summary.caught {
        println!("caught: {message} (input: {})", path.display());
    }
    println!("fuzz: slowest input {:.3} s", summary.slowest.as_secs_f64());
    println!("fuzz: {}", counts(&summary));
    if !summary.failures.is_empty() {
        std::process::exit(1);
    }
}

fn replay(paths: &[PathBuf]) {
    for path in paths {
        let input = std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let (mut failures, slowest) = fuzz::replay(&input);
        failures.extend(fuzz::replay_wrong_writes(&input));
        println!("{}: {} failures, {:.3} s", path.display(), failures.len(), slowest.as_secs_f64());
        for failure in failures {
            println!("    {}: {}", failure.target, failure.what);
        }
    }
}

fn counts(summary: &Summary) -> String {
    format!(
        "{} executions, {} failures, {} kinds of Automerge panic caught, {} corpus inputs, {} seeds, {} reached a load, {} loaded, {} s",
        summary.executions,
        summary.failures.len(),
        summary.caught.len(),
        summary.corpus,
        summary.seeds,
        summary.reached_load,
        summary.loaded,
        summary.elapsed.as_secs()
    )
}
