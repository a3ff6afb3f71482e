//! Fan-out: one branch per item, at most `concurrency` of them started
//! and not ended at once, joined as `all`, `any`, `race` or `all_settled`.
//! A branch has started once it read a journal entry; the rest start in
//! item order as running ones end. "First" means the outcome recorded
//! first (journal seq), so the decision never changes when a loser's
//! outcome arrives later. Once the join is decided, the branches still
//! running are dropped from `live`, which makes the runner cancel them.

use serde_json::{Value, json};

use super::eval::{Eval, Evaluation, NodeStatus, Place, Res, failed, overlay, write};
use crate::expr::Expr;
use crate::ir::{JoinMode, Node};

/// A fan-out's fields, borrowed from its node.
pub(super) struct FanoutNode<'a> {
    pub items: &'a Expr,
    pub bind: &'a Expr,
    pub body: &'a Node,
    pub join: JoinMode,
    pub out: &'a Expr,
    pub concurrency: Option<u32>,
}

/// Where one branch is.
enum End {
    /// It ended; the variables it wrote.
    Passed {
        value: Value,
        seq: u64,
    },
    Failed {
        reason: String,
        seq: u64,
    },
    /// Started and not ended.
    Open,
    /// Waiting for a running branch to end.
    Queued,
}

/// What the join decided.
enum Decision {
    Done { value: Value, seq: u64 },
    Failed { reason: String, seq: u64 },
    Undecided,
}

impl Eval<'_> {
    pub(super) fn fanout(&mut self, fanout: &FanoutNode<'_>, at: &Place, ctx: Value) -> Res {
        let items = match fanout.items.eval(&ctx) {
            Ok(Value::Array(items)) => items,
            Ok(other) => {
                return failed(format!(
                    "{}/items: wants an array, got {}",
                    at.pointer,
                    kind_of(&other)
                ));
            }
            Err(e) => return failed(format!("{}/items: {e}", at.pointer)),
        };
        if items.len() > self.max_fanout {
            return failed(format!(
                "{}/items: {} items, more than limits.max_fanout ({})",
                at.pointer,
                items.len(),
                self.max_fanout
            ));
        }
        let width = fanout
            .concurrency
            .map_or(items.len(), |c| c.max(1) as usize);
        let outer = std::mem::take(&mut self.out);
        let mut ends = Vec::with_capacity(items.len());
        let mut effects: Vec<(bool, Evaluation)> = Vec::new();
        let mut running = 0;
        // Whether every started branch still open waits only for waits: a
        // queued branch starts only once one of them ends.
        let mut open_on_waits = true;
        for (i, item) in items.into_iter().enumerate() {
            let branch_ctx = match write(fanout.bind, ctx.clone(), item) {
                Ok(c) => c,
                Err(reason) => {
                    self.out = outer;
                    return failed(reason);
                }
            };
            let before = self.touched;
            let place = at.child("body").instance(format!("[{i}]"));
            self.fanouts.push(at.key());
            let res = self.node(fanout.body, &place, branch_ctx);
            self.fanouts.pop();
            let fx = std::mem::take(&mut self.out);
            match res {
                Res::Done { ctx: after, seq } => {
                    ends.push(End::Passed {
                        value: overlay(&ctx, after),
                        seq,
                    });
                    effects.push((false, fx));
                }
                Res::Failed { reason, seq } => {
                    ends.push(End::Failed { reason, seq });
                    effects.push((false, fx));
                }
                Res::Blocked { on_waits } if self.touched > before || running < width => {
                    running += 1;
                    open_on_waits &= on_waits;
                    ends.push(End::Open);
                    effects.push((true, fx));
                }
                Res::Blocked { .. } => {
                    self.planned -= fx.starts.len() + fx.waits.len();
                    ends.push(End::Queued);
                }
            }
        }
        self.out = outer;
        let decision = decide(fanout.join, &ends);
        let decided = !matches!(decision, Decision::Undecided);
        for (open, fx) in effects {
            self.merge(fx, open && !decided, decided);
        }
        match decision {
            Decision::Done { value, seq } => match write(fanout.out, ctx, value) {
                Ok(ctx) => Res::Done { ctx, seq },
                Err(reason) => Res::Failed { reason, seq },
            },
            Decision::Failed { reason, seq } => Res::Failed { reason, seq },
            Decision::Undecided => Res::Blocked {
                on_waits: running > 0 && open_on_waits,
            },
        }
    }

    /// Takes a branch's effects: all of them while it runs on, only its
    /// node states (the running ones marked cancelled) once it lost.
    fn merge(&mut self, fx: Evaluation, live: bool, decided: bool) {
        for (key, mut node) in fx.nodes {
            if decided && matches!(node.status, NodeStatus::Running | NodeStatus::Waiting) {
                node.status = NodeStatus::Cancelled;
            }
            self.out.nodes.insert(key, node);
        }
        if !live {
            self.planned -= fx.starts.len() + fx.waits.len();
        } else {
            self.out.starts.extend(fx.starts);
            self.out.waits.extend(fx.waits);
            self.out.live.extend(fx.live);
        }
    }
}

fn decide(join: JoinMode, ends: &[End]) -> Decision {
    let all_ended = ends
        .iter()
        .all(|e| matches!(e, End::Passed { .. } | End::Failed { .. }));
    let latest = ends
        .iter()
        .map(|e| match e {
            End::Passed { seq, .. } | End::Failed { seq, .. } => *seq,
            _ => 0,
        })
        .max()
        .unwrap_or(0);
    let first_failure = ends
        .iter()
        .filter_map(|e| match e {
            End::Failed { reason, seq } => Some((*seq, reason)),
            _ => None,
        })
        .min_by_key(|(seq, _)| *seq);
    let first_pass = ends
        .iter()
        .filter_map(|e| match e {
            End::Passed { value, seq } => Some((*seq, value)),
            _ => None,
        })
        .min_by_key(|(seq, _)| *seq);
    match join {
        JoinMode::All => match first_failure {
            Some((seq, reason)) => Decision::Failed {
                reason: reason.clone(),
                seq,
            },
            None if all_ended => Decision::Done {
                value: Value::Array(ends.iter().map(passed_value).collect()),
                seq: latest,
            },
            None => Decision::Undecided,
        },
        JoinMode::Any => match first_pass {
            Some((seq, value)) => Decision::Done {
                value: value.clone(),
                seq,
            },
            None if all_ended => match first_failure {
                Some((seq, reason)) => Decision::Failed {
                    reason: format!("every branch failed; the first: {reason}"),
                    seq,
                },
                None => Decision::Done {
                    value: Value::Null,
                    seq: 0,
                },
            },
            None => Decision::Undecided,
        },
        JoinMode::Race => match (first_pass, first_failure) {
            (Some((ps, value)), Some((fs, _))) if ps < fs => Decision::Done {
                value: value.clone(),
                seq: ps,
            },
            (Some((seq, value)), None) => Decision::Done {
                value: value.clone(),
                seq,
            },
            (_, Some((seq, reason))) => Decision::Failed {
                reason: reason.clone(),
                seq,
            },
            (None, None) if all_ended => Decision::Done {
                value: Value::Null,
                seq: 0,
            },
            (None, None) => Decision::Undecided,
        },
        JoinMode::AllSettled if all_ended => Decision::Done {
            value: Value::Array(
                ends.iter()
                    .map(|e| match e {
                        End::Passed { value, .. } => json!({"status": "passed", "value": value}),
                        End::Failed { reason, .. } => {
                            json!({"status": "failed", "reason": reason})
                        }
                        _ => Value::Null,
                    })
                    .collect(),
            ),
            seq: latest,
        },
        JoinMode::AllSettled => Decision::Undecided,
    }
}

fn passed_value(end: &End) -> Value {
    match end {
        End::Passed { value, .. } => value.clone(),
        _ => Value::Null,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
