//! A worker pool across the daemon's restart (it reconnects), its own
//! SIGTERM (it drains), `--through-server` against a daemon outside a
//! cluster (it claims there) or one that refuses its token (it ends), and
//! a daemon given that answers only after the pool started (it is asked
//! again with backoff and claimed from once it answers).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

    // Without the flag or SWARMD_TOKEN, the file SWARMD_TOKEN_FILE names
    // holds the token.
    drop(pool);
    let file = sw.dir().join("pool.token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let from_file = Setup {
        env: vec![("SWARMD_TOKEN_FILE", file.as_path())],
        ..Setup::default()
    };
    let pool = Pool::start_with(&sw, "", "remote", "pool-f", 1, from_file).await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    assert_eq!(view["result"]["value"]["pool"], "pool-f");
}

/// A TCP proxy to `backend` that drops every connection until `open` is
/// set, then copies each both ways, counting them in `passed`. Its URL.
async fn gate(backend: &str, open: Arc<AtomicBool>, passed: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let host = backend.trim_start_matches("http://").to_owned();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            if !open.load(Ordering::SeqCst) {
                continue;
            }
            passed.fetch_add(1, Ordering::SeqCst);
            let host = host.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(host).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn a_daemon_given_that_answers_late_is_claimed_from_once_it_does() {
    let sw = Swarmd::new(AGENTS).start().await;
    let token = mint(&sw, &["remote"]);
    let open = Arc::new(AtomicBool::new(false));
    let passed = Arc::new(AtomicUsize::new(0));
    let late = gate(&sw.base, Arc::clone(&open), Arc::clone(&passed)).await;
    // Two daemons given: the first answers at start, the second (the same
    // daemon behind a closed gate) does not. Rediscovery is far off, so
    // only the backoff for a daemon given that never answered can reach
    // the second in time.
    let setup = Setup {
        args: ["--server", &late, "--rediscover-secs", "600"]
            .map(str::to_owned)
            .to_vec(),
        ..Setup::default()
    };
    let pool = Pool::start_with(&sw, &token, "remote", "pool-l", 1, setup).await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    let view = sw.finished(&task).await;
    assert_eq!(view["status"], "pass", "{view}\n{}", pool.log());
    let learned = |log: &str| {
        log.lines().any(|l| {
            l.contains("claiming from a daemon given, now that it answered") && l.contains(&late)
        })
    };
    assert!(!learned(&pool.log()), "{}", pool.log());

    open.store(true, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !learned(&pool.log()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon given that answered late was not claimed from\n{}",
            pool.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its claims go through the gate now: one connection answered the
    // ask, the next carries the claim loop's long-poll.
    while passed.load(Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no claim went through the daemon given that answered late\n{}",
            pool.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = create(&sw, json!({"agent": "remote", "prompt": "quick"})).await;
    assert_eq!(sw.finished(&again).await["status"], "pass");
}
