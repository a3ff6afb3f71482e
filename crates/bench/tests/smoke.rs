//! The CI smoke run: `swarmd-bench smoke` against the real daemon binary,
//! asserting that every workload finished without an error (not speed).
//!
//! The daemon is `$SWARMD_BIN`, else `swarmd` in the workspace's target
//! directory (`$CARGO_TARGET_DIR` or `target/`, debug profile). Cargo builds
//! it before any test runs when the server's tests are in the same run (the
//! README's `cargo test --workspace`); alone (`cargo test -p swarmd-bench`),
//! build it first (`cargo build -p swarmd-server`). Without it the test says
//! so and passes, except under CI (`CI` set), where a missing daemon is a
//! failure.

#![allow(
    clippy::disallowed_methods,
    reason = "a test program finds the daemon and CI through its environment"
)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const BENCH: &str = env!("CARGO_BIN_EXE_swarmd-bench");

/// The smoke run's own budget (it takes a few seconds).
const PATIENCE: Duration = Duration::from_secs(120);

fn daemon_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWARMD_BIN") {
        return Some(PathBuf::from(path));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = target.join("debug/swarmd");
    path.is_file().then_some(path)
}

#[test]
fn the_smoke_run_finishes_every_workload_without_errors() {
    let Some(daemon) = daemon_binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build the daemon before the smoke run (cargo test --workspace builds it)"
        );
        eprintln!(
            "SKIPPED: no swarmd binary; run `cargo build -p swarmd-server` first or set SWARMD_BIN"
        );
        return;
    };
    let started = Instant::now();
    let mut child = Command::new(BENCH)
        .arg("--spawn-daemon")
        .arg(&daemon)
        .arg("smoke")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("swarmd-bench starts");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("the smoke run took longer than {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "smoke failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    for workload in ["ws-delegated", "http true", "http cat", "http lua"] {
        assert!(stdout.contains(workload), "no {workload} row:\n{stdout}");
    }
    for flow_row in [
        "| seq3 | flow |",
        "| seq3 | tasks |",
        "| fan5 | flow |",
        "| fan5 | tasks |",
    ] {
        assert!(stdout.contains(flow_row), "no {flow_row} row:\n{stdout}");
    }
    assert!(
        stderr.contains("flows recovery: 50 runs held"),
        "no flows recovery:\n{stderr}"
    );
    for held in ["waiting", "queued"] {
        assert!(
            stderr.contains(&format!("idle-capacity: 100 {held}")),
            "no idle checkpoint of {held} tasks:\n{stderr}"
        );
    }
}
