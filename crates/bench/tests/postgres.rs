//! `--store postgres` leaves nothing on the cluster: the database the
//! generator created for its daemon is dropped when the run ends, and when
//! it is interrupted with Ctrl-C (SIGINT).
//!
//! The cluster is the throwaway one `scripts/pg-env.sh` starts (it fails
//! the test when it cannot); the daemon is found as for the smoke run.

#![allow(
    clippy::disallowed_methods,
    reason = "a test program finds the daemon and CI through its environment"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_swarmd-bench");

fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SWARMD_BIN") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("debug/swarmd");
    assert!(
        path.is_file(),
        "no swarmd binary at {}: run `cargo build -p swarmd-server` first or set SWARMD_BIN",
        path.display()
    );
    path
}

/// The test cluster's URL and password file (`scripts/pg-env.sh`).
fn cluster() -> (String, PathBuf) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-env.sh");
    let output = Command::new("bash").arg(&script).output().unwrap();
    assert!(
        output.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let mut lines = stdout.lines();
    let url = lines.next().expect("a URL").to_owned();
    let password_file = PathBuf::from(lines.next().expect("a password file"));
    (url, password_file)
}

/// The databases whose names start with `swarmd_bench_<pid>_`.
async fn bench_databases(url: &str, password_file: &PathBuf, pid: u32) -> Vec<String> {
    let mut config: tokio_postgres::Config = url.parse().unwrap();
    config.password(std::fs::read_to_string(password_file).unwrap().trim_end());
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .query(
            "SELECT datname FROM pg_database WHERE starts_with(datname, $1)",
            &[&format!("swarmd_bench_{pid}_")],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn bench(url: &str, password_file: &PathBuf, args: &[&str]) -> Command {
    let mut command = Command::new(BENCH);
    command
        .arg("--spawn-daemon")
        .arg(daemon_binary())
        .args(["--store", "postgres", "--pg-url", url, "--pg-password-file"])
        .arg(password_file)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[tokio::test]
async fn a_finished_run_drops_its_database() {
    let (url, password_file) = cluster();
    let child = bench(
        &url,
        &password_file,
        &["http", "--agent", "true", "--count", "20"],
    )
    .spawn()
    .unwrap();
    let pid = child.id();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("http true"));
    assert_eq!(
        bench_databases(&url, &password_file, pid).await,
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn ctrl_c_drops_the_database_of_an_interrupted_run() {
    let (url, password_file) = cluster();
    // The bench makes its daemon's directory here.
    let tmp = tempfile::tempdir().unwrap();
    let mut child = bench(
        &url,
        &password_file,
        &["http", "--agent", "true", "--duration", "60"],
    )
    .env("TMPDIR", tmp.path())
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let pid = child.id();
    // Reads the bench's stderr to its end, and says when the bench reports
    // the daemon it started.
    let (started_tx, started) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut started_tx = Some(started_tx);
        let mut text = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            if line.starts_with("swarmd-bench: started ")
                && let Some(started_tx) = started_tx.take()
            {
                let _ = started_tx.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while bench_databases(&url, &password_file, pid).await.is_empty() {
        assert!(Instant::now() < deadline, "the bench created no database");
        assert!(child.try_wait().unwrap().is_none(), "the bench ended early");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Interrupted once its daemon runs.
    while started.try_recv().is_err() {
        if Instant::now() >= deadline {
            nix_kill(pid);
            panic!("the bench reported no started daemon within 60 s");
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the bench ended early ({status}): {}",
                reader.join().unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nix_kill(pid);
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("dropped database swarmd_bench_"),
        "{stderr}"
    );
    // The daemon it started is gone too.
    let daemon: u32 = stderr
        .split(", pid ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no daemon pid in {stderr}"));
    let gone = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{daemon}")).exists() && !is_zombie(daemon) {
        assert!(Instant::now() < gone, "the daemon outlived the bench");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        bench_databases(&url, &password_file, pid).await,
        Vec::<String>::new()
    );
    // And so is the daemon's directory.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Whether `pid` has exited and waits for its (gone) parent to reap it.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

/// SIGINT to `pid`, as Ctrl-C sends it.
fn nix_kill(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
