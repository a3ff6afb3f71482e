//! Crash chaos (docs/tasks.md, Recovery): mixed load on the real binary while it is
//! killed with SIGKILL at random points (half of them 0–5 ms after a result
//! was acknowledged, some after a creation was) and restarted on the same
//! state directory; then the invariants of `checks`. The load: `POST /v1/tasks` of a process
//! and a Lua agent with idempotency keys (`load`), and delegated tasks
//! through a MainAI session whose SubAgents the test plays (`main_ai`), with
//! heartbeats, output and cancels.
//!
//! The same run goes against SQLite and against PostgreSQL (`postgres`, a
//! fresh database of the test cluster); after it, each store's own
//! integrity is checked too. Short by default (CI); `SWARMD_CHAOS_KILLS=200`
//! runs the long mode and `SWARMD_CHAOS_SEED` repeats a run's random choices
//! (not its timing). See `docs/benchmarks.md`, "Crash chaos".

mod checks;
mod cluster;
mod flows;
mod ledger;
mod load;
mod main_ai;
mod postgres;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::chaos::checks::{Check, terminal};
use crate::chaos::ledger::{Ctx, Ledger, Rng};
use crate::daemon::Swarmd;
use crate::harness::PATIENCE;

/// `proc` takes a moment, so that kills find it running; `lua` echoes.
pub(super) const AGENTS: &str = r#"
[agents.proc]
kind = "process"
program = "/bin/sh"
args = ["-c", "sleep 0.1; exec cat"]
env = { PATH = "/usr/bin:/bin" }

[agents.lua]
kind = "lua"
script = "@DIR@/echo.lua"
"#;

pub(super) const ECHO_LUA: &str =
    "emit_progress(\"echo\", \"running\")\nreturn { value = prompt, ok = true }\n";

/// Kills in the short mode.
const SHORT_KILLS: u64 = 40;

/// How long every task may take to end once the load stopped: three
/// attempts of a 3 s lease, with room for a slow machine.
const SETTLE: Duration = Duration::from_secs(90);

/// How long the MainAI may wait for the `task_done` of a task that ended.
const DONE_GRACE: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_mixed_load_loses_nothing_acknowledged() {
    let kills = env_number("SWARMD_CHAOS_KILLS").unwrap_or(SHORT_KILLS);
    let sw = Swarmd::new(AGENTS);
    let db = sw.dir().join("state/swarmd.db");
    run(sw, kills, Backend::Sqlite(db), Beside::default()).await;
}

/// What a run has beside the daemon it kills.
#[derive(Default)]
struct Beside {
    /// A second node on the same database, never killed, which takes the
    /// killed node's tasks over when it stays down past its lease.
    peer: Option<cluster::Peer>,
}

/// The store a run's daemon is on, for what only it can check.
enum Backend {
    /// The database file.
    Sqlite(std::path::PathBuf),
    /// The test database.
    Postgres(swarmd_postgres::testing::TestDatabase),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }
}

/// One chaos run of `kills` kills on the daemon `sw` (not started yet) on
/// `backend`, whose own integrity is checked once the daemon has stopped.
async fn run(sw: Swarmd, kills: u64, backend: Backend, beside: Beside) {
    let store = backend.name();
    let seed = env_number("SWARMD_CHAOS_SEED").unwrap_or_else(|| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        u64::try_from(now.as_nanos() % u128::from(u64::MAX)).unwrap()
    });
    eprintln!("chaos: {store}, {kills} kills, SWARMD_CHAOS_SEED={seed}");

    std::fs::write(sw.dir().join("echo.lua"), ECHO_LUA).unwrap();
    let mut sw = sw.start().await;
    ready(&sw).await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let ctx = Arc::new(Ctx {
        base: sw.base.clone(),
        admin: sw.admin.clone(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
        ledger: Ledger::default(),
        rng: Rng::new(seed),
        stop_load: CancellationToken::new(),
        stop_all: CancellationToken::new(),
        up: watch::Sender::new(true),
    });

    let (requests, requests_rx) = mpsc::channel(64);
    let main_ai = tokio::spawn(main_ai::main_ai(ctx.clone(), login.clone(), requests_rx));
    let mut producers = JoinSet::new();
    producers.spawn(load::http_producer(ctx.clone(), 0));
    producers.spawn(load::http_producer(ctx.clone(), 1));
    producers.spawn(load::delegated_producer(ctx.clone(), requests));
    producers.spawn(load::canceller(ctx.clone()));
    producers.spawn(flows::producer(ctx.clone()));
    let answerer = tokio::spawn(flows::answerer(ctx.clone()));

    let started = Instant::now();
    let mut modes = [0u64; 4];
    for kill in 0..kills {
        // Beside a peer, every third kill stays down past the lease (the
        // peer homes the MainAI's session and takes the tasks over): it
        // comes right after a result of one of the session's tasks, so the
        // task ended on the session's home and its `task_done` may die
        // with it.
        let past_lease = beside.peer.is_some() && kill % 3 == 2;
        let mode = match ctx.rng.below(100) {
            _ if past_lease => 0,
            0..50 => 0,
            50..65 => 1,
            _ => 2,
        };
        modes[mode] += 1;
        match mode {
            0 => after(&ctx, &ctx.ledger.result_acked).await,
            1 => after(&ctx, &ctx.ledger.task_acked).await,
            _ => tokio::time::sleep(ctx.rng.millis(50, 1000)).await,
        }
        ctx.up.send_replace(false);
        sw.kill9().await;
        if let Some(peer) = &beside.peer
            && past_lease
        {
            modes[3] += 1;
            tokio::time::sleep(peer.lease * 2 + Duration::from_millis(500)).await;
        }
        sw.restart().await;
        ready(&sw).await;
        ctx.up.send_replace(true);
    }
    let load_time = started.elapsed();

    // The last restart is up: stop the load, let every task end.
    ctx.stop_load.cancel();
    let joined = tokio::time::timeout(PATIENCE * 2, async {
        while producers.join_next().await.is_some() {}
    })
    .await;
    assert!(joined.is_ok(), "the producers did not stop");
    flows::settle(&ctx).await;
    settle(&ctx, &login.sid).await;
    let (flow_checks, runs) = flows::checks(&ctx).await;
    ctx.stop_all.cancel();
    main_ai.await.unwrap();
    answerer.await.unwrap();

    let records = ctx.ledger.with(std::mem::take);
    let mut stored = checks::fetch(&ctx, &records).await;
    if let Backend::Postgres(database) = &backend {
        postgres::resolve_blobs(database, &mut stored).await;
    }
    let mut report = checks::run(&records, &stored, &login.sid);
    report.extend(flow_checks);
    let mut peer_log = None;
    if let Some(peer) = beside.peer {
        let (checks, log) = peer.checks(&ctx).await;
        report.extend(checks);
        peer_log = Some(log);
    }
    sw.sigterm();
    let status = sw.exited().await;
    report.push(Check {
        name: "clean_shutdown",
        offenders: if status.success() {
            Vec::new()
        } else {
            vec![format!("SIGTERM after the run: {status}")]
        },
    });
    report.push(match backend {
        Backend::Sqlite(db) => checks::integrity(&db),
        Backend::Postgres(database) => postgres::integrity(database).await,
    });
    let log = sw.log();
    report.push(checks::secrets_in_log(&log));

    let acked_tasks = records.tasks.values().filter(|ids| !ids.is_empty()).count();
    let violations: Vec<String> = report
        .iter()
        .map(|c| format!("{}={}", c.name, c.offenders.len()))
        .collect();
    eprintln!(
        "chaos summary: store={store} seed={seed} kills={kills} (after result {}, after creation {}, random {}, down past the lease {}) \
         load={:.1}s total={:.1}s tasks={} acked_keys={acked_tasks} runs={runs} answers={} results_acked={} \
         results_refused={} probes={} cancels_acked={} replays={} retries={} spawns={} \
         respawns={} spawns_after_ack={} task_done={} connections={} | {}",
        modes[0],
        modes[1],
        modes[2],
        modes[3],
        load_time.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        stored.listed.len(),
        records.flows.answers.len(),
        records.results.len(),
        records.refused_results,
        records.probes,
        records.cancels.len(),
        records.task_replays,
        records.retries,
        records.spawns.len(),
        records.respawns,
        records.spawns_after_ack,
        records.task_done.len(),
        records.connections,
        violations.join(" "),
    );

    let failed: Vec<&Check> = report.iter().filter(|c| !c.offenders.is_empty()).collect();
    if !failed.is_empty() {
        let saved = std::env::temp_dir().join(format!("swarmd-chaos-{seed}.log"));
        std::fs::write(&saved, &log).unwrap();
        if let Some(peer_log) = &peer_log {
            let saved = std::env::temp_dir().join(format!("swarmd-chaos-{seed}-peer.log"));
            std::fs::write(saved, peer_log).unwrap();
        }
        let details: Vec<String> = failed
            .iter()
            .map(|c| {
                let shown: Vec<&String> = c.offenders.iter().take(10).collect();
                format!("{} ({}): {shown:#?}", c.name, c.offenders.len())
            })
            .collect();
        // The logs' ends first and the broken invariants last, so the
        // tail of a CI run's output names them.
        if let Some(peer_log) = &peer_log {
            eprintln!("node B:\n{}", crate::harness::log_tail(peer_log));
        }
        eprintln!("{}", crate::harness::log_tail(&log));
        drop(sw);
        panic!(
            "chaos run (SWARMD_CHAOS_SEED={seed}) broke {} invariant(s); daemon log in {}\n{}",
            failed.len(),
            saved.display(),
            details.join("\n")
        );
    }
}

pub(super) fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
    )
}

/// Waits for the next `signal` (at most 2 s), then 0–5 ms: the window in
/// which an acknowledged write's consequences may not be durable yet.
async fn after(ctx: &Ctx, signal: &tokio::sync::Notify) {
    let _ = tokio::time::timeout(Duration::from_secs(2), signal.notified()).await;
    let lag = ctx.rng.below(6);
    if lag > 0 {
        tokio::time::sleep(Duration::from_millis(lag)).await;
    }
}

/// Polls `/readyz` until 200.
async fn ready(sw: &Swarmd) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(response) = sw.http.get(sw.url("/readyz")).send().await
            && response.status() == 200
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "swarmd not ready after a restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until every task is terminal and every task of the
/// MainAI's session that ended reached it as `task_done`. What is still
/// missing then is for the checks to report.
async fn settle(ctx: &Ctx, sid: &str) {
    let deadline = Instant::now() + SETTLE;
    let mut done_deadline = None;
    while Instant::now() < deadline {
        let listed = checks::list_all(ctx).await;
        if listed.values().all(terminal) {
            let owed = ctx.ledger.with(|r| {
                listed
                    .iter()
                    .filter(|(_, task)| task["session"] == sid)
                    .filter(|(id, _)| !r.task_done.iter().any(|(t, _, _)| t == *id))
                    .count()
            });
            let grace = *done_deadline.get_or_insert_with(|| Instant::now() + DONE_GRACE);
            if owed == 0 || Instant::now() > grace {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
