//! `cargo xtask <verb>`: everything it takes to build, test and run pg_automerge, in
//! plain Rust. One module per verb; all flags are in `flags.rs`.

mod bench;
mod chart;
mod cluster;
mod debian_source;
mod doc_examples;
mod fixtures;
mod flags;
mod fuzz;
mod image;
mod install;
mod postgres;
mod provenance;
mod reliability;
mod run;
mod setup;
mod side_by_side;
mod soak;
mod step;
mod test;
#[cfg(test)]
mod tidy;
mod versions;

use std::path::{Path, PathBuf};

fn main() -> anyhow::Result<()> {
    let flags = <flags::Xtask as clap::Parser>::parse();
    let sh = xshell::Shell::new()?;
    sh.change_dir(project_root());
    match flags.verb {
        flags::Verb::Setup(flags) => setup::run(&sh, &flags).map(drop),
        flags::Verb::Test(flags) => test::run(&sh, &flags),
        flags::Verb::Run(flags) => run::run(&sh, &flags),
        flags::Verb::Fixtures(flags) => fixtures::run(&sh, &flags),
        flags::Verb::Bench(flags) => bench::run(&sh, &flags),
        flags::Verb::Fuzz(flags) => fuzz::run(&sh, &flags),
        flags::Verb::Image(flags) => image::run(&sh, &flags),
        flags::Verb::Soak(flags) => soak::run(&sh, &flags),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}
