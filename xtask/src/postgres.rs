//! The PostgreSQL majors we support, where each comes from, and where its files live.

use std::path::PathBuf;

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum PgMajor {
    #[value(name = "15")]
    Pg15,
    #[value(name = "17")]
    Pg17,
    #[value(name = "18")]
    Pg18,
}

/// Where a major's server and headers come from.
pub enum Provenance {
    /// Debian's binary packages, installed by apt.
    DebianPackages { packages: &'static [&'static str], bindir: &'static str },
    /// The upstream tarball inside Debian's source package, built into the cache.
    DebianSource { package: &'static str, suites: &'static [&'static str] },
}

impl PgMajor {
    pub const ALL: [PgMajor; 3] = [PgMajor::Pg15, PgMajor::Pg17, PgMajor::Pg18];

    pub fn number(self) -> u32 {
        match self {
            PgMajor::Pg15 => 15,
            PgMajor::Pg17 => 17,
            PgMajor::Pg18 => 18,
        }
    }

    /// The cargo feature and `cargo pgrx` argument that select this major.
    pub fn pgrx_name(self) -> String {
        format!("pg{}", self.number())
    }

    pub fn provenance(self) -> Provenance {
        match self {
            PgMajor::Pg15 => Provenance::DebianPackages {
                packages: &["postgresql-15", "postgresql-server-dev-15"],
                bindir: "/usr/lib/postgresql/15/bin",
            },
            // Stable's point releases live in the security and updates suites as well.
            PgMajor::Pg17 => Provenance::DebianSource {
                package: "postgresql-17",
                suites: &["trixie", "trixie-updates", "trixie-security"],
            },
            PgMajor::Pg18 => {
                Provenance::DebianSource { package: "postgresql-18", suites: &["sid"] }
            }
        }
    }

    /// The directory holding this major's `pg_config`, `postgres`, `initdb`, `psql`.
    pub fn bindir(self) -> PathBuf {
        match self.provenance() {
            Provenance::DebianPackages { bindir, .. } => PathBuf::from(bindir),
            Provenance::DebianSource { .. } => self.build_prefix().join("bin"),
        }
    }

    pub fn pg_config(self) -> PathBuf {
        self.bindir().join("pg_config")
    }

    /// Where a major built from source is installed.
    pub fn build_prefix(self) -> PathBuf {
        cache_dir().join(format!("pg{}", self.number())).join("install")
    }
}

impl std::fmt::Display for PgMajor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgreSQL {}", self.number())
    }
}

/// Built PostgreSQL trees and downloads are kept here, outside the work tree, so that a
/// fresh clone or `cargo clean` never rebuilds them. As root it is `/var/cache/pg_automerge`
/// (the cluster user must be able to run the binaries, and root's home is closed to it);
/// otherwise the user's cache directory. `PG_AUTOMERGE_CACHE` overrides both.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PG_AUTOMERGE_CACHE") {
        return PathBuf::from(dir);
    }
    if is_root() {
        return PathBuf::from("/var/cache/pg_automerge");
    }
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join("pg_automerge")
}

/// Clusters refuse to run as root, so as root every cluster runs as this user
/// (Debian's `postgres`, created by the postgresql packages).
pub const CLUSTER_USER: &str = "postgres";

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// The user clusters run as: `postgres` when we are root, ourselves otherwise.
pub fn cluster_user() -> Option<&'static str> {
    is_root().then_some(CLUSTER_USER)
}
