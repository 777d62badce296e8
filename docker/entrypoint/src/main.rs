//! The pg_automerge image's entrypoint, the same on every base image (the official
//! `postgres` images and the Debian base that `cargo xtask image` builds):
//!
//! - started as root, it makes PGDATA and the socket directory the `postgres` user's and
//!   runs itself again as that user;
//! - when PGDATA holds no cluster, it runs `initdb` with the superuser `POSTGRES_USER`
//!   (default `postgres`) and password `POSTGRES_PASSWORD` (required), lets every host in
//!   with a password (clients of a mapped port come from the bridge's address), includes
//!   the image's settings, runs the background compactor in `POSTGRES_DB` (default
//!   `postgres`) unless `PG_AUTOMERGE_COMPACTOR=off`, and creates `POSTGRES_DB` if it is
//!   given;
//! - then it replaces itself with `postgres -D PGDATA` and the arguments it was given
//!   (`postgres -c work_mem=64MB`, say); any other command runs as given.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{chown, DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{exit, Command, Stdio};

/// The image's settings, which the Dockerfile copies here.
const SETTINGS: &str = "/etc/pg_automerge/pg_automerge.conf";
const SOCKET_DIR: &str = "/var/run/postgresql";
const DEFAULT_PGDATA: &str = "/var/lib/postgresql/data";
/// `off` initialises a cluster with no background compactor; by default it works in
/// POSTGRES_DB, the database a new user is given.
const COMPACTOR_ENV: &str = "PG_AUTOMERGE_COMPACTOR";

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Err(message) = run(args) {
        eprintln!("pg_automerge-entrypoint: {message}");
        exit(1);
    }
}

fn run(args: Vec<OsString>) -> Result<(), String> {
    let pgdata = PathBuf::from(std::env::var_os("PGDATA").unwrap_or_else(|| DEFAULT_PGDATA.into()));
    let command = server_command(&args, &pgdata);
    if !runs_postgres(&args) {
        return Err(exec(command));
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    if unsafe { libc::getuid() } == 0 {
        let passwd =
            fs::read_to_string("/etc/passwd").map_err(|e| format!("reading /etc/passwd: {e}"))?;
        let (uid, gid) = user_ids(&passwd, "postgres").ok_or("the image has no `postgres` user")?;
        for dir in [pgdata.as_path(), Path::new(SOCKET_DIR)] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            chown(dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        fs::set_permissions(SOCKET_DIR, fs::Permissions::from_mode(0o2775))
            .map_err(|e| e.to_string())?;
        let myself = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut as_postgres = Command::new(myself);
        as_postgres.args(&args).uid(uid).gid(gid).env("HOME", "/var/lib/postgresql");
        return Err(exec(as_postgres));
    }
    if !pgdata.join("PG_VERSION").exists() {
        initialise(&pgdata)?;
    }
    Err(exec(command))
}

/// `postgres …` and bare flags run the server; anything else (a shell, `psql`) runs as is.
fn runs_postgres(args: &[OsString]) -> bool {
    match args.first().and_then(|arg| arg.to_str()) {
        None => true,
        Some(first) => first == "postgres" || first.starts_with('-'),
    }
}

fn server_command(args: &[OsString], pgdata: &Path) -> Command {
    if !runs_postgres(args) {
        let mut command = Command::new(&args[0]);
        command.args(&args[1..]);
        return command;
    }
    let flags = if args.first().is_some_and(|arg| arg == "postgres") { &args[1..] } else { args };
    let mut command = Command::new("postgres");
    command.arg("-D").arg(pgdata).args(flags);
    command
}

fn initialise(pgdata: &Path) -> Result<(), String> {
    let password = std::env::var("POSTGRES_PASSWORD").unwrap_or_default();
    if password.is_empty() {
        return Err("PGDATA holds no cluster and POSTGRES_PASSWORD is not set: set it (`docker run -e POSTGRES_PASSWORD=…`) to initialise one".into());
    }
    // Read before initdb: a cluster left half made would be started as it is next time.
    let compactor = compactor_on(&std::env::var(COMPACTOR_ENV).unwrap_or_default())?;
    let user = std::env::var("POSTGRES_USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres".into());
    // initdb reads the password from a file, so that it never shows in a process list.
    let password_file = std::env::temp_dir().join("pg_automerge-initdb-password");
    fs::write(&password_file, format!("{password}\n"))
        .map_err(|e| format!("writing the password file: {e}"))?;
    let status = Command::new("initdb")
        .arg("-D")
        .arg(pgdata)
        .arg(format!("--username={user}"))
        .arg(format!("--pwfile={}", password_file.display()))
        .args([
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
        ])
        .status();
    let _ = fs::remove_file(&password_file);
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => return Err(format!("initdb failed ({status})")),
        Err(e) => return Err(format!("running initdb: {e}")),
    }
    append(&pgdata.join("pg_hba.conf"), "\n# pg_automerge image: clients of a mapped port come from the bridge.\nhost all all all scram-sha-256\n")?;
    append(&pgdata.join("postgresql.conf"), &format!("\ninclude '{SETTINGS}'\n"))?;
    let database = std::env::var("POSTGRES_DB")
        .ok()
        .filter(|db| !db.is_empty())
        .unwrap_or_else(|| "postgres".into());
    if compactor {
        // In postgresql.conf rather than on postgres's command line, so that `-c` and
        // ALTER SYSTEM still override it.
        append(&pgdata.join("postgresql.conf"), &compactor_setting(&database))?;
    }
    // initdb makes `postgres` whoever the superuser is; any other database is ours to make.
    if database != "postgres" {
        create_database(pgdata, &user, &database)?;
    }
    Ok(())
}

/// Whether `PG_AUTOMERGE_COMPACTOR`'s value (empty when unset) leaves the compactor on.
fn compactor_on(value: &str) -> Result<bool, String> {
    match value {
        "" | "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{COMPACTOR_ENV} is `on` (the default) or `off`, not `{other}`")),
    }
}

/// The postgresql.conf lines that run the background compactor in `database`.
fn compactor_setting(database: &str) -> String {
    let quoted = database
        .replace('\\', "\\\\")
        .replace('\'', "''")
        .replace('\n', "\\n")
        .replace('\r', "\\r");
    format!(
        "\n# pg_automerge image: the background compactor in POSTGRES_DB ({COMPACTOR_ENV}=off at\n\
         # initialisation leaves this line out).\npg_automerge.compactor_database = '{quoted}'\n"
    )
}

/// Creates a database with the single-user server, before the real one accepts clients.
fn create_database(pgdata: &Path, user: &str, database: &str) -> Result<(), String> {
    let mut single = Command::new("postgres")
        .args(["--single", "-j", "-D"])
        .arg(pgdata)
        .arg("template1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting postgres --single: {e}"))?;
    let quoted = database.replace('"', "\"\"");
    let owner = user.replace('"', "\"\"");
    writeln!(
        single.stdin.take().expect("stdin is piped"),
        "CREATE DATABASE \"{quoted}\" OWNER \"{owner}\";"
    )
    .map_err(|e| format!("sending CREATE DATABASE: {e}"))?;
    let status = single.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("creating database {database} failed ({status})"));
    }
    Ok(())
}

fn append(path: &Path, text: &str) -> Result<(), String> {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| format!("appending to {}: {e}", path.display()))
}

/// Replaces this process; returns only the error when that fails.
fn exec(mut command: Command) -> String {
    format!("running {command:?}: {}", command.exec())
}

/// The uid and gid of `user` in an /etc/passwd text.
fn user_ids(passwd: &str, user: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != user {
            return None;
        }
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_postgres_user() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\npostgres:x:100:102:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(user_ids(passwd, "postgres"), Some((100, 102)));
        assert_eq!(user_ids(passwd, "nobody"), None);
    }

    #[test]
    fn runs_the_server_with_pgdata_and_the_given_flags() {
        let pgdata = Path::new("/data");
        let args = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        let shown = |command: Command| {
            std::iter::once(command.get_program().to_owned())
                .chain(command.get_args().map(|a| a.to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(shown(server_command(&args(&[]), pgdata)), args(&["postgres", "-D", "/data"]));
        assert_eq!(
            shown(server_command(&args(&["postgres", "-c", "work_mem=64MB"]), pgdata)),
            args(&["postgres", "-D", "/data", "-c", "work_mem=64MB"])
        );
        assert_eq!(
            shown(server_command(&args(&["-c", "fsync=off"]), pgdata)),
            args(&["postgres", "-D", "/data", "-c", "fsync=off"])
        );
        assert_eq!(shown(server_command(&args(&["psql", "-V"]), pgdata)), args(&["psql", "-V"]));
        assert!(!runs_postgres(&args(&["bash"])));
    }

    #[test]
    fn the_compactor_is_on_unless_turned_off() {
        assert_eq!(compactor_on(""), Ok(true));
        assert_eq!(compactor_on("on"), Ok(true));
        assert_eq!(compactor_on("off"), Ok(false));
        assert!(compactor_on("no").unwrap_err().contains("PG_AUTOMERGE_COMPACTOR"));
    }

    #[test]
    fn quotes_the_database_as_postgresql_conf_reads_it() {
        let line = |database| compactor_setting(database).lines().last().unwrap().to_string();
        assert_eq!(line("app"), "pg_automerge.compactor_database = 'app'");
        assert_eq!(line("it's a\\b"), r"pg_automerge.compactor_database = 'it''s a\\b'");
        assert_eq!(line("two\nlines"), r"pg_automerge.compactor_database = 'two\nlines'");
    }
}
