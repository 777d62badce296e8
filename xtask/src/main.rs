//! `cargo xtask <verb>`: everything it takes to build, test and run pg_automerge, in
//! plain Rust. One module per verb, each verb a `run` method on its flags type; all flags
//! are in `flags.rs`; what verbs share is in `util.rs`, which imports nothing of xtask.

mod bench;
mod chart;
mod citus;
mod citus_bench;
mod cluster;
mod debian_source;
mod distributed;
mod doc_examples;
mod fixtures;
mod flags;
mod fuzz;
mod image;
mod install;
mod package;
mod package_install;
mod postgres;
mod provenance;
mod reliability;
mod run;
mod setup;
mod side_by_side;
mod soak;
mod storage_adapter;
mod sync;
mod test;
#[cfg(test)]
mod tidy;
mod util;

use std::path::{Path, PathBuf};

fn main() -> anyhow::Result<()> {
    let flags = <flags::Xtask as clap::Parser>::parse();
    let sh = xshell::Shell::new()?;
    sh.change_dir(project_root());
    match flags.verb {
        flags::Verb::Setup(flags) => flags.run(&sh),
        flags::Verb::Test(flags) => flags.run(&sh),
        flags::Verb::Run(flags) => flags.run(&sh),
        flags::Verb::Fixtures(flags) => flags.run(&sh),
        flags::Verb::Bench(flags) => flags.run(&sh),
        flags::Verb::Fuzz(flags) => flags.run(&sh),
        flags::Verb::Image(flags) => flags.run(&sh),
        flags::Verb::Package(flags) => flags.run(&sh),
        flags::Verb::Soak(flags) => flags.run(&sh),
        flags::Verb::CitusBench(flags) => flags.run(&sh),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR`, else the workspace's `target`.
pub fn cargo_target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"))
}
