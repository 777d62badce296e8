//! `cargo xtask fixtures`: generates the benchmark and soak fixtures into `target/fixtures`
//! (only those missing; they are deterministic) and prints their sizes, op and change counts.

use std::path::PathBuf;

use anyhow::Result;
use xshell::{cmd, Shell};

use crate::flags::{BenchScale, FixturesFlags};
use crate::project_root;
use crate::util::step;

/// Where generated fixtures are kept: large, deterministic, so never committed.
pub fn dir() -> PathBuf {
    project_root().join("target/fixtures")
}

impl FixturesFlags {
    pub fn run(&self, sh: &Shell) -> Result<()> {
        let table = step("generate fixtures", || {
            generate(sh, self.small_only.then_some(BenchScale::Small))
        })?;
        print!("{table}");
        Ok(())
    }
}

/// Generates the fixtures (of one scale, or all) and returns the table the generator
/// prints. The larger ones in release mode: their histories take minutes in debug.
pub fn generate(sh: &Shell, scale: Option<BenchScale>) -> Result<String> {
    let dir = dir();
    let release = (scale != Some(BenchScale::Small)).then_some("--release");
    let scale = scale.map(BenchScale::name);
    Ok(cmd!(sh, "cargo run --quiet {release...} --package fixtures -- {dir} {scale...}").read()?
        + "\n")
}
