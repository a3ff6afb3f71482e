//! The `merge` node: up to three ordinary steps under one node, keyed
//! `<key>/judge`, `<key>/merge` and `<key>/resolve` (each with its own
//! tries in the journal, as any step's).
//!
//! 1. `pick_best` only: the judge step gets `{candidates, branches}` (the
//!    node's items as given, and each one's branch name or null: null
//!    too for a step's changes that made no commit) and must
//!    answer an object whose `winner` is an index into `candidates` or one
//!    of the branch names; `reason` is kept with the verdict.
//! 2. The merge step runs the merge agent with `{branches, strategy}` (the
//!    items that name a branch; `pick` of the winner for `pick_best`); a
//!    record without a `branch` string (an agent that is not a merge
//!    agent) fails the node.
//! 3. When the merge conflicted with a work branch and the node has an
//!    `on_conflict` agent, the resolver step starts from that branch (its
//!    worktree holds the conflict markers) and its git changes are the
//!    resolved branch.
//!
//! The node's result is `{branch, head, strategy, merge, verdict?,
//! resolved?, conflict?}`: the branch that holds the outcome (the resolved
//! one after a resolution), the merge agent's record, the judge's answer,
//! the resolver's changes, and the conflict left when nothing resolved it.

use serde_json::{Map, Value, json};

use super::eval::{Eval, Place, Res, StepNode, failed, write};
use crate::expr::Expr;
use crate::ir::MergeStrategy;

/// A merge node's fields, borrowed from it.
pub(super) struct MergeNode<'a> {
    pub agent: &'a String,
    pub branches: &'a Expr,
    pub strategy: MergeStrategy,
    pub judge: Option<&'a String>,
    pub on_conflict: Option<&'a String>,
    pub out: &'a Expr,
}

/// How one inner step ended.
enum Inner {
    Passed {
        value: Value,
        changes: Value,
        seq: u64,
    },
    Other(Res),
}

impl Eval<'_> {
    pub(super) fn merge_node(
        &mut self,
        node: &MergeNode<'_>,
        at: &Place,
        ctx: Value,
    ) -> (Res, Vec<String>) {
        let mut tries = Vec::new();
        let items = match node.branches.eval(&ctx) {
            Ok(Value::Array(items)) => items,
            Ok(_) => {
                let reason = format!("{}/branches: wants an array", at.pointer);
                return (failed(reason), tries);
            }
            Err(e) => return (failed(format!("{}/branches: {e}", at.pointer)), tries),
        };
        let names: Vec<Value> = items.iter().map(branch_of).collect();
        let mut latest = 0;
        let mut result = Map::new();
        result.insert("strategy".into(), node.strategy.as_str().into());

        let pick = match (node.strategy, node.judge) {
            (MergeStrategy::PickBest, Some(judge)) => {
                let input = json!({"candidates": items, "branches": names});
                let verdict = match self.inner(judge, "judge", input, None, false, at, &mut tries) {
                    Inner::Passed { value, seq, .. } => {
                        latest = latest.max(seq);
                        value
                    }
                    Inner::Other(res) => return (res, tries),
                };
                let Some(branch) = winner(&verdict, &names) else {
                    let reason = format!(
                        "{}/judge: the verdict names no candidate with a branch: {}",
                        at.pointer,
                        cut(&verdict)
                    );
                    return (
                        Res::Failed {
                            reason,
                            seq: latest,
                        },
                        tries,
                    );
                };
                result.insert("verdict".into(), verdict);
                Some(branch)
            }
            (MergeStrategy::PickBest, None) => {
                return (
                    failed(format!("{}: pick_best needs a judge", at.pointer)),
                    tries,
                );
            }
            _ => None,
        };

        let branches: Vec<&Value> = names.iter().filter(|n| n.is_string()).collect();
        if branches.is_empty() {
            let reason = format!("{}/branches: no item names a branch", at.pointer);
            return (
                Res::Failed {
                    reason,
                    seq: latest,
                },
                tries,
            );
        }
        let input = match &pick {
            Some(branch) => json!({"branches": branches, "strategy": "pick", "pick": branch}),
            None => json!({"branches": branches, "strategy": node.strategy.as_str()}),
        };
        let record = match self.inner(node.agent, "merge", input, None, false, at, &mut tries) {
            Inner::Passed { value, seq, .. } => {
                latest = latest.max(seq);
                value
            }
            Inner::Other(res) => return (res, tries),
        };
        if !record["branch"].is_string() {
            let reason = format!(
                "{}/merge: agent `{}` answered no `branch`, so it is not a merge agent \
                 (`kind = \"merge\"`): {}",
                at.pointer,
                node.agent,
                cut(&record)
            );
            return (
                Res::Failed {
                    reason,
                    seq: latest,
                },
                tries,
            );
        }
        result.insert("branch".into(), record["branch"].clone());
        result.insert("head".into(), record["head"].clone());
        let conflict = record.get("conflict").cloned().unwrap_or(Value::Null);
        result.insert("merge".into(), record);

        if !conflict.is_null() {
            let work = conflict["work_branch"].as_str().map(str::to_owned);
            match (node.on_conflict, work) {
                (Some(resolver), Some(work)) => {
                    let files: Vec<&str> = conflict["files"]
                        .as_array()
                        .map(|f| f.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let prompt = format!(
                        "Merging {} conflicted in {}. This worktree holds the merge with git's \
                         conflict markers in those files: resolve them, keeping both sides' \
                         intent, and commit.",
                        conflict["branch"].as_str().unwrap_or("a branch"),
                        files.join(", ")
                    );
                    let start = Some(work);
                    let resolved = match self.inner(
                        resolver,
                        "resolve",
                        Value::String(prompt),
                        start,
                        true,
                        at,
                        &mut tries,
                    ) {
                        Inner::Passed { changes, seq, .. } => {
                            latest = latest.max(seq);
                            changes
                        }
                        Inner::Other(res) => return (res, tries),
                    };
                    result.insert("branch".into(), resolved["branch"].clone());
                    result.insert("head".into(), resolved["head"].clone());
                    result.insert("resolved".into(), resolved);
                }
                _ => {
                    result.insert("conflict".into(), conflict);
                }
            }
        }
        let res = match write(node.out, ctx, Value::Object(result)) {
            Ok(ctx) => Res::Done { ctx, seq: latest },
            Err(reason) => Res::Failed {
                reason,
                seq: latest,
            },
        };
        (res, tries)
    }

    /// Runs (or replays) inner step `part` of the node at `at`.
    #[allow(clippy::too_many_arguments)]
    fn inner(
        &mut self,
        agent: &String,
        part: &str,
        input: Value,
        start_from: Option<String>,
        wants_changes: bool,
        at: &Place,
        tries: &mut Vec<String>,
    ) -> Inner {
        let input = Expr::Lit { value: input };
        let out = Expr::Path { at: "$.v".into() };
        let changes = Expr::Path { at: "$.c".into() };
        let start = start_from.map(|branch| Expr::Lit {
            value: Value::String(branch),
        });
        let name = Some(part.to_owned());
        let step = StepNode {
            agent,
            input: &input,
            out: &out,
            name: &name,
            retry: None,
            queue_timeout_secs: None,
            timeout_secs: None,
            changes: wants_changes.then_some(&changes),
            session: None,
            continue_from: None,
            start_from: start.as_ref(),
        };
        let (res, keys) = self.step(&step, &at.child(part), json!({}));
        tries.extend(keys);
        match res {
            Res::Done { ctx, seq } => Inner::Passed {
                value: ctx.get("v").cloned().unwrap_or(Value::Null),
                changes: ctx.get("c").cloned().unwrap_or(Value::Null),
                seq,
            },
            Res::Failed { reason, seq } => Inner::Other(Res::Failed {
                reason: format!("{}: {reason}", at.pointer),
                seq,
            }),
            blocked @ Res::Blocked { .. } => Inner::Other(blocked),
        }
    }
}

/// The branch an item names: itself when a string, its `branch` when an
/// object with one; else null. A step's `changes` whose `head` is its
/// `base` made no commit, and its branch is deleted when its attempt
/// ends (docs/tasks.md, Worktrees), so it names none.
fn branch_of(item: &Value) -> Value {
    match item {
        Value::String(_) => item.clone(),
        Value::Object(map) => match (map.get("branch"), map.get("head"), map.get("base")) {
            (_, Some(Value::String(head)), Some(Value::String(base))) if head == base => {
                Value::Null
            }
            (Some(branch @ Value::String(_)), _, _) => branch.clone(),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// The branch the verdict's `winner` names: an index into the candidates
/// or one of their branch names.
fn winner(verdict: &Value, names: &[Value]) -> Option<String> {
    let named = match verdict.get("winner")? {
        Value::Number(n) => names.get(usize::try_from(n.as_u64()?).ok()?)?,
        Value::String(s) => names.iter().find(|n| n.as_str() == Some(s))?,
        _ => return None,
    };
    named.as_str().map(str::to_owned)
}

/// A value as JSON, cut to 200 characters for a reason.
fn cut(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}
