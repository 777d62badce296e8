//! Running the benches: the fixtures, the extension installed, a cluster for the SQL level,
//! and `cargo bench` for each bench binary.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use xshell::Shell;

use super::criterion::{add_peaks, read_estimates, read_storage, read_times};
use super::Results;
use crate::cluster::Cluster;
use crate::fixtures;
use crate::flags::BenchScale;
use crate::install::PgInstall;
use crate::postgres::PgMajor;
use crate::project_root;
use crate::provenance::Provenance;
use crate::run::{start_with_samples, Fresh, DATABASE};
use crate::util::{note, step};
use benches::measurements::{Row, StorageMeasure};

/// Runs every bench and returns what they measured; `quick` uses the small fixtures, the
/// shortest measurement and debug builds, as a check that each bench still runs.
pub(super) fn measure(
    sh: &Shell,
    major: PgMajor,
    scale: BenchScale,
    jobs: usize,
    filter: Option<&str>,
) -> Result<Results> {
    let quick = scale == BenchScale::Small;
    let fixture_table = step(&format!("fixtures ({} scale)", scale.name()), || {
        fixtures::generate(sh, Some(scale))
    })?;
    // The extension as users run it; a quick run reuses the debug build the tests made.
    step(&format!("install the extension into {major}"), || {
        PgInstall::shared(major).install_extension(sh, !quick)
    })?;
    let cluster = step(&format!("start a {major} cluster for the SQL benches"), || {
        start_with_samples(Cluster::new(sh, major, "bench")?, Fresh::Yes)
    })?;
    // Recorded before measuring: what was built and run, not what the tree became meanwhile.
    let server_version = cluster.server_description(DATABASE)?;
    let mut command = match quick {
        true => "cargo xtask bench --quick".to_string(),
        false => format!("cargo xtask bench --pg {} --scale {}", major.number(), scale.name()),
    };
    if jobs > 1 {
        command += &format!(" --jobs {jobs}");
    }
    if let Some(filter) = filter {
        command += &format!(" --filter '{filter}'");
    }
    let provenance = Provenance::collect(sh, &command, &[("PostgreSQL", server_version)])?;
    let files = BenchFiles::fresh()?;
    let benches = step("criterion benches", || {
        let run = |bench: &str| -> Result<std::process::Child> {
            let mut cargo = files.cargo_bench(bench, scale, filter);
            cargo.env("PG_AUTOMERGE_CONNECTION", cluster.conninfo(DATABASE));
            cargo.spawn().with_context(|| format!("starting cargo bench --bench {bench}"))
        };
        // `core` and `sql` may run side by side (`--jobs`); the allocator pair runs one after
        // the other, alone, since its ratio compares two binaries; the clients' loads time
        // Node beside criterion, alone too.
        let batches: [&[&str]; 4] = [
            &["core", "sql"],
            &["load_counting_allocator"],
            &["load_system_allocator"],
            &["client_loads"],
        ];
        for batch in batches {
            for chunk in batch.chunks(jobs.max(1)) {
                let children: Vec<_> = chunk
                    .iter()
                    .map(|bench| run(bench).map(|child| (bench, child)))
                    .collect::<Result<_>>()?;
                for (bench, mut child) in children {
                    let status = child.wait()?;
                    if !status.success() {
                        bail!("cargo bench --bench {bench} failed ({status})");
                    }
                }
            }
        }
        Ok(())
    });
    cluster.stop()?;
    benches?;
    let (rows, storage) = files.read()?;
    note(format!("{} benchmarks measured", rows.len()));
    Ok(Results { rows, storage, fixture_table, provenance, quick, scale: scale.name() })
}

/// Where the benches write what they measure: criterion's estimates, and beside them the
/// peaks and loads, stored sizes and outside times the benches record.
pub(super) struct BenchFiles {
    criterion_dir: PathBuf,
    peaks: PathBuf,
    storage: PathBuf,
    times: PathBuf,
}

impl BenchFiles {
    /// The files, emptied of an earlier run's.
    pub(super) fn fresh() -> Result<BenchFiles> {
        let criterion_dir = project_root().join("target/criterion");
        if criterion_dir.exists() {
            fs::remove_dir_all(&criterion_dir)?;
        }
        Ok(BenchFiles {
            peaks: criterion_dir.join("peaks.csv"),
            storage: criterion_dir.join("storage.csv"),
            times: criterion_dir.join("times.csv"),
            criterion_dir,
        })
    }

    /// `cargo bench` of one bench binary of the benches crate, on the fixtures of `scale`
    /// (the small ones in debug builds), writing into these files.
    pub(super) fn cargo_bench(
        &self,
        bench: &str,
        scale: BenchScale,
        filter: Option<&str>,
    ) -> Command {
        let mut cargo = Command::new("cargo");
        cargo.args(["bench", "--package", "benches", "--bench", bench]);
        if scale == BenchScale::Small {
            // Reuses the tests' debug build of every dependency instead of a release build.
            cargo.args(["--profile", "dev"]);
        }
        if let Some(filter) = filter {
            // Criterion's filter; the variable lets the benches skip their untimed work
            // (peaks, stored sizes, WAL) for what criterion skips.
            cargo.args(["--", filter]).env("PG_AUTOMERGE_BENCH_FILTER", filter);
        }
        cargo
            .env("PG_AUTOMERGE_BENCH_SCALE", scale.name())
            .env("PG_AUTOMERGE_FIXTURES", fixtures::dir())
            .env("PG_AUTOMERGE_BENCH_PEAKS", &self.peaks)
            .env("PG_AUTOMERGE_BENCH_STORAGE", &self.storage)
            .env("PG_AUTOMERGE_BENCH_TIMES", &self.times)
            .current_dir(project_root());
        cargo
    }

    /// What the benches wrote: a row per benchmark, with its peak and loads where recorded
    /// (the times measured outside criterion among them), and the stored sizes.
    pub(super) fn read(&self) -> Result<(Vec<Row>, Vec<StorageMeasure>)> {
        let mut rows = read_estimates(&self.criterion_dir)?;
        add_peaks(&mut rows, &self.peaks)?;
        rows.extend(read_times(&self.times)?);
        Ok((rows, read_storage(&self.storage)?))
    }
}
