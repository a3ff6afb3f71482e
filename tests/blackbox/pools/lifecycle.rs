//! A worker pool across the daemon's restart (it reconnects), its own
//! SIGTERM (it drains), and `--through-server` against a daemon outside a
//! cluster (it claims there) or one that refuses its token (it ends).

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::{AGENTS, Pool, Setup, create, file, mint};
use crate::daemon::{Swarmd, read_pid};

#[tokio::test]
async fn a_pool_reconnects_when_the_daemon_restarts() {
    let mut sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let pool = Pool::start(&sw, &token, "remote", "pool-a", 1).await;
    let before = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    assert_eq!(sw.finished(&before).await["status"], "pass");

    sw.kill9().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    sw.restart().await;
    let after = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    let view = sw.finished(&after).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"]["pool"], "pool-a");
}

#[tokio::test]
async fn sigterm_drains_a_pool_its_running_attempt_finishes_and_it_exits_0() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let mut pool = Pool::start(&sw, &token, "remote", "pool-a", 1).await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "hold"})).await;
    read_pid(&file(&sw, &task, 1, "pid")).await;

    kill(Pid::from_raw(pool.pid()), Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        pool.child.try_wait().unwrap().is_none(),
        "it waits for its attempt"
    );
    // Draining, it claims nothing more.
    let queued = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    std::fs::write(file(&sw, &task, 1, "go"), "").unwrap();
    let status = pool.exited(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}\n{}", pool.log());
    assert_eq!(sw.finished(&task).await["status"], "pass");
    assert_eq!(
        sw.task(&queued).await["status"],
        "running",
        "still waiting for a pool"
    );
    assert!(!file(&sw, &queued, 1, "pid").exists());
}

#[tokio::test]
async fn through_a_daemon_outside_a_cluster_the_pool_claims_there_or_ends_refused() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let through = || Setup {
        args: vec!["--through-server".to_owned()],
        ..Setup::default()
    };
    let pool = Pool::start_with(&sw, &token, "remote", "pool-t", 1, through()).await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"]["pool"], "pool-t");

    // A token the daemon refuses ends the pool at start, non-zero.
    let mut refused =
        Pool::start_with(&sw, "swc1.not.a.token", "remote", "pool-r", 1, through()).await;
    let status = refused.exited(Duration::from_secs(10)).await;
    assert!(!status.success(), "{}", refused.log());
    assert!(refused.log().contains("refused"), "{}", refused.log());
}
