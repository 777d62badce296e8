//! The sync server (`sync_server/`) against a cluster of its own, on loopback: the
//! checks of `cargo xtask test --only sync` (the JS clients of examples/sync-client, the
//! samod client tests, a restart, two servers on one database, the health endpoint, the
//! snippet of docs/sync-server.md, the server's memory after 10,000 documents; then access
//! control: two servers checking tokens on a database set up with docs/sync-server.md's
//! example), and the server processes that `run` and the benchmark start too.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::cluster::{clusters_dir, Cluster, SUPERUSER};
use crate::postgres::PgMajor;
use crate::util::{counted, note, npm_dependencies, Counts};
use crate::{cargo_target_dir, project_root};

/// The one major the sync step runs on: the server uses nothing that differs between
/// majors beyond what the extension's own steps test on each.
pub const MAJOR: PgMajor = PgMajor::Pg17;

/// The server binary, built by [`build_server`].
fn server_binary(release: bool) -> PathBuf {
    let profile = if release { "release" } else { "debug" };
    cargo_target_dir().join(profile).join("pg_automerge_sync_server")
}

/// Builds the server (and, for the tests, its samod client tests).
pub fn build_server(release: bool) -> Result<()> {
    let mut cargo = Command::new("cargo");
    cargo.args(["build", "-p", "sync_server", "--bin", "pg_automerge_sync_server"]);
    if release {
        cargo.arg("--release");
    }
    if !cargo.current_dir(project_root()).status()?.success() {
        bail!("building the sync server failed");
    }
    Ok(())
}

/// A running server process; stopped (SIGTERM, then SIGKILL after 10 s) when dropped.
pub struct SyncServer {
    child: Child,
    pub url: String,
    pub log: PathBuf,
}

/// What a server stores in: a cluster's database, or a directory.
pub enum ServerStorage<'a> {
    Postgres(&'a Cluster, &'a str),
    Filesystem(&'a Path),
}

impl SyncServer {
    /// Starts a server on a free loopback port with the `access` flags (who may connect),
    /// logging to `<clusters>/sync-<name>.log`, and waits for its `listening on ws://…`
    /// line.
    pub fn start(
        sh: &Shell,
        storage: ServerStorage,
        name: &str,
        release: bool,
        access: &[String],
    ) -> Result<SyncServer> {
        let log = clusters_dir(sh)?.join(format!("sync-{name}.log"));
        let mut command = Command::new(server_binary(release));
        command.args(["--listen", "127.0.0.1:0"]).args(access);
        match storage {
            ServerStorage::Postgres(cluster, database) => {
                command.arg("--database-url").arg(cluster.conninfo(database));
            }
            ServerStorage::Filesystem(dir) => {
                command.arg("--filesystem-storage").arg(dir);
            }
        }
        command
            .env_remove("DATABASE_URL")
            // The default levels, which the memory check holds to a line per connection.
            .env_remove("RUST_LOG");
        SyncServer::spawn(command, log)
    }

    /// Starts `command`, a server that prints `listening on ws://…` first, its stderr
    /// appended to `log`, and waits for that line.
    pub fn spawn(mut command: Command, log: PathBuf) -> Result<SyncServer> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::options().create(true).append(true).open(&log)?)
            .spawn()
            .with_context(|| format!("starting {:?}", command.get_program()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next());
            // Keep reading so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = receiver.recv_timeout(Duration::from_secs(60));
        let url = match line {
            Ok(Some(Ok(line))) => line.strip_prefix("listening on ").map(str::to_string),
            _ => None,
        };
        let Some(url) = url else {
            let _ = child.kill();
            bail!("{:?} did not start; its log: {}", command.get_program(), log.display());
        };
        Ok(SyncServer { child, url, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server as a container stop would (SIGTERM), waiting for it to flush.
    pub fn stop(mut self) -> Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = libc::pid_t::try_from(self.child.id())?;
        // SAFETY: kill(2) takes plain integers; the child is ours and not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                note(format!("the sync server {} ignored SIGTERM for 10s: killing it", self.url));
                self.child.kill()?;
                self.child.wait()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for SyncServer {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}

/// The access flags of a server anyone may use: local runs, the benchmark's baseline and
/// the checks that predate access control.
pub fn anonymous() -> Vec<String> {
    vec!["--allow-anonymous".to_string()]
}

/// A server for `cargo xtask run`, anonymous: detached (its own process group, so that it outlives
/// xtask, as the cluster does), its pid in `<name>.pid` and its log in `<name>.log` under
/// the clusters' directory. One started before is stopped first (the binary may be new).
/// Returns the URL clients connect to.
pub fn start_detached(
    sh: &Shell,
    cluster: &Cluster,
    database: &str,
    name: &str,
    release: bool,
) -> Result<String> {
    stop_detached(sh, name)?;
    let dir = clusters_dir(sh)?;
    let log = dir.join(format!("{name}.log"));
    let output = dir.join(format!("{name}.out"));
    let child = std::os::unix::process::CommandExt::process_group(
        Command::new(server_binary(release))
            .args(["--listen", "127.0.0.1:0", "--allow-anonymous", "--database-url"])
            .arg(cluster.conninfo(database))
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&output)?)
            .stderr(std::fs::File::options().create(true).append(true).open(&log)?),
        0,
    )
    .spawn()
    .context("starting the sync server")?;
    std::fs::write(dir.join(format!("{name}.pid")), child.id().to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let printed = std::fs::read_to_string(&output).unwrap_or_default();
        if let Some(url) = printed.lines().find_map(|l| l.strip_prefix("listening on ")) {
            return Ok(url.to_string());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the sync server did not start within 60s; its log: {}", log.display())
}

/// Stops the detached server `name` if it runs (SIGTERM: it flushes, then exits). Returns
/// whether one ran.
pub fn stop_detached(sh: &Shell, name: &str) -> Result<bool> {
    let pid_file = clusters_dir(sh)?.join(format!("{name}.pid"));
    let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse().ok())
    else {
        return Ok(false);
    };
    std::fs::remove_file(&pid_file)?;
    // Only our server: after a restart of the machine the number may be another process's.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    if !exe.to_string_lossy().contains("pg_automerge_sync_server") {
        return Ok(false);
    }
    // SAFETY: kill(2) takes plain integers; the process is checked to be our server.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(35);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(true)
}

/// The URL that node's `pg` takes for a database of the cluster.
pub fn postgres_url(cluster: &Cluster, database: &str) -> String {
    format!("postgresql://{SUPERUSER}@127.0.0.1:{}/{database}", cluster.port)
}

/// One pass or one failure.
fn one(passed: bool) -> Counts {
    Counts { passed: usize::from(passed), failed: usize::from(!passed) }
}

/// Runs a check of examples/sync-client/driver.mjs, its output passed through; `extra`
/// are more of its arguments.
fn driver(sh: &Shell, check: &str, servers: &[&SyncServer], db: &Db, extra: &[String]) -> Counts {
    let _dir = sh.push_dir("examples/sync-client");
    let pg = db.url();
    let mut args = vec![check.to_string(), "--pg".into(), pg];
    args.extend_from_slice(extra);
    for server in servers {
        args.extend(["--server".into(), server.url.clone()]);
    }
    args.extend([
        "--state".into(),
        project_root().join("target/sync-restart.json").display().to_string(),
    ]);
    let passed = cmd!(sh, "node driver.mjs {args...}").run().is_ok();
    if !passed {
        note(format!("driver check `{check}` failed; server logs: {}", log_list(servers)));
    }
    one(passed)
}

fn log_list(servers: &[&SyncServer]) -> String {
    servers.iter().map(|s| s.log.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// `/health` answers 200 while Postgres does.
fn health(server: &SyncServer) -> Result<Counts> {
    let host = server.url.trim_start_matches("ws://");
    let mut stream = std::net::TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let passed = response.starts_with("HTTP/1.1 200") && response.ends_with("ok\n");
    if !passed {
        note(format!("/health answered: {response}"));
    }
    Ok(one(passed))
}

/// The first ```js block of docs/sync-server.md, run as it is with node from
/// examples/sync-client (whose node_modules it imports); it must print `synced`.
fn documentation_snippet(sh: &Shell, server: &SyncServer, db: &Db) -> Result<Counts> {
    let page = std::fs::read_to_string(project_root().join("docs/sync-server.md"))?;
    let snippet = page
        .split("```js\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .context("docs/sync-server.md has no ```js block")?;
    let _dir = sh.push_dir("examples/sync-client");
    let output = cmd!(sh, "node --input-type=module --eval {snippet}")
        .env("SYNC_SERVER_URL", &server.url)
        .env("DATABASE_URL", db.url())
        .ignore_status()
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let passed = output.status.success() && stdout.contains("synced");
    if !passed {
        note(format!(
            "the docs/sync-server.md snippet failed:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(one(passed))
}

/// The samod client tests of sync_server/tests/`file`.rs, with `env` naming what they
/// run against; `shown`: what they print to stderr shows as they run.
fn rust_client(file: &str, env: &[(&str, String)], shown: bool) -> Result<Counts> {
    let mut tests = Command::new("cargo");
    tests
        .args(["test", "-p", "sync_server", "--test", file, "--no-fail-fast"])
        .envs(env.iter().map(|(name, value)| (name, value)))
        .current_dir(project_root());
    if shown {
        tests.args(["--", "--nocapture"]);
    }
    counted(tests)
}

/// No server panicked (a bad input that reached a panic would show here).
fn no_panics(logs: &[PathBuf]) -> Result<Counts> {
    let mut panicked = Vec::new();
    for log in logs {
        if std::fs::read_to_string(log)?.contains("panicked") {
            panicked.push(log.display().to_string());
        }
    }
    if !panicked.is_empty() {
        note(format!("a sync server panicked: see {}", panicked.join(", ")));
    }
    Ok(one(panicked.is_empty()))
}

/// The memory test's 10,000 documents over 51 connections left the server's log at its
/// default levels with a few lines per connection, none per document.
fn quiet_log(log: &Path) -> Result<Counts> {
    const MOST_LINES: usize = 500;
    let lines = std::fs::read_to_string(log)?.lines().count();
    let quiet = lines <= MOST_LINES;
    if !quiet {
        note(format!(
            "the memory test's server wrote {lines} log lines at its default levels (at most \
             {MOST_LINES}): see {}",
            log.display()
        ));
    }
    Ok(one(quiet))
}

/// Every check of the sync step, against `database` of `cluster` (which has the
/// extension installed): one pass or failure per check, and the samod tests' counts.
pub fn checks(sh: &Shell, cluster: &Cluster, database: &str) -> Result<Counts> {
    if !npm_dependencies(sh, "examples/sync-client")? {
        bail!("the sync step needs Node.js for its automerge-repo clients");
    }
    build_server(false)?;
    let db = Db { cluster, database: database.to_string() };
    let logs: Vec<PathBuf> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|name| Ok(clusters_dir(sh)?.join(format!("sync-{name}.log"))))
        .collect::<Result<_>>()?;
    for log in &logs {
        if log.exists() {
            std::fs::remove_file(log)?;
        }
    }
    let mut counts = Counts::default();
    let open = anonymous();
    let server = SyncServer::start(sh, db.storage(), "a", false, &open)?;
    counts += health(&server)?;
    for check in ["concurrent", "sql-write", "restart-write"] {
        counts += driver(sh, check, &[&server], &db, &[]);
    }
    server.stop()?;
    let server = SyncServer::start(sh, db.storage(), "a", false, &open)?;
    counts += driver(sh, "restart-read", &[&server], &db, &[]);
    let second = SyncServer::start(sh, db.storage(), "b", false, &open)?;
    counts += driver(sh, "two-servers", &[&server, &second], &db, &[]);
    counts += rust_client(
        "against_server",
        &[("SYNC_SERVER_URL", second.url.clone()), ("SYNC_DATABASE_URL", db.conninfo())],
        false,
    )?;
    counts += documentation_snippet(sh, &server, &db)?;
    drop((server, second));
    // A server of its own, so that its memory is the memory test's alone.
    let server = SyncServer::start(sh, db.storage(), "e", false, &open)?;
    counts += rust_client(
        "memory",
        &[
            ("SYNC_SERVER_URL", server.url.clone()),
            ("SYNC_SERVER_PID", server.child.id().to_string()),
            ("SYNC_DATABASE_URL", db.conninfo()),
        ],
        true,
    )?;
    let log = server.log.clone();
    drop(server);
    counts += quiet_log(&log)?;
    counts += access_checks(sh, cluster)?;
    counts += no_panics(&logs)?;
    Ok(counts)
}

/// The database of the access checks, made afresh with the example of docs/sync-server.md.
const ACCESS_DATABASE: &str = "sync_access";
/// The audience the access checks' servers expect.
const AUDIENCE: &str = "pg_automerge_sync";

/// Two servers checking tokens on one database set up as docs/sync-server.md's "Access
/// control" example, used by JS clients (driver.mjs `access`) and samod clients
/// (sync_server/tests/access.rs).
fn access_checks(sh: &Shell, cluster: &Cluster) -> Result<Counts> {
    cluster.psql(
        "postgres",
        &format!("DROP DATABASE IF EXISTS {ACCESS_DATABASE} WITH (FORCE); DROP ROLE IF EXISTS app_user; CREATE DATABASE {ACCESS_DATABASE};"),
    )?;
    cluster.psql(ACCESS_DATABASE, &access_control_example()?)?;
    let secret = clusters_dir(sh)?.join("sync-jwt-secret");
    let mut random = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut random)?;
    std::fs::write(&secret, random.iter().map(|b| format!("{b:02x}")).collect::<String>())?;
    let access: Vec<String> = [
        "--jwt-secret-file",
        &secret.display().to_string(),
        "--jwt-audience",
        AUDIENCE,
        "--max-documents-per-connection",
        "20",
        "--max-message-bytes",
        "1048576",
    ]
    .map(str::to_string)
    .into();
    let db = Db { cluster, database: ACCESS_DATABASE.to_string() };
    let first = SyncServer::start(sh, db.storage(), "c", false, &access)?;
    let second = SyncServer::start(sh, db.storage(), "d", false, &access)?;
    let mut counts = driver(
        sh,
        "access",
        &[&first, &second],
        &db,
        &["--secret".into(), secret.display().to_string(), "--audience".into(), AUDIENCE.into()],
    );
    counts += rust_client(
        "access",
        &[
            ("SYNC_ACCESS_SERVER_URLS", format!("{},{}", first.url, second.url)),
            ("SYNC_ACCESS_DATABASE_URL", db.conninfo()),
            ("SYNC_JWT_SECRET_FILE", secret.display().to_string()),
            ("SYNC_JWT_AUDIENCE", AUDIENCE.to_string()),
        ],
        false,
    )?;
    Ok(counts)
}

/// The ```sql access-control block of docs/sync-server.md, as a reader would paste it.
fn access_control_example() -> Result<String> {
    let page = std::fs::read_to_string(project_root().join("docs/sync-server.md"))?;
    page.split("```sql access-control\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .map(str::to_string)
        .context("docs/sync-server.md has no ```sql access-control block")
}

/// The database the checks run against.
struct Db<'a> {
    cluster: &'a Cluster,
    database: String,
}

impl Db<'_> {
    fn storage(&self) -> ServerStorage<'_> {
        ServerStorage::Postgres(self.cluster, &self.database)
    }

    fn url(&self) -> String {
        postgres_url(self.cluster, &self.database)
    }

    fn conninfo(&self) -> String {
        self.cluster.conninfo(&self.database)
    }
}
