//! This node's life in the cluster after registration: a heartbeat every
//! third of the lease, a look for dead peers at the same pace (taking over
//! their live tasks), and the self-fencing that stops the process at once
//! when its lease is gone.

use std::time::Duration;

use swarmd_engine::Engine;
use swarmd_postgres::{PgCluster, Takeover};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lease::Lease;

/// The exit status of a node that fenced itself (EX_TEMPFAIL: the service
/// manager restarts it, as a new incarnation).
pub(crate) const FENCED_EXIT: i32 = 75;

/// How long a fenced node keeps answering (every write refused with
/// `node_fenced`) before it exits, so requests in flight get their answer.
const FENCED_LINGER: Duration = Duration::from_millis(1500);

/// Runs until `stop`, or exits the process when the node is fenced.
pub(crate) async fn run(
    engine: Engine,
    runner: swarmd_flow_run::Runner,
    db: PgCluster,
    lease_length: Duration,
    stop: CancellationToken,
) {
    let mut lease = Lease::new(lease_length, Instant::now());
    let mut ticks = tokio::time::interval(lease.tick());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Takeovers whose tasks could not be read yet: the rows are this node's,
    // so they are read again at every tick until they load.
    let mut unread: Vec<Takeover> = Vec::new();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        // A pause (SIGSTOP) or a long outage: peers may own our tasks.
        if lease.expired(Instant::now()) {
            fence(&db, "this node's lease ran out before it could renew it").await;
        }
        let sent = Instant::now();
        match db.heartbeat().await {
            Ok(true) => lease.renewed(sent),
            Ok(false) => fence(&db, "another node declared this node dead").await,
            Err(error) => tracing::warn!(%error, "heartbeat failed; retrying"),
        }
        if db.is_fenced() {
            fence(&db, "a write of this node was fenced").await;
        }
        for takeover in std::mem::take(&mut unread) {
            unread.extend(adopt(&engine, &db, takeover).await);
        }
        match db.take_over_expired(lease_length).await {
            Ok(taken) => {
                let runs: u64 = taken.iter().map(|t| t.runs).sum();
                for takeover in taken {
                    unread.extend(adopt(&engine, &db, takeover).await);
                }
                if runs > 0 {
                    // The runs are this node's now: the runner reads them back.
                    runner.adopt_soon();
                }
            }
            Err(error) if error.is_fenced() => {
                fence(&db, "another node declared this node dead").await;
            }
            Err(error) => tracing::warn!(%error, "cannot look for dead nodes"),
        }
    }
}

/// Loads a dead node's tasks, now this node's, into the engine; gives the
/// takeover back when its tasks could not be read, to try again.
async fn adopt(engine: &Engine, db: &PgCluster, takeover: Takeover) -> Option<Takeover> {
    let started = Instant::now();
    let snapshot = match db
        .load_taken(&takeover.tasks, engine.clock().now_secs())
        .await
    {
        Ok(snapshot) => snapshot,
        Err(error) => {
            tracing::error!(
                %error,
                node = %takeover.node,
                tasks = takeover.tasks.len(),
                "cannot read the tasks taken over; trying again at the next tick"
            );
            return Some(takeover);
        }
    };
    let Takeover {
        node,
        epoch,
        tasks,
        runs,
        left,
    } = takeover;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    // One line per takeover, at `$level`: the same fields either way.
    macro_rules! took_over {
        ($level:ident, $report:expr, $what:literal) => {
            tracing::$level!(
                %node,
                epoch,
                tasks = tasks.len(),
                runs,
                requeued = $report.requeued,
                decided = $report.decided,
                interrupted = $report.interrupted,
                retried = $report.retried,
                resumed = $report.resumed,
                elapsed_ms,
                $what
            )
        };
    }
    match engine.adopt(snapshot).await {
        // A node that left cleanly handed its unfinished work on, as its
        // operator asked: news, not a warning.
        Ok(report) if left => took_over!(
            info,
            report,
            "took over the unfinished tasks of a node that stopped"
        ),
        Ok(report) => took_over!(warn, report, "took over the live tasks of a dead node"),
        Err(error) => tracing::error!(%error, %node, "taking over a node's tasks failed"),
    }
    None
}

/// Stops this node at once: every write is refused from now on, requests
/// in flight get their answer for a moment, then the process exits (its
/// process agents die with it).
async fn fence(db: &PgCluster, why: &str) -> ! {
    db.mark_fenced();
    tracing::error!(
        reason = why,
        "this node is fenced: its tasks belong to another node now; exiting"
    );
    tokio::time::sleep(FENCED_LINGER).await;
    std::process::exit(FENCED_EXIT);
}
