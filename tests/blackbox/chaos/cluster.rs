//! Crash chaos on two nodes of one PostgreSQL database (docs/benchmarks.md,
//! Crash chaos): the run of `chaos` against node A while node B runs
//! beside it. Every third kill keeps A down past its lease, so B takes A's
//! live tasks over and homes the MainAI's session before A comes back;
//! each of those kills comes 0–5 ms after a result of one of the session's
//! tasks was acknowledged, so its `task_done` may die with A and must reach
//! the MainAI from B or from A once it is back (`task_done_missing`). The
//! MainAI and every client talk to A only, so what B holds they reach
//! through A's forwarding. Then B's
//! log and exit are checked too, that B did take tasks over, with the
//! database's integrity and the event log's attempt order: no
//! attempt of a task starts while another of it is open (run twice at
//! once), and no attempt starts twice.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::chaos::checks::{self, Check};
use crate::chaos::ledger::Ctx;
use crate::chaos::{AGENTS, Backend, Beside, ECHO_LUA, env_number, run};
use crate::daemon::Swarmd;

/// Kills in the short mode.
const SHORT_KILLS: u64 = 10;

/// The node lease: short, so a kill held past it is a takeover in seconds,
/// yet long enough that the surviving node's heartbeat (every third of it)
/// is not starved past it while the suite's other tests load both cores.
const LEASE: Duration = Duration::from_secs(4);

/// Both nodes' settings: a short lease, every result over 8 bytes spilled.
fn body() -> String {
    format!(
        "\n[limits]\ninline_max_bytes = 8\n\n[cluster]\nnode_lease_secs = {}\n{AGENTS}",
        LEASE.as_secs()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_one_of_two_nodes_loses_nothing_and_runs_nothing_twice() {
    let kills = env_number("SWARMD_CHAOS_KILLS").unwrap_or(SHORT_KILLS);
    let database = swarmd_postgres::testing::fresh_database().await;
    // B starts first and makes the shared keyring and admin token; it runs
    // the same agents, its Lua script in its own directory.
    let b = Swarmd::on_database(&body(), &database);
    std::fs::write(b.dir().join("echo.lua"), ECHO_LUA).unwrap();
    let b = b.start().await;
    let a = Swarmd::on_database(&body(), &database);
    let peer = Peer {
        node: b,
        lease: LEASE,
    };
    let beside = Beside { peer: Some(peer) };
    run(a, kills, Backend::Postgres(database), beside).await;
}

/// The node beside the killed one.
pub(super) struct Peer {
    pub(super) node: Swarmd,
    pub(super) lease: Duration,
}

impl Peer {
    /// What only a cluster run checks: the attempt order in the shared
    /// log, B's clean exit, and no secret in B's log.
    /// B's log comes back too, for the run to save when a check failed.
    pub(super) async fn checks(mut self, ctx: &Ctx) -> (Vec<Check>, String) {
        let log = event_log(ctx).await;
        let order = attempt_order(&log);
        self.node.sigterm();
        let status = self.node.exited().await;
        let exit = Check {
            name: "peer_clean_shutdown",
            offenders: if status.success() {
                Vec::new()
            } else {
                vec![format!("SIGTERM to node B: {status}")]
            },
        };
        let node_log = self.node.log();
        let mut secrets = checks::secrets_in_log(&node_log);
        secrets.name = "peer_secret_in_log";
        // Every third kill kept A down past its lease: B must have taken
        // live tasks over at least once, or the run tested no takeover.
        let took_over = node_log
            .lines()
            .filter(|line| line.contains("took over the live tasks of a dead node"))
            .any(|line| !line.contains("tasks=0"));
        let takeover = Check {
            name: "peer_took_nothing_over",
            offenders: if took_over {
                Vec::new()
            } else {
                vec!["node B never took a live task over".to_owned()]
            },
        };
        (vec![order, exit, secrets, takeover], node_log)
    }
}

/// The whole shared event log, as node A serves it.
async fn event_log(ctx: &Ctx) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0u64;
    loop {
        let url = format!("{}/v1/events?after_seq={after}&limit=1000", ctx.base);
        let page: Value = ctx
            .http
            .get(&url)
            .bearer_auth(&ctx.admin)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let page = page["events"].as_array().cloned().unwrap_or_default();
        let Some(last) = page.last() else {
            return events;
        };
        after = last["seq"].as_u64().unwrap();
        events.extend(page);
    }
}

/// Offenders: an attempt started while another attempt of its task was
/// open, or started twice.
fn attempt_order(log: &[Value]) -> Check {
    let mut open: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut started: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut offenders = Vec::new();
    for record in log {
        let event = &record["event"];
        let (Some(task), Some(attempt)) = (event["task_id"].as_str(), event["attempt"].as_u64())
        else {
            continue;
        };
        match event["kind"].as_str() {
            Some("attempt_started") => {
                let runs = started.entry(task.to_owned()).or_default();
                if runs.contains(&attempt) {
                    offenders.push(format!("{task}: attempt {attempt} started twice"));
                }
                runs.push(attempt);
                let slot = open.entry(task.to_owned()).or_default();
                if let Some(running) = slot {
                    offenders.push(format!(
                        "{task}: attempt {attempt} started while attempt {running} ran (seq {})",
                        record["seq"]
                    ));
                }
                *slot = Some(attempt);
            }
            Some("attempt_finished") => {
                if let Some(slot) = open.get_mut(task)
                    && *slot == Some(attempt)
                {
                    *slot = None;
                }
            }
            _ => {}
        }
    }
    if started.is_empty() {
        offenders.push("no attempt started: the run tested nothing".to_owned());
    }
    Check {
        name: "attempt_run_twice",
        offenders,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(seq: u64, kind: &str, task: &str, attempt: u64) -> Value {
        json!({"seq": seq, "event": {"kind": kind, "task_id": task, "attempt": attempt}})
    }

    #[test]
    fn the_attempt_order_check_finds_overlaps_and_repeats() {
        let fine = [
            event(1, "attempt_started", "T-1", 1),
            event(2, "attempt_finished", "T-1", 1),
            event(3, "attempt_started", "T-1", 2),
        ];
        assert!(attempt_order(&fine).offenders.is_empty());
        let overlap = [
            event(1, "attempt_started", "T-1", 1),
            event(2, "attempt_started", "T-1", 2),
        ];
        assert_eq!(attempt_order(&overlap).offenders.len(), 1);
        let twice = [
            event(1, "attempt_started", "T-1", 1),
            event(2, "attempt_finished", "T-1", 1),
            event(3, "attempt_started", "T-1", 1),
        ];
        assert_eq!(attempt_order(&twice).offenders.len(), 1);
    }
}
