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
    /// Generate the benchmark fixtures into target/fixtures and print their sizes.
    Fixtures(FixturesFlags),
    /// Run the criterion benches (core level, and SQL level against a cluster it starts)
    /// and write a report with ratios to the baselines into results/bench-<date>/.
    Bench(BenchFlags),
    /// Run the mutation fuzzer over the core crate's byte inputs and write
    /// results/fuzz-<date>.md.
    Fuzz(FuzzFlags),
}

#[derive(Args, Debug)]
pub struct SetupFlags {
    /// Which PostgreSQL majors to provide: 15, 17, 18 or all.
    #[arg(long, default_value_t = PgChoice::ALL)]
    pub pg: PgChoice,
}

#[derive(Args, Debug)]
pub struct TestFlags {
    /// Which PostgreSQL major to test against: 15, 17, 18 or all.
    #[arg(long, default_value_t = PgChoice::ALL)]
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

#[derive(Args, Debug)]
pub struct FixturesFlags {
    /// Only the small fixtures (a few kilobytes each).
    #[arg(long = "small")]
    pub small_only: bool,
}

#[derive(Args, Debug)]
pub struct BenchFlags {
    /// A smoke check that every bench runs: small fixtures, the shortest measurement, the
    /// debug build; the report goes to target/bench-quick/ instead of results/.
    #[arg(long)]
    pub quick: bool,
    /// Which PostgreSQL major the SQL benches run against.
    #[arg(long, value_enum, default_value_t = PgMajor::Pg17)]
    pub pg: PgMajor,
}

#[derive(Args, Debug)]
pub struct FuzzFlags {
    /// How long to fuzz: a number with s, m or h (90s, 20m, 1h).
    #[arg(long, default_value = "20m")]
    pub time: String,
    /// Seed of the mutations; the same seed replays the same inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `15`, `17`, `18` or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgChoice(Option<PgMajor>);

impl PgChoice {
    pub const ALL: PgChoice = PgChoice(None);

    pub fn majors(self) -> Vec<PgMajor> {
        self.0.map_or_else(|| PgMajor::ALL.to_vec(), |major| vec![major])
    }
}

impl From<PgMajor> for PgChoice {
    fn from(major: PgMajor) -> PgChoice {
        PgChoice(Some(major))
    }
}

impl std::str::FromStr for PgChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<PgChoice, String> {
        if text == "all" {
            return Ok(PgChoice::ALL);
        }
        PgMajor::from_str(text, false).map(PgChoice::from).map_err(|_| {
            format!("`{text}` is not a supported major: choose 15, 17, 18 or all")
        })
    }
}

impl std::fmt::Display for PgChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(major) => write!(f, "{}", major.number()),
            None => f.write_str("all"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_choices_parse() {
        assert_eq!("all".parse::<PgChoice>().unwrap().majors(), PgMajor::ALL.to_vec());
        assert_eq!("17".parse::<PgChoice>().unwrap().majors(), vec![PgMajor::Pg17]);
        assert!("16".parse::<PgChoice>().is_err());
        assert_eq!(PgChoice::ALL.to_string(), "all");
    }
}
