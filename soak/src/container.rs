//! The pg_automerge image, started with testcontainers.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use testcontainers::core::{ExecCommand, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio_postgres::{Client, NoTls};

/// The password the container is initialised with: it only ever listens on a mapped port
/// of this machine, for the length of a test.
const PASSWORD: &str = "soak";
pub const DATABASE: &str = "soak";
/// The container's cgroup v1 memory statistics, as seen from inside.
const MEMORY_STAT: &str = "/sys/fs/cgroup/memory/memory.stat";

pub struct ServerOptions {
    pub image: String,
    /// The container's memory limit, with no swap on top.
    pub memory_bytes: Option<u64>,
    /// Extra `-c name=value` server settings.
    pub settings: Vec<(String, String)>,
    /// Names the run in the container's label [`RUN_LABEL`], by which xtask removes the
    /// containers this run, or an interrupted run of the same checkout, left behind, and
    /// no other container.
    pub run: String,
}

/// The name by which another container reaches this machine's mapped ports, given with
/// `.with_host(HOST_GATEWAY, Host::HostGateway)`.
pub const HOST_GATEWAY: &str = "host.docker.internal";

/// The label that names the run a container belongs to.
pub const RUN_LABEL: &str = "org.pg_automerge.run";

/// Where `cargo xtask test` names the image its container tests run on.
pub const IMAGE_ENV: &str = "PG_AUTOMERGE_IMAGE";
/// Where `cargo xtask test` names its run, by which it removes the containers the run leaves
/// behind and no other.
const RUN_ENV: &str = "PG_AUTOMERGE_RUN";

/// The run label of a test's containers: xtask's run, or one of the test process's own.
pub fn test_run() -> String {
    std::env::var(RUN_ENV).unwrap_or_else(|_| format!("container-tests.{}", std::process::id()))
}

/// The image named in the environment variable `variable`, which `cargo xtask test` sets.
pub fn image_named_in(variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: `cargo xtask test` builds the images and runs these tests")
    })
}

pub struct Server {
    container: ContainerAsync<GenericImage>,
    pub port: u16,
}

impl Server {
    pub async fn start(options: &ServerOptions) -> Result<Server> {
        Server::start_with_env(options, &[]).await
    }

    /// [`Server::start`], with more environment variables for the image's entrypoint
    /// (`PG_AUTOMERGE_COMPACTOR=off`, say).
    pub async fn start_with_env(options: &ServerOptions, env: &[(&str, &str)]) -> Result<Server> {
        let (name, tag) = options.image.split_once(':').unwrap_or((&options.image, "latest"));
        let mut command = vec!["postgres".to_string()];
        for (name, value) in &options.settings {
            command.push("-c".into());
            command.push(format!("{name}={value}"));
        }
        let memory = options.memory_bytes.map(|bytes| bytes as i64);
        let image = GenericImage::new(name, tag)
            .with_exposed_port(5432.tcp())
            .with_wait_for(WaitFor::message_on_stderr(
                "database system is ready to accept connections",
            ))
            .with_label(RUN_LABEL, options.run.clone())
            .with_env_var("POSTGRES_PASSWORD", PASSWORD)
            .with_env_var("POSTGRES_DB", DATABASE);
        let container = env
            .iter()
            .fold(image, |image, (name, value)| image.with_env_var(*name, *value))
            .with_cmd(command)
            .with_startup_timeout(Duration::from_secs(120))
            .with_host_config_modifier(move |host| {
                if let Some(bytes) = memory {
                    host.memory = Some(bytes);
                    host.memory_swap = Some(bytes);
                }
            })
            .start()
            .await
            .with_context(|| format!("starting a container of {}", options.image))?;
        let port = container.get_host_port_ipv4(5432.tcp()).await?;
        Ok(Server { container, port })
    }

    /// The connection string of the mapped port, for clients on this machine.
    pub fn conninfo(&self) -> String {
        conninfo("127.0.0.1", self.port)
    }

    /// The connection string of the mapped port for another container that maps
    /// [`HOST_GATEWAY`] to the host's gateway address (the default bridge has no names).
    pub fn conninfo_from_a_container(&self) -> String {
        conninfo(HOST_GATEWAY, self.port)
    }

    /// A new connection, its connection task spawned.
    pub async fn connect(&self) -> Result<Client> {
        let (client, connection) = tokio_postgres::connect(&self.conninfo(), NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                eprintln!("soak: a connection ended: {error}");
            }
        });
        Ok(client)
    }

    /// A new connection whose asynchronous messages (notifications) the caller reads.
    pub async fn connect_raw(
        &self,
    ) -> Result<(
        Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    )> {
        Ok(tokio_postgres::connect(&self.conninfo(), NoTls).await?)
    }

    /// The container's cgroup memory.stat, read inside the container.
    pub async fn memory_stat(&self) -> Result<BTreeMap<String, u64>> {
        let mut result = self.container.exec(ExecCommand::new(["cat", MEMORY_STAT])).await?;
        let text = String::from_utf8(result.stdout_to_vec().await?)?;
        let stat = parse_memory_stat(&text);
        if stat.is_empty() {
            bail!("{MEMORY_STAT} is empty or missing (cgroup v2?)");
        }
        Ok(stat)
    }
}

fn conninfo(host: &str, port: u16) -> String {
    format!("host={host} port={port} user=postgres password={PASSWORD} dbname={DATABASE}")
}

/// `name value` lines.
fn parse_memory_stat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_memory_stat() {
        let stat = super::parse_memory_stat("cache 4096\nrss 8192\ntotal_rss 8192\nbogus\n");
        assert_eq!(stat.get("cache"), Some(&4096));
        assert_eq!(stat.get("total_rss"), Some(&8192));
        assert_eq!(stat.len(), 3);
    }
}
