//! One PostgreSQL server, controlled as a test or `cargo xtask` needs it: initdb, start,
//! stop, SIGKILL of the postmaster, a hot standby by pg_basebackup, psql and the client
//! programs, run as an unprivileged user when we are root (Postgres refuses to run as root).
//! xtask decides where each cluster lives and hands a test its servers through environment
//! variables (`Server::env` and `Server::from_env`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The database user every cluster is initialised with.
pub const SUPERUSER: &str = "postgres";

#[derive(Clone, Debug)]
pub struct Server {
    /// Where its server programs are (`initdb`, `pg_ctl`, `pg_basebackup`, `pg_dump`).
    pub bindir: PathBuf,
    /// Where `psql` and `pg_isready` are: the major's own, whichever install the server runs.
    pub client_bindir: PathBuf,
    pub data_dir: PathBuf,
    pub log_file: PathBuf,
    pub port: u16,
    /// The user the server programs run as, through sudo, when that is not ourselves.
    pub user: Option<String>,
    /// Server settings beyond the ones every cluster gets, as `-c name=value` options.
    pub settings: Vec<String>,
}

impl Server {
    /// The environment variables that hand this server to a test as `role` (`PRIMARY`).
    pub fn env(&self, role: &str) -> Vec<(String, String)> {
        let path = |p: &Path| p.display().to_string();
        [
            ("BINDIR", path(&self.bindir)),
            ("CLIENT_BINDIR", path(&self.client_bindir)),
            ("DATA", path(&self.data_dir)),
            ("LOG", path(&self.log_file)),
            ("PORT", self.port.to_string()),
            ("USER", self.user.clone().unwrap_or_default()),
            ("SETTINGS", self.settings.join("\n")),
        ]
        .into_iter()
        .map(|(name, value)| (env_name(role, name), value))
        .collect()
    }

    /// The server xtask handed to this test as `role`, by `Server::env`.
    pub fn from_env(role: &str) -> Server {
        let var = |name: &str| crate::env(&env_name(role, name));
        let lines = |text: String| text.lines().map(str::to_string).collect::<Vec<_>>();
        Server {
            bindir: var("BINDIR").into(),
            client_bindir: var("CLIENT_BINDIR").into(),
            data_dir: var("DATA").into(),
            log_file: var("LOG").into(),
            port: var("PORT").parse().expect("a port number"),
            user: Some(var("USER")).filter(|user| !user.is_empty()),
            settings: lines(var("SETTINGS")),
        }
    }

    /// A command that runs `program` from this server's install as the cluster user.
    fn server_command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        match &self.user {
            Some(user) => {
                let mut command = Command::new("sudo");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    /// Removes the cluster's data, stopping it first: the next `init` starts afresh.
    pub fn wipe(&self) -> Result<()> {
        self.stop()?;
        if self.data_dir.exists() {
            std::fs::remove_dir_all(&self.data_dir)?;
        }
        Ok(())
    }

    pub fn init(&self) -> Result<()> {
        if self.data_dir.join("PG_VERSION").exists() {
            return Ok(());
        }
        let mut initdb = self.server_command("initdb");
        initdb
            .arg("--pgdata")
            .arg(&self.data_dir)
            .args(["--username", SUPERUSER, "--auth", "trust", "--encoding", "UTF8"])
            .args(["--locale", "C.UTF-8", "--no-instructions"]);
        run_quietly(initdb, "initdb")
    }

    pub fn is_running(&self) -> bool {
        self.postmaster().is_some()
    }

    /// The process id of this cluster's postmaster, when it runs: the first line of
    /// `postmaster.pid`, if that process works in this data directory. After a crash or a
    /// restart of the machine the file stays, and its number may belong to another process
    /// by then (which `pg_ctl status` would take for the server).
    pub fn postmaster(&self) -> Option<u32> {
        let pid = self.postmaster_pid().ok()?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        (std::fs::canonicalize(&self.data_dir).ok()? == cwd).then_some(pid)
    }

    /// The number in a `postmaster.pid` left behind by a postmaster that is gone.
    pub fn stale_postmaster_pid(&self) -> Option<u32> {
        self.postmaster().is_none().then(|| self.postmaster_pid().ok()).flatten()
    }

    /// Whether the server accepts connections within `seconds` (`pg_isready`).
    pub fn answers(&self, seconds: u32) -> bool {
        Command::new(self.client_bindir.join("pg_isready"))
            .args(self.server_args())
            .args(["-t", &seconds.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub fn start(&self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        // The lock file of a server that is gone. PostgreSQL removes it itself unless its
        // number now belongs to another process, as it may after the machine restarted.
        let lock = self.data_dir.join("postmaster.pid");
        if lock.exists() {
            std::fs::remove_file(&lock).with_context(|| format!("removing {}", lock.display()))?;
        }
        // TCP only: a Unix socket under a deep checkout would pass the 107-byte path limit.
        let options = format!(
            "-p {} -c unix_socket_directories= -c listen_addresses=127.0.0.1 \
             -c default_toast_compression=lz4 -c shared_preload_libraries=pg_automerge \
             -c timezone=UTC",
            self.port
        );
        let options = std::iter::once(options)
            .chain(self.settings.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        let mut start = self.server_command("pg_ctl");
        start
            .arg("start")
            .arg("--wait")
            .arg("--pgdata")
            .arg(&self.data_dir)
            .arg("--log")
            .arg(&self.log_file)
            .arg("--options")
            .arg(options);
        run_quietly(start, "pg_ctl start")
            .with_context(|| format!("see the server log {}", self.log_file.display()))
    }

    pub fn stop(&self) -> Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        let pg_ctl_stop = |mode: &str| {
            let mut stop = self.server_command("pg_ctl");
            stop.arg("stop")
                .arg("--wait")
                .args(["--mode", mode])
                .arg("--pgdata")
                .arg(&self.data_dir);
            run_quietly(stop, &format!("pg_ctl stop --mode {mode}"))
        };
        // A server that does not finish its fast shutdown in pg_ctl's minute is stopped at once.
        pg_ctl_stop("fast").or_else(|_| pg_ctl_stop("immediate"))
    }

    /// Starts the cluster after it crashed, retrying while the children of a killed
    /// postmaster still hold the old shared memory (they exit once they notice).
    pub fn start_after_crash(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.start() {
                Ok(()) => return Ok(()),
                Err(err) if Instant::now() > deadline => return Err(err),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Kills the postmaster with SIGKILL, as a crash or the OOM killer would, and waits
    /// until it is gone (its children may live on a moment).
    pub fn kill_postmaster(&self) -> Result<()> {
        let pid = self.postmaster_pid()?;
        sigkill(pid)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.is_running() {
            if Instant::now() > deadline {
                bail!("the postmaster {pid} still runs 30s after SIGKILL");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The postmaster's process id, from the first line of `postmaster.pid`.
    pub fn postmaster_pid(&self) -> Result<u32> {
        let lock = std::fs::read_to_string(self.data_dir.join("postmaster.pid"))
            .context("reading postmaster.pid: is the cluster running?")?;
        let pid = lock.lines().next().unwrap_or_default().trim();
        pid.parse().with_context(|| format!("postmaster.pid starts with `{pid}`"))
    }

    /// Makes this cluster a hot standby of `primary`: its data directory becomes a
    /// `pg_basebackup` of the primary's, set up to stream from it (`-R`).
    pub fn base_backup_of(&self, primary: &Server) -> Result<()> {
        self.wipe()?;
        let mut backup = self.server_command("pg_basebackup");
        backup
            .arg("--pgdata")
            .arg(&self.data_dir)
            .args(["--write-recovery-conf", "--wal-method", "stream", "--checkpoint", "fast"])
            // A copy for a test standby, which need not outlive a power loss.
            .arg("--no-sync")
            .args(primary.server_args());
        run_quietly(backup, "pg_basebackup")
    }

    /// Runs one of the major's client programs (`pg_dump`, `pg_restore`) as the cluster
    /// user, connected to `database`, failing with its output when it fails.
    pub fn run_client(&self, program: &str, database: &str, args: &[&str]) -> Result<()> {
        let mut client = self.server_command(program);
        client.args(self.connection_args(database)).args(args);
        run_quietly(client, program)
    }

    /// The arguments that connect psql, or any libpq client, to `database`.
    pub fn connection_args(&self, database: &str) -> Vec<String> {
        let mut args = self.server_args();
        args.extend(["-d".into(), database.into()]);
        args
    }

    /// The host, port and user arguments, for clients (pg_basebackup) that take no database.
    fn server_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string(),
            "-U".into(),
            SUPERUSER.into(),
        ]
    }

    /// The libpq connection string for `database`, as drivers and psql take it.
    pub fn conninfo(&self, database: &str) -> String {
        format!("host=127.0.0.1 port={} user={SUPERUSER} dbname={database}", self.port)
    }

    pub fn psql_path(&self) -> PathBuf {
        self.client_bindir.join("psql")
    }

    /// Runs `script` through psql, stopping at the first error.
    pub fn psql(&self, database: &str, script: &str) -> Result<String> {
        let output = self.psql_session(database, script, &["-v", "ON_ERROR_STOP=1"])?;
        if !output.success {
            bail!("psql failed:\n{}", output.text);
        }
        Ok(output.text)
    }

    /// The result of `query` alone (`psql -t -A`), trimmed; an error when psql fails.
    pub fn psql_value(&self, database: &str, query: &str) -> Result<String> {
        let output = self.psql_session(database, query, &["-v", "ON_ERROR_STOP=1", "-t", "-A"])?;
        if !output.success {
            bail!("psql failed:\n{}", output.text);
        }
        Ok(output.text.trim().to_string())
    }

    /// Runs `script` through psql as a person would see it: results and errors interleaved
    /// in one stream, going on after errors.
    pub fn psql_session(&self, database: &str, script: &str, extra: &[&str]) -> Result<PsqlOutput> {
        let (mut reader, writer) = std::io::pipe()?;
        let mut child = Command::new(self.psql_path())
            .args(["-X", "-q"])
            .args(extra)
            .args(self.connection_args(database))
            .stdin(Stdio::piped())
            .stdout(writer.try_clone()?)
            .stderr(writer)
            .spawn()
            .context("starting psql")?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let script = script.to_string();
        let feeder = std::thread::spawn(move || stdin.write_all(script.as_bytes()));
        // The child holds the only writers left once `command` is dropped, so this read
        // ends when psql exits.
        let mut text = String::new();
        reader.read_to_string(&mut text)?;
        let status = child.wait()?;
        feeder.join().expect("the stdin feeder does not panic")?;
        Ok(PsqlOutput { success: status.success(), text })
    }
}

pub struct PsqlOutput {
    pub success: bool,
    pub text: String,
}

/// `PG_AUTOMERGE_<ROLE>_<NAME>`: one variable of a server handed to a test.
fn env_name(role: &str, name: &str) -> String {
    format!("PG_AUTOMERGE_{role}_{name}")
}

/// Sends SIGKILL to a server process: ours, or the cluster user's when we are root.
pub fn sigkill(pid: u32) -> Result<()> {
    let pid = libc::pid_t::try_from(pid)?;
    // SAFETY: kill(2) takes plain integers; a pid that is gone gives ESRCH, reported below.
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        bail!("SIGKILL to process {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs a command, showing its output only when it fails.
fn run_quietly(mut command: Command, what: &str) -> Result<()> {
    let output = command.output().with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
