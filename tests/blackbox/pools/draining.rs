//! A stopping pool hands back what it still runs, every time: two attempts
//! claimed together and killed after a short drain both fail at once with
//! the hand-back's reason (docs/tasks.md, Draining), instead of waiting out
//! their leases. And a finished attempt costs the daemon a heartbeat or
//! two, not a burst of them: an attempt answered gone is not named again.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::{AGENTS, Pool, Setup, create, file, mint};
use crate::daemon::{Swarmd, read_pid};

#[tokio::test]
async fn sigterm_after_a_short_drain_hands_back_both_attempts_claimed_together() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    // The hand-back raced the pool's last heartbeat: repeated to make the
    // race likely.
    for round in 0..4 {
        let setup = Setup {
            drain_secs: Some(1),
            ..Setup::default()
        };
        let name = format!("pool-d{round}");
        let mut pool = Pool::start_with(&sw, &token, "remote", &name, 2, setup).await;
        let tasks = [
            create(&sw, json!({"agent": "remote", "prompt": "hold"})).await,
            create(&sw, json!({"agent": "remote", "prompt": "hold"})).await,
        ];
        for task in &tasks {
            read_pid(&file(&sw, task, 1, "pid")).await;
        }
        kill(Pid::from_raw(pool.pid()), Signal::SIGTERM).unwrap();
        let status = pool.exited(Duration::from_secs(15)).await;
        assert!(status.success(), "{status}\n{}", pool.log());
        let exited = Instant::now();
        for task in &tasks {
            // `finished` waits 15 s at most: far short of the lease.
            let view = sw.finished(task).await;
            assert_eq!(
                view["status"],
                "failed",
                "round {round}: {view}\n{}",
                pool.log()
            );
            assert!(
                view.to_string()
                    .contains("handed back: the worker pool is stopping"),
                "round {round}: {view}\n{}",
                pool.log()
            );
        }
        assert!(
            exited.elapsed() < Duration::from_secs(5),
            "round {round}: handed back late ({:?})",
            exited.elapsed()
        );
    }
}

/// The daemon's count of `POST /v1/pool/heartbeat` requests, any status.
async fn heartbeats(sw: &Swarmd) -> u64 {
    let metrics = sw.metrics().await;
    metrics
        .lines()
        .filter(|l| l.starts_with("swarmd_http_requests_total{route=\"/v1/pool/heartbeat\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test]
async fn a_passed_attempt_costs_a_heartbeat_or_two_and_is_called_gone_once() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let pool = Pool::start(&sw, &token, "remote", "pool-h", 1).await;
    for round in 0..3 {
        let before = heartbeats(&sw).await;
        let task = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
        let view = sw.finished(&task).await;
        assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
        // Idle again: nothing held, nothing to report.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let sent = heartbeats(&sw).await - before;
        assert!(
            sent <= 3,
            "round {round}: {sent} heartbeats for one attempt\n{}",
            pool.log()
        );
        let gone = pool
            .log()
            .lines()
            .filter(|l| l.contains("attempt gone") && l.contains(&task))
            .count();
        assert!(gone <= 1, "round {round}: {gone}× gone\n{}", pool.log());
    }
}
