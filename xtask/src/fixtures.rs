//! `cargo xtask fixtures`: generates the benchmark and soak fixtures into `target/fixtures`
//! (only those missing; they are deterministic) and prints their sizes, op and change counts.

use std::path::PathBuf;

use anyhow::Result;
use xshell::{cmd, Shell};

use crate::flags::FixturesFlags;
use crate::project_root;
use crate::step::step;

/// Where generated fixtures are kept: large, deterministic, so never committed.
pub fn dir() -> PathBuf {
    project_root().join("target/fixtures")
}

pub fn run(sh: &Shell, flags: &FixturesFlags) -> Result<()> {
    let table = step("generate fixtures", || generate(sh, flags.small_only))?;
    print!("{table}");
    Ok(())
}

/// Generates the fixtures (only the small ones when `small_only`) and returns the table the
/// generator prints. Release mode: the Operations-scale histories take minutes in debug.
pub fn generate(sh: &Shell, small_only: bool) -> Result<String> {
    let dir = dir();
    let scale = if small_only { Some("small") } else { None };
    Ok(cmd!(
        sh,
        "cargo run --quiet --release --package fixtures -- {dir} {scale...}"
    )
    .read()?
        + "\n")
}
