//! The bench's connection to the cluster, and the two ways pg_automerge runs on it.

use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row};

use benches::{Memory, NAIVE, OURS};

/// A connection and the runtime that drives it, used synchronously by criterion.
pub struct Session {
    pub runtime: Runtime,
    pub client: Client,
}

impl Session {
    pub fn connect() -> Session {
        let conninfo = std::env::var("PG_AUTOMERGE_CONNECTION").expect(
            "PG_AUTOMERGE_CONNECTION names the cluster to benchmark (cargo xtask bench sets it)",
        );
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (client, connection) =
            runtime.block_on(tokio_postgres::connect(&conninfo, NoTls)).unwrap();
        runtime.spawn(connection);
        Session { runtime, client }
    }

    pub fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> u64 {
        self.runtime.block_on(self.client.execute(sql, params)).unwrap_or_else(|e| fail(sql, e))
    }

    pub fn batch(&self, sql: &str) {
        self.runtime.block_on(self.client.batch_execute(sql)).unwrap_or_else(|e| fail(sql, e))
    }

    pub fn query_row(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Row {
        self.runtime.block_on(self.client.query_one(sql, params)).unwrap_or_else(|e| fail(sql, e))
    }

    pub fn query_one<T: for<'a> tokio_postgres::types::FromSql<'a>>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> T {
        self.query_row(sql, params).get(0)
    }

    /// Runs `work` once and returns the peak Rust heap it took in the backend, and how many
    /// documents it loaded.
    pub fn memory(&self, work: impl FnOnce()) -> Memory {
        let before: i64 = self.query_one(
            "SELECT allocated_bytes FROM automerge_memory_usage(), automerge_memory_reset()",
            &[],
        );
        work();
        let usage =
            self.query_row("SELECT peak_allocated_bytes, loads FROM automerge_memory_usage()", &[]);
        Memory {
            peak_bytes: (usage.get::<_, i64>(0) - before).max(0) as u64,
            loads: Some(usage.get::<_, i64>(1) as u64),
        }
    }

    /// The WAL one write inserts: the median over `WAL_SAMPLES` writes, each of a new
    /// `input`, since a checkpoint's full-page images or autovacuum can land in any one.
    pub fn wal_bytes<I>(&self, mut input: impl FnMut() -> I, mut write: impl FnMut(I)) -> i64 {
        let mut samples: Vec<i64> = (0..WAL_SAMPLES)
            .map(|_| {
                let input = input();
                let before: String =
                    self.query_one("SELECT pg_current_wal_insert_lsn()::text", &[]);
                write(input);
                self.query_one(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::bigint",
                    &[&before],
                )
            })
            .collect();
        samples.sort_unstable();
        samples[samples.len() / 2]
    }

    /// Sets the session's pg_automerge settings to `path`'s: what it writes follows them.
    pub fn use_path(&self, path: Path) {
        self.batch(match path {
            Path::Fast => "RESET pg_automerge.keep_jsonb; RESET pg_automerge.append_limit",
            Path::Naive => "SET pg_automerge.keep_jsonb = off; SET pg_automerge.append_limit = 0",
        });
    }
}

const WAL_SAMPLES: usize = 5;

pub fn fail(sql: &str, error: tokio_postgres::Error) -> ! {
    match error.as_db_error() {
        Some(db) => panic!("{sql}: {}: {}", db.code().code(), db.message()),
        None => panic!("{sql}: {error}"),
    }
}

/// How pg_automerge runs: as it ships, or on the naive path. Each path has tables of its
/// own, written under its settings, so that its values are stored as that path stores them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Fast,
    Naive,
}

impl Path {
    pub const BOTH: [Path; 2] = [Path::Fast, Path::Naive];

    pub fn variant(self) -> &'static str {
        match self {
            Path::Fast => OURS,
            Path::Naive => NAIVE,
        }
    }

    /// `sql` on this path's tables: `{docs}` is its table of documents, which the names of
    /// its other tables start with.
    pub fn sql(self, sql: &str) -> String {
        sql.replace(
            "{docs}",
            match self {
                Path::Fast => "bench_docs",
                Path::Naive => "naive_docs",
            },
        )
    }
}
