//! The Debian packages tested as a user installs them: per major, in a clean Debian
//! container with Debian's PostgreSQL of that major and systemd as its init
//! (docker/install-test.Dockerfile), `apt-get install` of the previous release's package,
//! `shared_preload_libraries`, `CREATE EXTENSION`, then `apt-get install` of this version's
//! package and `ALTER EXTENSION … UPDATE` over the documents written before, the README's
//! tour, and the sync server's package running as its systemd unit says.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use cluster_tests::server::Server;
use cluster_tests::versions;
use xshell::{cmd, Shell};

use crate::package::{TestPackages, PREVIOUS_RELEASE};
use crate::postgres::PgMajor;
use crate::run::{samples_script, DATABASE};
use crate::soak::RUN_LABEL;
use crate::util::{note, step, Counts};
use crate::{doc_examples, image, project_root};

const SYNC_SERVER_CONFIG: &str = "/etc/pg-automerge-sync-server/sync-server.conf";
const SYNC_SERVER_UNIT: &str = "pg-automerge-sync-server";
const SYNC_SERVER_USER: &str = "pg-automerge-sync";

/// The install tests of every major in `packages`, each container labelled `run`.
pub fn checks(sh: &Shell, packages: &TestPackages, run: &str) -> Result<Counts> {
    let mut counts = Counts::default();
    for (major, current) in &packages.current {
        let previous = packages
            .previous
            .iter()
            .find(|(m, _)| m == major)
            .map(|(_, deb)| deb)
            .context("the previous release's package of every major tested")?;
        let container = step(&format!("{major}: the install-test container"), || {
            InstallContainer::start(sh, *major, &test_image(sh, *major)?, run)
        });
        let container = match container {
            Ok(container) => container,
            Err(err) => {
                counts.failed += CHECKS.len();
                note(format!(
                    "FAILED {major}: no install-test container, so none of its checks ran: {err:#}"
                ));
                continue;
            }
        };
        let debs = [previous, current, &packages.sync_server];
        for check in CHECKS {
            let name = format!("{major}: {}", check.name);
            match step(&name, || (check.run)(&container, &debs)) {
                Ok(more) => {
                    counts.passed += 1;
                    counts += more;
                }
                Err(err) => {
                    counts.failed += 1;
                    note(format!("FAILED {name}: {err:#}"));
                    note(container.journal());
                }
            }
        }
        container.remove();
    }
    Ok(counts)
}

struct Check {
    name: &'static str,
    /// Given the container and the previous, current and sync server packages; returns the
    /// counts of any examples it ran beside its own pass.
    run: fn(&InstallContainer, &[&PathBuf; 3]) -> Result<Counts>,
}

/// In order: each builds on what the one before it left in the container.
const CHECKS: &[Check] = &[
    Check {
        name: "apt-get install the previous release's package, CREATE EXTENSION",
        run: install_previous_release,
    },
    Check {
        name: "apt-get install this version's package, ALTER EXTENSION UPDATE",
        run: upgrade_to_current,
    },
    Check { name: "the README's tour", run: readme_tour },
    Check { name: "the sync server's package under systemd", run: sync_server_unit },
];

fn install_previous_release(container: &InstallContainer, debs: &[&PathBuf; 3]) -> Result<Counts> {
    let number = container.major.number();
    container.apt_install(debs[0])?;
    container.exec(&["pg_createcluster", &number.to_string(), "main"])?;
    // As docs/install.md tells a user: preload the library; and, for these tests, listen on
    // the container's address and trust the connections from the host.
    let conf_dir = format!("/etc/postgresql/{number}/main");
    container.write_file(
        &format!("{conf_dir}/conf.d/pg_automerge.conf"),
        "shared_preload_libraries = 'pg_automerge'\nlisten_addresses = '*'\n",
    )?;
    container.exec(&[
        "sed",
        "-i",
        "1i host all all 0.0.0.0/0 trust",
        &format!("{conf_dir}/pg_hba.conf"),
    ])?;
    container.exec(&["systemctl", "start", &container.postgres_unit()])?;
    let server = container.server();
    ensure!(server.answers(60), "the cluster did not answer within 60 s");
    server.psql("postgres", "CREATE DATABASE upgraded;")?;
    server.psql("upgraded", "CREATE EXTENSION pg_automerge;")?;
    let version = extension_version(&server)?;
    ensure!(
        version == PREVIOUS_RELEASE.0,
        "the previous release's package created version {}",
        version
    );
    // The previous release stores the sample documents (the script's UPDATE finds the
    // extension at its package's version already).
    server.psql("upgraded", &samples_script())?;
    Ok(Counts::default())
}

fn upgrade_to_current(container: &InstallContainer, debs: &[&PathBuf; 3]) -> Result<Counts> {
    let server = container.server();
    let before = documents_as_json(&server)?;
    container.apt_install(debs[1])?;
    container.exec(&["systemctl", "restart", &container.postgres_unit()])?;
    ensure!(server.answers(60), "the cluster did not answer within 60 s of the restart");
    server.psql("upgraded", "ALTER EXTENSION pg_automerge UPDATE;")?;
    let version = extension_version(&server)?;
    let current = versions::current()?;
    ensure!(version == current, "ALTER EXTENSION UPDATE reached {}, not {current}", version);
    ensure!(
        documents_as_json(&server)? == before,
        "the documents read differently after the upgrade"
    );
    // A write through the new library and the updated SQL, read back.
    server.psql("upgraded", "UPDATE sample_documents SET doc = doc || doc;")?;
    ensure!(documents_as_json(&server)? == before, "merging a document with itself changed it");
    Ok(Counts::default())
}

fn readme_tour(container: &InstallContainer, _debs: &[&PathBuf; 3]) -> Result<Counts> {
    let server = container.server();
    server.psql("postgres", &format!("CREATE DATABASE {DATABASE};"))?;
    server.psql(DATABASE, &samples_script())?;
    let examples = doc_examples::check_file(&server, &project_root().join("README.md"), DATABASE)?;
    ensure!(examples.failed == 0, "{} of the README's examples failed", examples.failed);
    Ok(examples)
}

fn sync_server_unit(container: &InstallContainer, debs: &[&PathBuf; 3]) -> Result<Counts> {
    container.apt_install(debs[2])?;
    container
        .exec(&["getent", "passwd", SYNC_SERVER_USER])
        .context("the package makes its user")?;
    let mode = container.exec(&["stat", "-c", "%a %U:%G", SYNC_SERVER_CONFIG])?;
    ensure!(
        mode.trim() == format!("640 root:{SYNC_SERVER_USER}"),
        "{SYNC_SERVER_CONFIG} is {}",
        mode.trim()
    );
    let server = container.server();
    server.psql("postgres", "CREATE DATABASE sync;")?;
    // What docs/install.md tells a user to set, appended to the packaged file.
    let settings = container.exec(&["cat", SYNC_SERVER_CONFIG])?
        + "DATABASE_URL=host=127.0.0.1 user=postgres dbname=sync\n\
           SYNC_SERVER_LISTEN=0.0.0.0:3030\n\
           SYNC_SERVER_ALLOW_ANONYMOUS=true\n";
    container.write_file(SYNC_SERVER_CONFIG, &settings)?;
    container.exec(&["systemctl", "enable", "--now", SYNC_SERVER_UNIT])?;
    let first = container.wait_for_health()?;
    let owner = container.exec(&["stat", "-c", "%U", &format!("/proc/{first}")])?;
    ensure!(owner.trim() == SYNC_SERVER_USER, "the server runs as {}", owner.trim());
    let tables = server.psql_value(
        "sync",
        "SELECT count(*) FROM pg_tables WHERE tablename IN ('documents', 'automerge_repo_chunks');",
    )?;
    ensure!(tables == "2", "the server made {} of its two tables", tables);
    // Supervised: killed, it is started again (Restart=on-failure).
    container.exec(&["systemctl", "kill", "--signal=SIGKILL", SYNC_SERVER_UNIT])?;
    let started = Instant::now();
    loop {
        if let Ok(again) = container.wait_for_health() {
            if again != first {
                break;
            }
        }
        ensure!(
            started.elapsed() < Duration::from_secs(30),
            "systemd did not restart the killed server"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    container.exec(&["systemctl", "stop", SYNC_SERVER_UNIT])?;
    let state = container.exec_status(&["systemctl", "is-active", SYNC_SERVER_UNIT])?;
    ensure!(state.trim() == "inactive", "after systemctl stop the unit is {}", state.trim());
    Ok(Counts::default())
}

/// The install-test image of `major`: its Debian base with systemd.
fn test_image(sh: &Shell, major: PgMajor) -> Result<String> {
    let base = image::debian_base(sh, major)?;
    let tag = format!("pg_automerge-install-test:pg{}", major.number());
    let dockerfile = project_root().join("docker/install-test.Dockerfile");
    let base_arg = format!("BASE={base}");
    let context = project_root().join("docker");
    cmd!(sh, "docker build --quiet -f {dockerfile} --build-arg {base_arg} -t {tag} {context}")
        .quiet()
        .ignore_stdout()
        .run()?;
    Ok(tag)
}

/// The `docker run` options that give systemd in a container the cgroup tree it needs:
/// systemd 258 and later (Debian's since trixie) run on the unified (v2) hierarchy only,
/// which a host with both hierarchies has at /sys/fs/cgroup/unified.
fn cgroup_options(sh: &Shell) -> Result<Vec<String>> {
    let kind = cmd!(sh, "stat -fc %T /sys/fs/cgroup").quiet().read()?;
    let unified = Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists();
    Ok(if kind.trim() == "cgroup2fs" {
        vec!["--cgroupns=host".into(), "-v".into(), "/sys/fs/cgroup:/sys/fs/cgroup:rw".into()]
    } else if unified {
        vec!["-v".into(), "/sys/fs/cgroup/unified:/sys/fs/cgroup:rw".into()]
    } else {
        vec!["-v".into(), "/sys/fs/cgroup:/sys/fs/cgroup:ro".into()]
    })
}

/// A test container running systemd, with PostgreSQL's port and the sync server's
/// published on loopback ports of the host.
struct InstallContainer {
    major: PgMajor,
    id: String,
    postgres_port: u16,
    sync_server_port: u16,
}

impl InstallContainer {
    fn start(sh: &Shell, major: PgMajor, image: &str, run: &str) -> Result<InstallContainer> {
        let label = format!("{RUN_LABEL}={run}");
        let cgroups = cgroup_options(sh)?;
        // systemd needs /run and /run/lock as tmpfs, and a cgroup tree of its own.
        let id = cmd!(
            sh,
            "docker run -d --label {label} --tmpfs /run --tmpfs /run/lock {cgroups...}
             -p 127.0.0.1::5432 -p 127.0.0.1::3030 {image}"
        )
        .quiet()
        .read()?;
        let port = |inner: &str| -> Result<u16> {
            let mapped = cmd!(sh, "docker port {id} {inner}").quiet().read()?;
            let first = mapped.lines().next().unwrap_or_default();
            first
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .with_context(|| format!("docker port {inner} printed {mapped:?}"))
        };
        let ports = port("5432").and_then(|postgres| Ok((postgres, port("3030")?)));
        let Ok((postgres_port, sync_server_port)) = ports else {
            let logs = std::process::Command::new("docker")
                .args(["logs", "--tail", "20", &id])
                .output()?;
            cmd!(sh, "docker rm -f {id}").quiet().ignore_stdout().run()?;
            bail!(
                "the container exited at once; its log ends:\n{}{}",
                String::from_utf8_lossy(&logs.stdout),
                String::from_utf8_lossy(&logs.stderr)
            );
        };
        let container = InstallContainer { major, postgres_port, sync_server_port, id };
        // Until systemd has started the system: `running`, or `degraded` where a mount
        // unit a container cannot have failed.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let state = container.exec_status(&["systemctl", "is-system-running"])?;
            if ["running", "degraded"].contains(&state.trim()) {
                return Ok(container);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        container.remove();
        bail!("systemd in the {major} install-test container did not start within 60 s")
    }

    fn postgres_unit(&self) -> String {
        format!("postgresql@{}-main", self.major.number())
    }

    /// The cluster, as the host's psql of the same major reaches it.
    fn server(&self) -> Server {
        Server {
            bindir: self.major.bindir(),
            client_bindir: self.major.bindir(),
            data_dir: PathBuf::from("/nonexistent"),
            log_file: PathBuf::from("/nonexistent"),
            port: self.postgres_port,
            user: None,
            settings: Vec::new(),
        }
    }

    fn run_in(&self, command: &[&str]) -> Result<std::process::Output> {
        std::process::Command::new("docker")
            .args(["exec", &self.id])
            .args(command)
            .output()
            .context("starting docker exec")
    }

    /// `command` in the container; its stdout, or an error with its output.
    fn exec(&self, command: &[&str]) -> Result<String> {
        let output = self.run_in(command)?;
        ensure!(
            output.status.success(),
            "`{}` failed in the container:\n{}{}",
            command.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `command`'s stdout whatever its exit status (`systemctl is-active` exits 3 when not).
    fn exec_status(&self, command: &[&str]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.run_in(command)?.stdout).into_owned())
    }

    fn write_file(&self, path: &str, contents: &str) -> Result<()> {
        let mut child = std::process::Command::new("docker")
            .args(["exec", "-i", &self.id, "sh", "-c", "cat > \"$1\"", "sh", path])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .context("starting docker exec")?;
        child.stdin.take().expect("stdin is piped").write_all(contents.as_bytes())?;
        ensure!(child.wait()?.success(), "writing {path} in the container failed");
        Ok(())
    }

    /// Copies `deb` into the container and installs it with apt, as a user does.
    fn apt_install(&self, deb: &Path) -> Result<()> {
        let name = deb.file_name().context("a package has a file name")?.to_string_lossy();
        let inside = format!("/tmp/{name}");
        let status = std::process::Command::new("docker")
            .arg("cp")
            .arg(deb)
            .arg(format!("{}:{inside}", self.id))
            .status()?;
        ensure!(status.success(), "docker cp {} failed", deb.display());
        self.exec(&[
            "env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "install",
            "-y",
            "-qq",
            &inside,
        ])?;
        Ok(())
    }

    /// Waits up to 30 s for the sync server's `/health` to answer 200; returns the unit's
    /// main process.
    fn wait_for_health(&self) -> Result<u32> {
        let started = Instant::now();
        loop {
            if health_answers(self.sync_server_port) {
                let pid = self.exec(&["systemctl", "show", "-P", "MainPID", SYNC_SERVER_UNIT])?;
                return pid.trim().parse().context("systemctl show -P MainPID");
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("the sync server's /health did not answer 200 within 30 s");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The end of the container's journal, for a failure's message.
    fn journal(&self) -> String {
        self.exec_status(&["journalctl", "--no-pager", "-n", "40"]).unwrap_or_default()
    }

    fn remove(&self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.id])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// Whether `GET /health` on the loopback `port` answers 200.
fn health_answers(port: u16) -> bool {
    let answer = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    };
    answer().is_ok_and(|response| {
        response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200")
    })
}

/// Every document of the upgrade's database as `jsonb` text, in key order.
fn documents_as_json(server: &Server) -> Result<String> {
    server.psql_value("upgraded", "SELECT name, doc::jsonb FROM sample_documents ORDER BY name;")
}

/// The extension's version in the upgrade's database.
fn extension_version(server: &Server) -> Result<String> {
    server.psql_value(
        "upgraded",
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_automerge';",
    )
}
