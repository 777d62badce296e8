//! Local PostgreSQL clusters for `run` and for the tests: initdb, start, stop and psql,
//! run as an unprivileged user when we are root (Postgres refuses to run as root).

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::install::PgInstall;
use crate::postgres::{cluster_user, PgMajor};
use crate::project_root;
use crate::util::note;

/// The database user every cluster is initialised with.
pub const SUPERUSER: &str = "postgres";

pub struct Cluster {
    pub major: PgMajor,
    /// Holds `data/`, the server log, the socket and the port file.
    pub dir: PathBuf,
    pub port: u16,
    /// The install whose server programs (and so libraries) the cluster runs.
    pub install: PgInstall,
    /// Server settings beyond the ones every cluster gets, as `-c name=value` options.
    settings: Vec<String>,
}

impl Cluster {
    /// The cluster named `purpose` (such as "run" or "test") for `major`, under `target/`.
    /// Its port is chosen once and kept, so that a later `run --stop` finds it.
    pub fn new(sh: &Shell, major: PgMajor, purpose: &str) -> Result<Cluster> {
        let dir = clusters_dir(sh)?.join(format!("{purpose}-pg{}", major.number()));
        fs::create_dir_all(&dir)?;
        let port_file = dir.join("port");
        let port = match fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()) {
            Some(port) => port,
            None => {
                let port = free_port()?;
                fs::write(&port_file, port.to_string())?;
                port
            }
        };
        if let Some(user) = cluster_user() {
            cmd!(sh, "chown -R {user} {dir}").quiet().run()?;
        }
        Ok(Cluster { major, dir, port, install: PgInstall::shared(major), settings: Vec::new() })
    }

    /// This cluster, run from `install` rather than from the major's shared install.
    pub fn with_install(mut self, install: PgInstall) -> Cluster {
        self.install = install;
        self
    }

    /// This cluster, started with `name = value` as well (`wal_level = logical`, say).
    pub fn with_setting(mut self, name: &str, value: &str) -> Cluster {
        self.settings.push(format!("-c {name}={value}"));
        self
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn log_file(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A command that runs `program` from this cluster's install as the cluster user.
    fn server_command(&self, program: &str) -> Command {
        let path = self.install.bindir().join(program);
        match cluster_user() {
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
        if self.data_dir().exists() {
            std::fs::remove_dir_all(self.data_dir())?;
        }
        Ok(())
    }

    pub fn init(&self) -> Result<()> {
        if self.data_dir().join("PG_VERSION").exists() {
            return Ok(());
        }
        let mut initdb = self.server_command("initdb");
        initdb
            .arg("--pgdata")
            .arg(self.data_dir())
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
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
        (fs::canonicalize(self.data_dir()).ok()? == cwd).then_some(pid)
    }

    /// The number in a `postmaster.pid` left behind by a postmaster that is gone.
    pub fn stale_postmaster_pid(&self) -> Option<u32> {
        self.postmaster().is_none().then(|| self.postmaster_pid().ok()).flatten()
    }

    /// Whether the server accepts connections within `seconds` (`pg_isready`).
    pub fn answers(&self, seconds: u32) -> bool {
        Command::new(self.major.bindir().join("pg_isready"))
            .args(self.server_args())
            .args(["-t", &seconds.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts a cluster whatever state it was left in, saying what it found when that was
    /// not a clean stop: down after a crash or a restart of the machine (a stale
    /// `postmaster.pid`), or a postmaster that no longer answers, which is stopped first.
    /// A cluster that runs and answers is left alone.
    pub fn ensure_up(&self) -> Result<()> {
        if let Some(pid) = self.postmaster() {
            // A server in crash recovery rejects connections for a while, then answers.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while std::time::Instant::now() < deadline {
                if self.answers(5) {
                    return Ok(());
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            note(format!(
                "the {} cluster's postmaster (process {pid}) runs but has not answered for a \
                 minute: stopping it and starting it again (server log: {})",
                self.major,
                self.log_file().display()
            ));
            self.stop()?;
        } else if let Ok(pid) = self.postmaster_pid() {
            note(format!(
                "the {} cluster was down: its postmaster (process {pid}) is gone without \
                 shutting down (a crash, or the machine restarted); starting it again \
                 (server log: {})",
                self.major,
                self.log_file().display()
            ));
        }
        self.start_after_crash()
    }

    pub fn start(&self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        // The lock file of a server that is gone. PostgreSQL removes it itself unless its
        // number now belongs to another process, as it may after the machine restarted.
        let lock = self.data_dir().join("postmaster.pid");
        if lock.exists() {
            fs::remove_file(&lock).with_context(|| format!("removing {}", lock.display()))?;
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
            .arg(self.data_dir())
            .arg("--log")
            .arg(self.log_file())
            .arg("--options")
            .arg(options);
        run_quietly(start, "pg_ctl start")
            .with_context(|| format!("see the server log {}", self.log_file().display()))
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
                .arg(self.data_dir());
            run_quietly(stop, &format!("pg_ctl stop --mode {mode}"))
        };
        // A server that does not finish its fast shutdown in pg_ctl's minute is stopped at once.
        pg_ctl_stop("fast").or_else(|_| pg_ctl_stop("immediate"))
    }

    /// Starts the cluster after it crashed, retrying while the children of a killed
    /// postmaster still hold the old shared memory (they exit once they notice).
    pub fn start_after_crash(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match self.start() {
                Ok(()) => return Ok(()),
                Err(err) if std::time::Instant::now() > deadline => return Err(err),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            }
        }
    }

    /// Kills the postmaster with SIGKILL, as a crash or the OOM killer would, and waits
    /// until it is gone (its children may live on a moment).
    pub fn kill_postmaster(&self) -> Result<()> {
        let pid = self.postmaster_pid()?;
        sigkill(pid)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.is_running() {
            if std::time::Instant::now() > deadline {
                bail!("the postmaster {pid} still runs 30s after SIGKILL");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(())
    }

    /// The postmaster's process id, from the first line of `postmaster.pid`.
    fn postmaster_pid(&self) -> Result<u32> {
        let lock = fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .context("reading postmaster.pid: is the cluster running?")?;
        let pid = lock.lines().next().unwrap_or_default().trim();
        pid.parse().with_context(|| format!("postmaster.pid starts with `{pid}`"))
    }

    /// Makes this cluster a hot standby of `primary`: its data directory becomes a
    /// `pg_basebackup` of the primary's, set up to stream from it (`-R`).
    pub fn base_backup_of(&self, primary: &Cluster) -> Result<()> {
        self.wipe()?;
        let mut backup = self.server_command("pg_basebackup");
        backup
            .arg("--pgdata")
            .arg(self.data_dir())
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

    /// The line a person types to connect.
    pub fn psql_line(&self, database: &str) -> String {
        format!("{} {}", self.psql_path().display(), self.connection_args(database).join(" "))
    }

    pub fn psql_path(&self) -> PathBuf {
        self.major.bindir().join("psql")
    }

    /// Runs `script` through psql, stopping at the first error.
    pub fn psql(&self, database: &str, script: &str) -> Result<String> {
        let output = self.psql_session(database, script, &["-v", "ON_ERROR_STOP=1"])?;
        if !output.success {
            bail!("psql failed:\n{}", output.text);
        }
        Ok(output.text)
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

/// `target/xtask` when the cluster user can reach it; otherwise (a checkout inside a home
/// directory closed to other users, say) a directory under /var/tmp of this checkout's own.
pub fn clusters_dir(sh: &Shell) -> Result<PathBuf> {
    let in_target = project_root().join("target/xtask");
    fs::create_dir_all(&in_target)?;
    let Some(user) = cluster_user() else { return Ok(in_target) };
    if cmd!(sh, "sudo -u {user} -- test -x {in_target}").quiet().ignore_stderr().run().is_ok() {
        return Ok(in_target);
    }
    let fallback = Path::new("/var/tmp").join(format!("pg_automerge-{}", checkout_id()));
    fs::create_dir_all(&fallback)?;
    Ok(fallback)
}

/// A short name for this checkout, for paths that must not collide with another's, or be
/// long (pgrx puts a Unix socket in its test cluster's directory).
pub fn checkout_id() -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(project_root().as_os_str().as_encoded_bytes())[..4])
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

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
