//! What a run leaves behind on PostgreSQL: the `swarmd_bench_*` database
//! made for each spawned daemon, dropped when the daemon stops, and on
//! Ctrl-C, which also kills the daemons the run started and removes their
//! directories, so repeated runs fill neither the cluster nor the disk.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::PgTarget;

/// Databases this process created and has not dropped yet, for the
/// Ctrl-C handler.
static CREATED: Mutex<Vec<BenchDatabase>> = Mutex::new(Vec::new());

/// Daemons this process started and has not stopped yet, for the Ctrl-C
/// handler (`kill_on_drop` does not run on `exit`).
static SPAWNED: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The directories (configuration and state) of the daemons this process
/// started, for the Ctrl-C handler: a daemon's own is removed when it is
/// dropped, which `exit` skips.
static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Notes a daemon's directory, for the Ctrl-C handler.
pub(crate) fn scratch(dir: &Path) {
    SCRATCH
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(dir.to_owned());
}

/// Notes a daemon started, for the Ctrl-C handler.
pub(crate) fn spawned(pid: i32) {
    SPAWNED.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
}

/// Notes a daemon stopped.
pub(crate) fn stopped(pid: i32) {
    SPAWNED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|spawned| *spawned != pid);
}

/// A database the generator created on the cluster of `--pg-url` for one
/// daemon.
#[derive(Debug, Clone)]
pub(crate) struct BenchDatabase {
    /// The cluster's URL as given (its maintenance database).
    cluster_url: String,
    password_file: PathBuf,
    name: String,
}

impl BenchDatabase {
    /// Creates a database with a new name, `swarmd_bench_<pid>_<µs>`.
    pub(crate) async fn create(url: &str, password_file: &Path) -> anyhow::Result<BenchDatabase> {
        let database = BenchDatabase {
            cluster_url: url.to_owned(),
            password_file: password_file.to_owned(),
            name: format!(
                "swarmd_bench_{}_{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros())
            ),
        };
        let client = database.connect().await?;
        client
            .batch_execute(&format!("CREATE DATABASE {}", database.name))
            .await
            .with_context(|| format!("cannot create database {}", database.name))?;
        CREATED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(database.clone());
        Ok(database)
    }

    /// How the daemon reaches it.
    pub(crate) fn target(&self) -> PgTarget {
        let url = &self.cluster_url;
        let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
        PgTarget {
            url: format!("{base}/{}", self.name),
            password_file: self.password_file.clone(),
        }
    }

    /// A connection to the cluster's maintenance database.
    async fn connect(&self) -> anyhow::Result<tokio_postgres::Client> {
        let password = std::fs::read_to_string(&self.password_file)
            .with_context(|| format!("cannot read {}", self.password_file.display()))?;
        let mut config: tokio_postgres::Config = self
            .cluster_url
            .parse()
            .context("--pg-url is not a PostgreSQL URL")?;
        config.password(password.trim_end());
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .context("cannot connect to --pg-url")?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Drops the database, ending any connection still open to it.
    pub(crate) async fn drop_database(self) -> anyhow::Result<()> {
        let client = self.connect().await?;
        client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .with_context(|| format!("cannot drop database {}", self.name))?;
        CREATED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|created| created.name != self.name);
        Ok(())
    }
}

/// Waits for Ctrl-C, kills the daemons this process started, drops the
/// databases it created, removes the daemons' directories, and exits with
/// 130 (as a shell reports a run ended by SIGINT).
pub(crate) async fn drop_databases_on_ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    for pid in std::mem::take(&mut *SPAWNED.lock().unwrap_or_else(|p| p.into_inner())) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let created = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|p| p.into_inner()));
    for database in created {
        let name = database.name.clone();
        match database.drop_database().await {
            Ok(()) => eprintln!("swarmd-bench: interrupted; dropped database {name}"),
            Err(error) => eprintln!("swarmd-bench: interrupted; {error:#}"),
        }
    }
    for dir in std::mem::take(&mut *SCRATCH.lock().unwrap_or_else(|p| p.into_inner())) {
        // Gone already when its daemon was dropped.
        let _ = std::fs::remove_dir_all(dir);
    }
    std::process::exit(130);
}
