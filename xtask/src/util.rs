//! What the verbs share: printing one step at a time, counting tests, and the outcome of
//! a step that may be skipped. A leaf: it imports nothing of xtask, so that every verb can
//! import it without a loop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

/// Runs one named step, printing its name before and its duration after.
pub fn step<T>(name: &str, work: impl FnOnce() -> Result<T>) -> Result<T> {
    eprintln!("==> {name}");
    let started = Instant::now();
    let result = work();
    let outcome = if result.is_ok() { "done" } else { "FAILED" };
    eprintln!("<== {name}: {outcome} in {:.1}s", started.elapsed().as_secs_f64());
    result
}

/// Prints a note inside the current step.
pub fn note(text: impl std::fmt::Display) {
    eprintln!("    {text}");
}

/// Installs the npm dependencies of the package in `dir` (`examples/node-client`, relative
/// to the project's root) as its package-lock.json pins them (a few seconds). Without
/// Node.js it says so and returns false: what runs that package is skipped.
pub fn npm_dependencies(sh: &Shell, dir: &str) -> Result<bool> {
    if cmd!(sh, "node --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        note(format!("Node.js is not installed: {dir} is skipped"));
        return Ok(false);
    }
    let _dir = sh.push_dir(dir);
    cmd!(sh, "npm ci --no-audit --no-fund --loglevel=error").quiet().run()?;
    Ok(true)
}

/// What a step that needs something this machine may lack (a Docker engine) came to: it
/// ran, or it was skipped for a reason the summary prints.
#[derive(Debug)]
pub enum Skippable<T> {
    Ran(T),
    Skipped(String),
}

/// How many tests passed and failed.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub failed: usize,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} passed, {} failed", self.passed, self.failed)
    }
}

/// Runs a `cargo test`-like command, passing its output through, and adds up the
/// `test result:` lines it prints. Fails when the command fails without a failing test
/// (a build error, say).
pub fn counted(command: Command) -> Result<Counts> {
    Ok(run_tests(command)?.counts)
}

/// What a `cargo test`-like command reported.
#[derive(Default)]
pub struct TestRun {
    pub counts: Counts,
    /// The tests that passed, by their libtest names (`module::test`).
    pub passed: Vec<String>,
}

/// `counted`, which also reads the names of the tests that passed from libtest's
/// `test <name> ... ok` lines (whole lines only while the tests print to stderr, if at all).
pub fn run_tests(mut command: Command) -> Result<TestRun> {
    command.stdout(Stdio::piped());
    let mut child = command.spawn().context("starting cargo")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut run = TestRun::default();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        println!("{line}");
        if let Some(result) = parse_test_result(&line) {
            run.counts += result;
        }
        if let Some(name) = passed_test(&line) {
            run.passed.push(name.to_string());
        }
    }
    let status = child.wait()?;
    if !status.success() && run.counts.failed == 0 {
        bail!("{command:?} failed ({status}) before any test failed");
    }
    Ok(run)
}

/// `test crashes::backend_killed ... ok` → `crashes::backend_killed`.
fn passed_test(line: &str) -> Option<&str> {
    line.strip_prefix("test ")?.strip_suffix(" ... ok")
}

/// `test result: ok. 14 passed; 0 failed; 0 ignored; …` → 14 passed, 0 failed.
fn parse_test_result(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let number_before = |word: &str| -> Option<usize> {
        rest.split(';').find_map(|part| {
            part.trim().strip_suffix(word)?.trim().rsplit(' ').next()?.parse().ok()
        })
    };
    Some(Counts { passed: number_before("passed")?, failed: number_before("failed")? })
}

/// Runs a build's steps (program and arguments) in `dir` one after another, their output
/// into the file `log`; the first that fails stops the build and names the log.
pub fn run_logged(steps: &[(&str, Vec<&str>)], dir: &Path, log: &Path) -> Result<()> {
    let log_file = std::fs::File::create(log)?;
    for (program, args) in steps {
        let status = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::from(log_file.try_clone()?))
            .stderr(Stdio::from(log_file.try_clone()?))
            .status()
            .with_context(|| format!("running {program}"))?;
        if !status.success() {
            bail!("`{program} {}` failed; see {}", args.join(" "), log.display());
        }
    }
    Ok(())
}

/// The middle value, or the mean of the two middle ones; NaN for none.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => sorted[middle],
        _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
    }
}

/// The SHA-256 of a file's bytes, in hex.
pub fn sha256_of(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cargo_test_result_lines() {
        assert_eq!(
            parse_test_result("test result: ok. 14 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.09s"),
            Some(Counts { passed: 14, failed: 0 })
        );
        assert_eq!(
            parse_test_result("test result: FAILED. 3 passed; 2 failed; 0 ignored"),
            Some(Counts { passed: 3, failed: 2 })
        );
        assert_eq!(parse_test_result("running 3 tests"), None);
    }

    #[test]
    fn reads_the_names_of_passed_tests() {
        assert_eq!(
            passed_test("test crashes::then_every_document_loads ... ok"),
            Some("crashes::then_every_document_loads")
        );
        assert_eq!(passed_test("test upgrades::each_older_release ... FAILED"), None);
        assert_eq!(passed_test("test result: ok. 8 passed; 0 failed"), None);
    }
}
