//! Every flag of every verb, in one place. Each verb's `run` is an `impl` on its flags type
//! in the verb's module (`TestFlags::run` in `test.rs`).

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
    /// and write a report with ratios to the baselines into results/bench-<date>-<scale>-<commit>/.
    Bench(BenchFlags),
    /// Run the mutation fuzzer over the core crate's byte inputs and write
    /// results/fuzz-<date>-<commit>.md.
    Fuzz(FuzzFlags),
    /// Build the Docker images (docker/Dockerfile), one per PostgreSQL major, each installing
    /// the extension's package on a public PostgreSQL image or on a Debian base made here
    /// with debootstrap; or, with --sync-server, the sync server's image.
    Image(ImageFlags),
    /// Make the Debian packages: the extension's for each PostgreSQL major
    /// (postgresql-<major>-pg-automerge) and the sync server's, into target/packages.
    Package(PackageFlags),
    /// Run the long mixed load against the Docker image and write a report under results/.
    Soak(SoakFlags),
    /// Run the soak's mix briefly against one node and against a Citus coordinator with two
    /// workers on this machine, and write the comparison under results/.
    CitusBench(CitusBenchFlags),
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
    /// Run only these steps (comma-separated), for work in progress; the whole run, with
    /// no --only, is what CI runs.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<TestStep>,
}

/// The steps of `cargo xtask test`, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TestStep {
    /// clippy on every crate and target, warnings denied
    Lints,
    /// the core crates' tests and properties, and the tidy tests
    Core,
    /// a bounded fuzzing run
    Fuzz,
    /// @automerge/automerge loads a sample of the values the core tests accepted, and makes
    /// the diffs that automerge_diff is tested against; on PostgreSQL 17, the automerge-repo
    /// storage adapter (clients/) beside a Rust sync server on its database
    Node,
    /// the load estimate against measured peaks, release build
    Estimate,
    /// the extension's #[pg_test]s, per major
    Pgrx,
    /// the SQL examples of README.md and docs/, per major
    Docs,
    /// the insta snapshots of each function's psql output, per major
    Snapshots,
    /// crashes, standby, replication, dump and upgrades, per major
    Reliability,
    /// hostile inputs on a cluster of their own, per major
    Hostile,
    /// a Citus coordinator and two workers: distributed documents, pushdown, shard moves,
    /// a worker crash, notifications and docs/scaling.md's examples, on 17 and 18
    Citus,
    /// the sync server (PostgreSQL 17 only): automerge-repo clients in JS and Rust
    /// editing concurrently, SQL writes reaching them, a restart, two servers on one
    /// database, bad input
    Sync,
    /// the PostgreSQL 17 steps beside a cluster made as `run` makes its own
    SideBySide,
    /// every benchmark once, quick, and the load breakdown
    Bench,
    /// the Docker image, container tests and a short soak
    Docker,
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
    /// The fixtures' scale: `operations` (the Operations page's sizes; about an hour on two
    /// cores), `medium` (a tenth of that) or `small`.
    #[arg(long, value_enum, default_value_t = BenchScale::Operations)]
    pub scale: BenchScale,
    /// How many bench binaries run at once (core, sql, then the allocator pair). More halves
    /// the wall time on a machine with cores to spare; each ratio is still measured side by
    /// side within one binary.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Only the benchmarks whose id (`sql/read title/pg_automerge/rich-text-operations`:
    /// level/operation, variant, fixture) matches this regular expression, criterion's
    /// filter: `--filter '^sql/'` runs the SQL level alone. The SQL level's stored sizes and
    /// WAL are `sql/storage/<fixture>`.
    #[arg(long)]
    pub filter: Option<String>,
    /// Instead of the criterion benches, the sync server on Postgres, on Postgres with
    /// access control, and on samod's file-system storage: first sync of stored documents
    /// and change round trips at 1, 10 and 100 samod client pairs; then automerge-repo's
    /// JS clients against it and against automerge-repo's Node server at 10, 100 and 500
    /// pairs; report in results/sync-bench-<date>-<commit>/.
    #[arg(long)]
    pub sync: bool,
    /// With --sync: how many times each storage is measured, the three rotating; the
    /// report gives medians over them. 5 by default, 1 with --quick.
    #[arg(long, requires = "sync")]
    pub repeats: Option<usize>,
    /// With --sync: then record where the machine's and the server's time go (perf) while
    /// JS clients run 100 pairs against the server, into the report's profile-100-pairs.md.
    #[arg(long, requires = "sync")]
    pub profile: bool,
    /// Instead of the benches, where the automerge crate's load of each fixture (the
    /// --scale's, with its compacted twin, and those made by @automerge/automerge) spends
    /// its time and peak heap, beside passes over the save's columns alone; no PostgreSQL.
    /// Report in results/load-breakdown-<date>-<scale>-<commit>/.
    #[arg(long, conflicts_with_all = ["sync", "filter", "jobs"])]
    pub load_breakdown: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchScale {
    Small,
    Medium,
    Operations,
}

impl BenchScale {
    pub fn name(self) -> &'static str {
        match self {
            BenchScale::Small => "small",
            BenchScale::Medium => "medium",
            BenchScale::Operations => "operations",
        }
    }
}

#[derive(Args, Debug)]
pub struct FuzzFlags {
    /// How long to fuzz: a number with s, m or h (90s, 20m, 1h).
    #[arg(long, default_value = "20m")]
    pub time: String,
    /// Seed of the mutations; the same seed replays the same inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// What each input runs through: `all` (every byte input of the core crate and the
    /// wrong-change target) or `altered-writes` (an honest change with one field altered at
    /// random, through one entry point: issue 35's mode, cheap enough for millions).
    #[arg(long, value_enum, default_value_t = FuzzTarget::All)]
    pub target: FuzzTarget,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FuzzTarget {
    All,
    AlteredWrites,
}

impl FuzzTarget {
    /// The fuzzer's `--target` value.
    pub fn name(self) -> &'static str {
        match self {
            FuzzTarget::All => "all",
            FuzzTarget::AlteredWrites => "altered-writes",
        }
    }
}

/// `--base` value that selects the Debian base made with debootstrap.
pub const DEBOOTSTRAP_BASE: &str = "debootstrap";

#[derive(Args, Debug)]
pub struct ImageFlags {
    /// Which PostgreSQL majors to build images for (`pg_automerge:pg<major>`): 15, 17, 18
    /// or all.
    #[arg(long, default_value_t = PgChoice::ALL)]
    pub pg: PgChoice,
    /// The image to build on: `debootstrap` (a Debian base made here for each major, no
    /// registry needed) or, with one --pg, a Debian-layout PostgreSQL image of that major
    /// such as the official `postgres:17`.
    #[arg(long, default_value = DEBOOTSTRAP_BASE)]
    pub base: String,
    /// Package the extension (or, with --sync-server, the server) in the debug profile (what
    /// `cargo xtask test` uses) instead of release.
    #[arg(long)]
    pub debug: bool,
    /// Build the sync server's image (docker/sync-server.Dockerfile) instead of the
    /// extension's.
    #[arg(long)]
    pub sync_server: bool,
}

#[derive(Args, Debug)]
pub struct PackageFlags {
    /// Which PostgreSQL majors to package the extension for: 15, 17, 18 or all.
    #[arg(long, default_value_t = PgChoice::ALL)]
    pub pg: PgChoice,
    /// Build in the debug profile (what `cargo xtask test` installs) instead of release.
    #[arg(long)]
    pub debug: bool,
    /// Where to put the packages (default: target/packages).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// `soak --max-load-memory` when not given: the extension's default.
pub const DEFAULT_MAX_LOAD_MEMORY: &str = "2GB";

#[derive(Args, Debug)]
pub struct SoakFlags {
    /// How long the load runs: `70m`, `90s`, `1h`.
    #[arg(long, default_value = "70m", value_parser = parse_duration)]
    pub duration: std::time::Duration,
    /// The container's memory limit (no swap): `4g`, `512m`.
    #[arg(long, default_value = "4g", value_parser = parse_bytes)]
    pub memory: u64,
    /// How many long-lived connections run the mix.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// fastupdate of the GIN index on the documents' jsonb.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub gin_fastupdate: OnOff,
    /// The background compactor (pg_automerge.compactor_database) in the soak's database.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub compactor: OnOff,
    /// pg_automerge.trim_threshold for the run (`64MB`, `-1`).
    #[arg(long, default_value = "64MB", allow_hyphen_values = true)]
    pub trim_threshold: String,
    /// pg_automerge.max_load_memory for the run (`1GB`, `-1`): the extension's default,
    /// which also admits a merge_agg of three medium documents forked and edited by several
    /// writers (estimated at 1.1 GB in a soak of JS-shaped writes).
    #[arg(long, default_value = DEFAULT_MAX_LOAD_MEMORY, allow_hyphen_values = true)]
    pub max_load_memory: String,
    /// The image to build on, as for `cargo xtask image`.
    #[arg(long, default_value = DEBOOTSTRAP_BASE)]
    pub base: String,
}

#[derive(Args, Debug)]
pub struct CitusBenchFlags {
    /// Which PostgreSQL major the nodes run: 17 or 18.
    #[arg(long, value_enum, default_value_t = PgMajor::Pg17)]
    pub pg: PgMajor,
    /// How many times each setup runs the mix, alternating; the report gives medians.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// How long each run lasts, in seconds.
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// How many connections run the mix.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `70m`, `90s`, `2h`, or a number of seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit) =
        text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 =
        number.parse().map_err(|_| format!("`{text}` is not a duration such as 70m or 90s"))?;
    let seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(format!("`{text}`: use s, m or h")),
    };
    Ok(std::time::Duration::from_secs(number * seconds))
}

/// `4g`, `512m`, `4096k`, or a number of bytes.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let lower = text.to_ascii_lowercase();
    let (number, unit) =
        lower.split_at(lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len()));
    let number: u64 =
        number.parse().map_err(|_| format!("`{text}` is not a size such as 4g or 512m"))?;
    let unit = match unit.trim_end_matches('b') {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return Err(format!("`{text}`: use k, m or g")),
    };
    Ok(number * unit)
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
        PgMajor::from_str(text, false)
            .map(PgChoice::from)
            .map_err(|_| format!("`{text}` is not a supported major: choose 15, 17, 18 or all"))
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

    #[test]
    fn durations_and_sizes_parse() {
        assert_eq!(parse_duration("70m"), Ok(std::time::Duration::from_secs(4200)));
        assert_eq!(parse_duration("90s"), Ok(std::time::Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(std::time::Duration::from_secs(7200)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5d").is_err());
        assert_eq!(parse_bytes("4g"), Ok(4 << 30));
        assert_eq!(parse_bytes("512MB"), Ok(512 << 20));
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn bench_takes_a_filter_for_criterion() {
        let filter = "^sql/(read title|heads)/";
        let parsed =
            Xtask::try_parse_from(["xtask", "bench", "--quick", "--filter", filter]).unwrap();
        let Verb::Bench(flags) = parsed.verb else { panic!("not the bench verb") };
        assert_eq!(flags.filter.as_deref(), Some(filter));
        let Verb::Bench(flags) = Xtask::try_parse_from(["xtask", "bench"]).unwrap().verb else {
            panic!()
        };
        assert_eq!(flags.filter, None);
    }

    #[test]
    fn soak_settings_take_minus_one() {
        let parsed = Xtask::try_parse_from([
            "xtask",
            "soak",
            "--trim-threshold",
            "-1",
            "--max-load-memory",
            "-1",
        ])
        .unwrap();
        let Verb::Soak(flags) = parsed.verb else { panic!("not the soak verb") };
        assert_eq!((flags.trim_threshold.as_str(), flags.max_load_memory.as_str()), ("-1", "-1"));
        assert_eq!(flags.duration, std::time::Duration::from_secs(4200));
    }
}
