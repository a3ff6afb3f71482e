//! The daemon under test: either one already running (`--url`,
//! `--admin-token-file`, `--pid`) or one the generator starts
//! (`--spawn-daemon`): a temp directory with the generated config,
//! `swarmd serve` as a child, its address read from the `listening on
//! http://ADDR` line of its stderr, its admin token from the state
//! directory (on PostgreSQL, from `swarmd admin-token`, as the database
//! holds it). A started daemon gets SIGTERM at the end (SIGKILL if it does
//! not exit within a few seconds), and is killed if the generator drops it;
//! `kill_hard` SIGKILLs it and `restart` starts it again on the same state.
//! A PostgreSQL daemon's `swarmd_bench_*` database is dropped once the
//! daemon has stopped (`cleanup`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::cleanup::{self, BenchDatabase};
use crate::cli::{StoreKind, TargetArgs};
use crate::config::{Capacity, LUA_SCRIPT, LUA_SCRIPT_FILE, daemon_config};
use crate::flow_defs::{self, FLOWS_DIR};

/// How long a started daemon may take to report its address.
const STARTUP: Duration = Duration::from_secs(30);
/// How long a stopped daemon may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Lines of the daemon's stderr kept for error messages.
const LOG_LINES: usize = 200;

/// Where the daemon is and how to act as its admin.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `http://IP:PORT`, no trailing slash.
    pub base: String,
    pub admin_token: String,
    /// For CPU and RSS readings.
    pub pid: Option<u32>,
    /// The store, for reports.
    pub store_label: String,
}

impl Target {
    /// A daemon someone else started.
    pub(crate) fn external(args: &TargetArgs) -> anyhow::Result<Target> {
        let url = args
            .url
            .clone()
            .ok_or_else(|| anyhow!("give --spawn-daemon PATH, or --url and --admin-token-file"))?;
        let file = args
            .admin_token_file
            .as_ref()
            .ok_or_else(|| anyhow!("--url needs --admin-token-file"))?;
        Ok(Target {
            base: url.trim_end_matches('/').to_owned(),
            admin_token: read_token(file)?,
            pid: args.pid,
            store_label: "external".to_owned(),
        })
    }

    /// The URL of an API path.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// A daemon started by the generator.
#[derive(Debug)]
pub(crate) struct SpawnedDaemon {
    child: Child,
    pub target: Target,
    log: Arc<Mutex<VecDeque<String>>>,
    /// Its PostgreSQL database, dropped after it stops.
    database: Option<BenchDatabase>,
    /// What `kill_and_restart` starts again.
    binary: PathBuf,
    log_filter: String,
    /// Holds the config and the state; removed on drop.
    _dir: tempfile::TempDir,
}

impl SpawnedDaemon {
    /// Starts `binary serve` with a generated config for `store`.
    pub(crate) async fn start(
        binary: &Path,
        store: StoreKind,
        capacity: Capacity,
        worktree_files: Option<u32>,
        log_filter: &str,
        postgres: Option<(&str, &Path)>,
    ) -> anyhow::Result<SpawnedDaemon> {
        let dir = tempfile::Builder::new()
            .prefix("swarmd-bench-")
            .tempdir()
            .context("cannot create a temp directory")?;
        cleanup::scratch(dir.path());
        let config = dir.path().join("swarmd.toml");
        let repo = match worktree_files {
            Some(files) => Some(make_repo(&dir.path().join("repo"), files).await?),
            None => None,
        };
        let database = match (store, postgres) {
            (StoreKind::Postgres, Some((url, password_file))) => {
                Some(BenchDatabase::create(url, password_file).await?)
            }
            (StoreKind::Postgres, None) => {
                bail!(
                    "--store postgres needs --pg-url and --pg-password-file (scripts/pg-env.sh prints both)"
                )
            }
            _ => None,
        };
        let pg = database.as_ref().map(BenchDatabase::target);
        std::fs::write(
            &config,
            daemon_config(dir.path(), store, capacity, repo.as_deref(), pg.as_ref()),
        )?;
        std::fs::write(dir.path().join(LUA_SCRIPT_FILE), LUA_SCRIPT)?;
        let flows = dir.path().join(FLOWS_DIR);
        std::fs::create_dir_all(&flows)?;
        for (name, text) in flow_defs::files() {
            std::fs::write(flows.join(name), text)?;
        }
        let serving = serve(binary, &config, log_filter)?;
        let mut daemon = SpawnedDaemon {
            child: serving.child,
            target: Target {
                base: String::new(),
                admin_token: String::new(),
                pid: serving.pid,
                store_label: store.label().to_owned(),
            },
            log: serving.log,
            database,
            binary: binary.to_owned(),
            log_filter: log_filter.to_owned(),
            _dir: dir,
        };
        daemon.target.base = daemon.address(serving.addr).await?;
        daemon.target.admin_token = match daemon.database {
            None => read_token(&daemon.state_dir().join("admin.token"))?,
            Some(_) => admin_token_command(binary, &config).await?,
        };
        Ok(daemon)
    }

    /// Kills the daemon with SIGKILL (no shutdown of any kind) and reaps it.
    pub(crate) async fn kill_hard(&mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.target.pid.and_then(|p| i32::try_from(p).ok()) {
            kill(Pid::from_raw(pid), Signal::SIGKILL).context("cannot SIGKILL the daemon")?;
            cleanup::stopped(pid);
        }
        self.child.wait().await?;
        Ok(())
    }

    /// Starts the daemon again on the same configuration and state (after
    /// `kill_hard`); returns once the new process reports its address (a
    /// new port), which `target` then holds.
    pub(crate) async fn restart(&mut self) -> anyhow::Result<()> {
        let config = self.dir().join("swarmd.toml");
        let serving = serve(&self.binary, &config, &self.log_filter)?;
        self.child = serving.child;
        self.log = serving.log;
        self.target.pid = serving.pid;
        self.target.base = self.address(serving.addr).await?;
        Ok(())
    }

    /// `http://ADDR` once the daemon reports it.
    async fn address(
        &self,
        addr: tokio::sync::oneshot::Receiver<String>,
    ) -> anyhow::Result<String> {
        match tokio::time::timeout(STARTUP, addr).await {
            Ok(Ok(addr)) => Ok(format!("http://{addr}")),
            _ => bail!(
                "swarmd did not report its address; its stderr:\n{}",
                self.log()
            ),
        }
    }

    /// The directory holding its configuration (`swarmd.toml`) and state.
    pub(crate) fn dir(&self) -> &Path {
        self._dir.path()
    }

    /// The daemon's state directory.
    pub(crate) fn state_dir(&self) -> PathBuf {
        self._dir.path().join("state")
    }

    /// The last lines the daemon wrote to stderr.
    pub(crate) fn log(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// SIGTERM, then SIGKILL after a grace period; fails if the daemon had
    /// already died or did not exit cleanly. Its database is dropped either
    /// way.
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        let stopped = self.stop_child().await;
        if let Some(pid) = self.target.pid.and_then(|p| i32::try_from(p).ok()) {
            cleanup::stopped(pid);
        }
        if let Some(database) = self.database.take() {
            let dropped = database.drop_database().await;
            stopped?;
            return dropped;
        }
        stopped
    }

    async fn stop_child(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "swarmd exited early ({status}); its stderr:\n{}",
                self.log()
            );
        }
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    bail!("swarmd exited with {status}; its stderr:\n{}", self.log());
                }
                Ok(())
            }
            Err(_) => {
                self.child.kill().await?;
                bail!("swarmd did not stop within {STOP_GRACE:?} of SIGTERM")
            }
        }
    }
}

/// A started `swarmd serve`: the child, its stderr's last lines, and the
/// address it reports.
struct Serving {
    child: Child,
    pid: Option<u32>,
    log: Arc<Mutex<VecDeque<String>>>,
    addr: tokio::sync::oneshot::Receiver<String>,
}

/// Starts `binary serve --config CONFIG` and follows its stderr.
fn serve(binary: &Path, config: &Path, log_filter: &str) -> anyhow::Result<Serving> {
    #[allow(
        clippy::disallowed_methods,
        reason = "the daemon starts from a cleared environment plus this client's PATH"
    )]
    let mut child = Command::new(binary)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        )
        .env("RUST_LOG", log_filter)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    let pid = child.id();
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        cleanup::spawned(pid);
    }
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let log = Arc::new(Mutex::new(VecDeque::new()));
    let (addr_tx, addr) = tokio::sync::oneshot::channel();
    let lines_log = log.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut addr_tx = Some(addr_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = listening_address(&line)
                && let Some(tx) = addr_tx.take()
            {
                let _ = tx.send(addr);
            }
            let mut log = lines_log.lock().unwrap_or_else(|p| p.into_inner());
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
        }
    });
    Ok(Serving {
        child,
        pid,
        log,
        addr,
    })
}

/// The admin token a daemon on PostgreSQL keeps in its database, as
/// `swarmd admin-token` prints it.
async fn admin_token_command(binary: &Path, config: &Path) -> anyhow::Result<String> {
    let output = Command::new(binary)
        .args(["admin-token", "--config"])
        .arg(config)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("cannot run {} admin-token", binary.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "swarmd admin-token failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The address of a `listening on http://ADDR` line (a text log's, or the
/// message of a JSON log's line, which goes on after the address).
pub(crate) fn listening_address(line: &str) -> Option<String> {
    let rest = line.split("listening on http://").nth(1)?;
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || ".:[]".contains(*c))
        .collect();
    (!addr.is_empty()).then_some(addr)
}

fn read_token(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the admin token {}", path.display()))?;
    Ok(text.trim().to_owned())
}

/// A git repository at `dir` with one commit of `files` small files, spread
/// over directories of 100, for the `worktree` agent.
async fn make_repo(dir: &Path, files: u32) -> anyhow::Result<PathBuf> {
    for n in 0..files {
        let sub = dir.join(format!("d{:04}", n / 100));
        if n % 100 == 0 {
            std::fs::create_dir_all(&sub)?;
        }
        std::fs::write(sub.join(format!("f{n}.txt")), format!("file {n}\n"))?;
    }
    let git = |args: &'static [&'static str]| {
        let dir = dir.to_owned();
        async move {
            let out = Command::new("git")
                .args([
                    "-c",
                    "user.name=bench",
                    "-c",
                    "user.email=bench@swarmd.invalid",
                ])
                .args(args)
                .current_dir(&dir)
                .output()
                .await
                .context("cannot run git")?;
            anyhow::ensure!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            anyhow::Ok(())
        }
    };
    git(&["init", "-q", "-b", "main"]).await?;
    git(&["add", "-A"]).await?;
    git(&["commit", "-q", "-m", "bench repository"]).await?;
    Ok(dir.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_read_from_the_listening_line() {
        assert_eq!(
            listening_address("listening on http://127.0.0.1:40123\n"),
            Some("127.0.0.1:40123".to_owned())
        );
        assert_eq!(listening_address("2025 INFO listening addr=..."), None);
        assert_eq!(listening_address("listening on http://"), None);
        let json = r#"{"fields":{"message":"listening on http://127.0.0.1:40123"},"target":"swarmd::notice"}"#;
        assert_eq!(listening_address(json).as_deref(), Some("127.0.0.1:40123"));
    }
}
