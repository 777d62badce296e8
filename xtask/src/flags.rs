//! Every flag of every verb, in one place.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::postgres::PgMajor;

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", about = "Build, test and run pg_automerge")]
pub struct Xtask {
    #[command(subcommand)]
    pub verb: Verb,
}

#[derive(Subcommand, Debug)]
pub enum Verb {
    /// Install what building and testing need: Debian packages, cargo-pgrx, PostgreSQL 17
    /// and 18 built from Debian's sources, and pgrx's configuration. Idempotent.
    Setup(SetupFlags),
    /// Run setup, the core crates' tests, then the extension's tests and documentation
    /// examples on each PostgreSQL major.
    Test(TestFlags),
    /// Build and install the extension, start a local cluster with sample documents, and
    /// print the psql line to connect.
    Run(RunFlags),
}

#[derive(Args, Debug)]
pub struct SetupFlags {
    /// Which PostgreSQL majors to provide.
    #[arg(long, value_enum, default_value_t = PgChoice::All)]
    pub pg: PgChoice,
}

#[derive(Args, Debug)]
pub struct TestFlags {
    /// Which PostgreSQL major to test against.
    #[arg(long, value_enum, default_value_t = PgChoice::All)]
    pub pg: PgChoice,
}

#[derive(Args, Debug)]
pub struct RunFlags {
    /// Which PostgreSQL major the cluster runs.
    #[arg(long, value_enum, default_value_t = PgMajor::Pg17)]
    pub pg: PgMajor,
    /// Stop the clusters that `cargo xtask run` started.
    #[arg(long)]
    pub stop: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgChoice {
    #[value(name = "15")]
    Pg15,
    #[value(name = "17")]
    Pg17,
    #[value(name = "18")]
    Pg18,
    #[value(name = "all")]
    All,
}

impl PgChoice {
    pub fn majors(self) -> Vec<PgMajor> {
        match self {
            PgChoice::Pg15 => vec![PgMajor::Pg15],
            PgChoice::Pg17 => vec![PgMajor::Pg17],
            PgChoice::Pg18 => vec![PgMajor::Pg18],
            PgChoice::All => PgMajor::ALL.to_vec(),
        }
    }
}

impl From<PgMajor> for PgChoice {
    fn from(major: PgMajor) -> PgChoice {
        match major {
            PgMajor::Pg15 => PgChoice::Pg15,
            PgMajor::Pg17 => PgChoice::Pg17,
            PgMajor::Pg18 => PgChoice::Pg18,
        }
    }
}
