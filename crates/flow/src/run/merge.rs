//! The `merge` node: ordinary steps under one node, keyed `<key>/judge`,
//! then per round `<key>/merge` and `<key>/resolve` (round 1) or
//! `<key>/merge-<n>` and `<key>/resolve-<n>` (round n ≥ 2), each with its
//! own tries in the journal, as any step's. Each inner step takes the
//! node's `retry` and `timeout_secs`.
//!
//! 1. `pick_best` only: the judge step gets `{candidates, branches}` (the
//!    node's items as given, and each one's branch name or null: null
//!    too for a step's changes that made no commit) and must
//!    answer an object whose `winner` is an index into `candidates` or one
//!    of the branch names; `reason` is kept with the verdict.
//! 2. Round 1's merge step runs the merge agent with `{branches,
//!    strategy}` (the items that name a branch; `pick` of the winner for
//!    `pick_best`); a record without a `branch` string (an agent that is
//!    not a merge agent) fails the node.
//! 3. When a round's merge conflicted with a work branch and the node has
//!    an `on_conflict` agent, the resolver step starts from that branch
//!    (its worktree holds the conflict markers) and its git changes are
//!    the resolved branch, when they resolve the conflict (`resolution`).
//!    A resolver that passed without resolving it leaves the conflict as a
//!    node without `on_conflict` does: in the result, no more rounds.
//! 4. A resolved conflict of a `sequence` leaves the branches given after
//!    the conflicting one unmerged: the next round's merge step runs the
//!    merge agent with `{branches: <those>, strategy: "sequence", base:
//!    <the resolved head>}`, and so on until every branch is merged or a
//!    conflict is left unresolved. Each round merges at least one branch,
//!    so there are at most as many rounds as branches.
//!
//! The node's result is `{branch, head, strategy, merge, verdict?,
//! resolved?, conflict?, rounds}`: the branch that holds the outcome and
//! its head (the last round's: its resolved branch after a resolution,
//! else its merge branch), round 1's merge record and resolver's changes
//! when they resolved its conflict, the judge's answer, the conflict left
//! when nothing resolved it, and `rounds`, each round's `{merge,
//! resolved?}` in order (`resolved` only for a resolution).

use serde_json::{Map, Value, json};

use super::eval::{Eval, Place, Res, StepNode, failed, write};
use crate::expr::Expr;
use crate::ir::{MergeStrategy, Retry};

/// A merge node's fields, borrowed from it.
pub(super) struct MergeNode<'a> {
    pub agent: &'a String,
    pub branches: &'a Expr,
    pub strategy: MergeStrategy,
    pub judge: Option<&'a String>,
    pub on_conflict: Option<&'a String>,
    pub retry: Option<&'a Retry>,
    pub timeout_secs: Option<u32>,
    pub out: &'a Expr,
}

/// One inner step to run: its agent, key part, input and start.
struct InnerStep<'a> {
    agent: &'a String,
    part: String,
    input: Value,
    start_from: Option<String>,
    wants_changes: bool,
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

/// How one round ended: its `{merge, resolved?}`, what it left for the
/// next round, and the latest outcome it read.
struct Round {
    entry: Map<String, Value>,
    next: Option<Next>,
    seq: u64,
}

/// What one round left for the next: the branches still to merge and the
/// head they are merged onto.
struct Next {
    branches: Vec<String>,
    base: String,
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
                let step = InnerStep {
                    agent: judge,
                    part: "judge".into(),
                    input: json!({"candidates": items, "branches": names}),
                    start_from: None,
                    wants_changes: false,
                };
                let verdict = match self.inner(node, step, at, &mut tries) {
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

        let branches: Vec<String> = names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect();
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
        let mut input = match &pick {
            Some(branch) => json!({"branches": branches, "strategy": "pick", "pick": branch}),
            None => json!({"branches": branches, "strategy": node.strategy.as_str()}),
        };
        // A pick merges one branch: none remains after its conflict.
        let mut given = if pick.is_some() { Vec::new() } else { branches };
        let bound = given.len().max(1);
        let mut rounds = Vec::new();
        for round in 1..=bound {
            let (next, seq) = match self.merge_round(node, round, input, &given, at, &mut tries) {
                Ok(Round { entry, next, seq }) => {
                    if round == 1 {
                        result.insert("merge".into(), entry["merge"].clone());
                        if let Some(resolved) = entry.get("resolved") {
                            result.insert("resolved".into(), resolved.clone());
                        }
                    }
                    let outcome = entry.get("resolved").unwrap_or(&entry["merge"]);
                    result.insert("branch".into(), outcome["branch"].clone());
                    result.insert("head".into(), outcome["head"].clone());
                    let conflict = &entry["merge"]["conflict"];
                    if entry.get("resolved").is_none() && !conflict.is_null() {
                        result.insert("conflict".into(), conflict.clone());
                    }
                    rounds.push(Value::Object(entry));
                    (next, seq)
                }
                Err(res) => return (res, tries),
            };
            latest = latest.max(seq);
            let Some(next) = next else {
                break;
            };
            if round == bound {
                let reason = format!(
                    "{}: {} branches left unmerged after {round} rounds",
                    at.pointer,
                    next.branches.len()
                );
                return (
                    Res::Failed {
                        reason,
                        seq: latest,
                    },
                    tries,
                );
            }
            input = json!({"branches": next.branches, "strategy": "sequence", "base": next.base});
            given = next.branches;
        }
        result.insert("rounds".into(), Value::Array(rounds));
        let res = match write(node.out, ctx, Value::Object(result)) {
            Ok(ctx) => Res::Done { ctx, seq: latest },
            Err(reason) => Res::Failed {
                reason,
                seq: latest,
            },
        };
        (res, tries)
    }

    /// Round `round` of the node at `at`: its merge step with `input`
    /// (over branches `given`, in order) and the resolver on its conflict.
    /// The branches it leaves for another round are those given after a
    /// resolved conflict's, onto the resolved head; a conflict left
    /// unresolved leaves none. `Err` when the node ends here without a
    /// result.
    fn merge_round(
        &mut self,
        node: &MergeNode<'_>,
        round: usize,
        input: Value,
        given: &[String],
        at: &Place,
        tries: &mut Vec<String>,
    ) -> Result<Round, Res> {
        let suffix = if round == 1 {
            String::new()
        } else {
            format!("-{round}")
        };
        let step = InnerStep {
            agent: node.agent,
            part: format!("merge{suffix}"),
            input,
            start_from: None,
            wants_changes: false,
        };
        let (record, mut latest) = match self.inner(node, step, at, tries) {
            Inner::Passed { value, seq, .. } => (value, seq),
            Inner::Other(res) => return Err(res),
        };
        if !record["branch"].is_string() {
            let reason = format!(
                "{}/merge{suffix}: agent `{}` answered no `branch`, so it is not a merge agent \
                 (`kind = \"merge\"`): {}",
                at.pointer,
                node.agent,
                cut(&record)
            );
            return Err(Res::Failed {
                reason,
                seq: latest,
            });
        }
        let conflict = record.get("conflict").cloned().unwrap_or(Value::Null);
        let mut entry = Map::new();
        entry.insert("merge".into(), record);
        let work = conflict["work_branch"].as_str().map(str::to_owned);
        let (Some(resolver), Some(work)) = (node.on_conflict, work) else {
            return Ok(Round {
                entry,
                next: None,
                seq: latest,
            });
        };
        let files: Vec<&str> = conflict["files"]
            .as_array()
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let conflicted = conflict["branch"].as_str();
        let prompt = format!(
            "Merging {} conflicted in {}. This worktree holds the merge with git's \
             conflict markers in those files: resolve them, keeping both sides' \
             intent, and commit.",
            conflicted.unwrap_or("a branch"),
            files.join(", ")
        );
        let step = InnerStep {
            agent: resolver,
            part: format!("resolve{suffix}"),
            input: Value::String(prompt),
            start_from: Some(work),
            wants_changes: true,
        };
        let resolved = match self.inner(node, step, at, tries) {
            Inner::Passed { changes, seq, .. } => {
                latest = latest.max(seq);
                changes
            }
            Inner::Other(res) => return Err(res),
        };
        let Some(base) = resolution(&resolved, &conflict) else {
            return Ok(Round {
                entry,
                next: None,
                seq: latest,
            });
        };
        entry.insert("resolved".into(), resolved);
        if given.is_empty() {
            return Ok(Round {
                entry,
                next: None,
                seq: latest,
            });
        }
        let Some(at_conflict) = given.iter().position(|b| Some(b.as_str()) == conflicted) else {
            let reason = format!(
                "{}/merge{suffix}: the conflict names {}, not one of the branches given: {}",
                at.pointer,
                conflicted.unwrap_or("no branch"),
                given.join(", ")
            );
            return Err(Res::Failed {
                reason,
                seq: latest,
            });
        };
        let rest = given[at_conflict + 1..].to_vec();
        if rest.is_empty() {
            return Ok(Round {
                entry,
                next: None,
                seq: latest,
            });
        }
        let next = Next {
            branches: rest,
            base,
        };
        Ok(Round {
            entry,
            next: Some(next),
            seq: latest,
        })
    }

    /// Runs (or replays) inner step `step.part` of the node at `at`, with
    /// the node's `retry` and `timeout_secs`.
    fn inner(
        &mut self,
        node: &MergeNode<'_>,
        step: InnerStep<'_>,
        at: &Place,
        tries: &mut Vec<String>,
    ) -> Inner {
        let input = Expr::Lit { value: step.input };
        let out = Expr::Path { at: "$.v".into() };
        let changes = Expr::Path { at: "$.c".into() };
        let start = step.start_from.map(|branch| Expr::Lit {
            value: Value::String(branch),
        });
        let name = Some(step.part.clone());
        let inner = StepNode {
            agent: step.agent,
            input: &input,
            out: &out,
            name: &name,
            retry: node.retry,
            queue_timeout_secs: None,
            timeout_secs: node.timeout_secs,
            changes: step.wants_changes.then_some(&changes),
            session: None,
            continue_from: None,
            start_from: start.as_ref(),
        };
        let (res, keys) = self.step(&inner, &at.child(&step.part), json!({}));
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

/// The head of a resolver's `changes` when they resolve `conflict`, the
/// merge's conflict whose work branch the resolver started from: they name
/// a `branch` and a `head`; their `base` is the conflict's `work_head` (the
/// commit the resolver was given) and their `head` is past it, so the
/// resolver committed; and every conflicting file is among their `files`,
/// since one its commits left as the work head had it still holds git's
/// conflict markers. Only a complete list (`files_truncated` not true)
/// tells which files the commits left alone, and the count a cut conflict
/// list ends with names no file. Null changes (a resolver without a
/// worktree) resolve nothing, and neither does a head that still holds
/// git's conflict markers in a file (the `markers` the daemon reads from
/// the head's commit, when it could).
pub(super) fn resolution(changes: &Value, conflict: &Value) -> Option<String> {
    changes["branch"].as_str()?;
    let head = changes["head"].as_str()?;
    let base = changes["base"].as_str()?;
    let given = conflict["work_head"].as_str().unwrap_or(base);
    if base != given || head == given {
        return None;
    }
    if changes["markers"]
        .as_array()
        .is_some_and(|marked| !marked.is_empty())
    {
        return None;
    }
    if let Some(changed) = changes["files"].as_array()
        && changes["files_truncated"] != true
    {
        let changed: Vec<&str> = changed.iter().filter_map(Value::as_str).collect();
        let conflicting = conflict["files"].as_array().into_iter().flatten();
        let left = conflicting
            .filter_map(Value::as_str)
            .filter(|file| !(file.starts_with("… and ") && file.ends_with(" more files")))
            .any(|file| !changed.contains(&file));
        if left {
            return None;
        }
    }
    Some(head.to_owned())
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
