//! A run as people and programs read it: the record without its raw
//! journal, every node instance's state (from evaluating the journal), each
//! step try's task and outcome, and the waits. A step try the flow no
//! longer needed, and what failed only because of it, shows cancelled.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use swarmd_engine::{RunRecord, RunStatus};
use swarmd_flow::run::{Journal, NodeStatus, Outcome, evaluate};

use crate::advance::NO_LONGER_NEEDED;
use crate::{RunError, Runner, State};

/// A run with its graph's state.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub id: String,
    pub flow: String,
    pub flow_hash: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub input: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub version: u64,
    /// Node instances reached so far, in key order.
    pub nodes: Vec<NodeView>,
    pub waits: Vec<WaitView>,
    /// The flow as pinned, for drawing the graph.
    pub graph: Value,
}

/// One node instance.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub key: String,
    pub pointer: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub status: NodeStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A step's tries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tries: Vec<TryView>,
}

/// One try of a step. A try the run's end left open has the run's end as
/// its `ended_ms` and the run's end as its `reason`.
#[derive(Debug, Clone, Serialize)]
pub struct TryView {
    pub key: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    pub started_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The git changes a step asked for (`changes`): branch, base, head,
    /// files, insertions, deletions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One wait.
#[derive(Debug, Clone, Serialize)]
pub struct WaitView {
    pub key: String,
    pub name: String,
    pub open: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    pub opened_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The token that answers it (open waits, for the run's owner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

pub(crate) async fn build(
    runner: &Runner,
    record: RunRecord,
    tokens: bool,
) -> Result<RunView, RunError> {
    let state: State = serde_json::from_value(record.state.clone()).unwrap_or_default();
    let flow = runner.pinned(&record.flow_hash).await?;
    let mut called = std::collections::BTreeMap::new();
    for (name, hash) in &state.calls {
        called.insert(name.clone(), (*runner.pinned(hash).await?).clone());
    }
    let ev = evaluate(&flow, &called, &record.input, &state.journal);
    let journal = &state.journal;
    let dropped = dropped_tries(journal);
    let terminal = record.status.is_terminal();
    // A try still open when its run ended never ends on its own: the run's
    // end (its last write) is its end, and the run's end its reason.
    let cut_short = terminal.then(|| {
        let reason = match (record.status, &record.error) {
            (RunStatus::Cancelled, Some(why)) => format!("run cancelled: {why}"),
            (status, _) => format!("cancelled: the run {}", status.as_str()),
        };
        (record.updated_ms, reason)
    });
    let nodes = ev
        .nodes
        .into_iter()
        .map(|(key, node)| {
            let tries = node
                .tries
                .iter()
                .filter_map(|k| journal.steps.get(k).map(|e| (k, e)))
                .map(|(k, e)| {
                    let (output, changes, reason) = match &e.outcome {
                        Some(Outcome::Passed { value, changes, .. }) => {
                            (Some(value.clone()), changes.clone(), None)
                        }
                        Some(Outcome::Failed { reason, .. }) => (None, None, Some(reason.clone())),
                        None => (None, None, cut_short.as_ref().map(|(_, why)| why.clone())),
                    };
                    let ended_ms = match &e.outcome {
                        Some(outcome) => Some(outcome.at_ms()),
                        None => cut_short.as_ref().map(|(at, _)| (*at).max(e.started_ms)),
                    };
                    TryView {
                        key: k.clone(),
                        task_id: e.task.clone(),
                        started_ms: e.started_ms,
                        ended_ms,
                        output,
                        changes,
                        reason,
                    }
                })
                .collect();
            // A run that ended leaves nothing running.
            let status = match node.status {
                NodeStatus::Running | NodeStatus::Waiting if terminal => NodeStatus::Cancelled,
                NodeStatus::Failed if stopped(node.reason.as_deref(), &dropped) => {
                    NodeStatus::Cancelled
                }
                other => other,
            };
            NodeView {
                key,
                pointer: node.pointer,
                kind: node.kind,
                name: node.name,
                status,
                reason: node.reason,
                tries,
            }
        })
        .collect();
    let id = record.id.to_string();
    let waits = journal
        .waits
        .iter()
        .map(|(key, w)| {
            let (answer, reason) = match &w.outcome {
                Some(Outcome::Passed { value, .. }) => (Some(value.clone()), None),
                Some(Outcome::Failed { reason, .. }) => (None, Some(reason.clone())),
                None => (None, None),
            };
            let open = w.outcome.is_none() && !terminal;
            WaitView {
                key: key.clone(),
                name: w.name.clone(),
                open,
                prompt: w.prompt.clone(),
                schema: w.schema.clone(),
                opened_ms: w.opened_ms,
                deadline_ms: w.deadline_ms,
                answer,
                reason,
                token: (open && tokens).then(|| runner.wait_token_str(&id, key)),
            }
        })
        .collect();
    Ok(RunView {
        id,
        flow: record.flow,
        flow_hash: record.flow_hash,
        status: record.status.as_str(),
        session: record.session.map(|s| s.to_string()),
        input: record.input,
        result: record.result,
        error: record.error,
        created_ms: record.created_ms,
        updated_ms: record.updated_ms,
        version: record.version,
        nodes,
        waits,
        graph: serde_json::to_value(&*flow).unwrap_or(Value::Null),
    })
}

/// The step tries the run cancelled because the flow no longer needed
/// them (a join decided without them, a budget used up): those whose task
/// ended with the reason that cancel gave.
fn dropped_tries(journal: &Journal) -> BTreeSet<&str> {
    journal
        .steps
        .iter()
        .filter(|(key, entry)| {
            matches!(&entry.outcome, Some(Outcome::Failed { reason, .. })
                if reason.strip_prefix(NO_LONGER_NEEDED) == Some(key.as_str()))
        })
        .map(|(key, _)| key.as_str())
        .collect()
}

/// Whether a node that failed with `reason` failed only because a step
/// try under it was cancelled as no longer needed: its reason ends with
/// that cancel's (a step's `step b: …`, and the same carried up through
/// the nodes around it in the abandoned branch).
fn stopped(reason: Option<&str>, dropped: &BTreeSet<&str>) -> bool {
    reason
        .and_then(|r| {
            r.rfind(NO_LONGER_NEEDED)
                .map(|at| &r[at + NO_LONGER_NEEDED.len()..])
        })
        .is_some_and(|key| dropped.contains(key))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::advance::no_longer_needed;

    #[test]
    fn a_failure_from_a_try_the_flow_no_longer_needed_is_a_cancel() {
        let mut journal = Journal::default();
        for key in ["/a[0]", "/a[1]", "/a[2]"] {
            journal.start_step(key, format!("t{key}"), 1);
        }
        journal.end_step("/a[0]", Ok(json!(1)), 2).unwrap();
        journal
            .end_step("/a[1]", Err(no_longer_needed("/a[1]")), 3)
            .unwrap();
        // Cancelled with another step's reason, or failing on its own.
        journal
            .end_step("/a[2]", Err(no_longer_needed("/a[1]")), 4)
            .unwrap();
        let dropped = dropped_tries(&journal);
        assert_eq!(dropped, BTreeSet::from(["/a[1]"]));
        let failed = |text: &str| stopped(Some(text), &dropped);
        assert!(failed("step b: the flow no longer needs step /a[1]"));
        assert!(failed(
            "every branch failed; the first: step /a/body: the flow no longer needs step /a[1]"
        ));
        assert!(!failed("step b: the flow no longer needs step /a[2]"));
        assert!(!failed("step b: exit 1"));
        assert!(!stopped(None, &dropped));
    }
}
