//! The flow IR: one JSON document per flow. Nodes are tagged by `kind`,
//! expressions by `op`; unknown fields are refused so a typo never passes
//! silently. The node shapes of upstream Blueprint flows (mlua-swarm's
//! `step`, `seq`, `branch`, `fanout`, `loop`, `try` and `assign`, which
//! swarmd also spells `let`) parse here; where upstream's operators or
//! meanings differ, `import` converts a Blueprint. `wait` and `call`,
//! per-step `retry` and timeouts, and fan-out `concurrency` are swarmd's
//! additions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::expr::Expr;

/// The most seconds a step's `timeout_secs` or `queue_timeout_secs`, or a
/// merge node's `timeout_secs`, may give; the least is 1. They become the
/// step task's `attempt_timeout_secs` and `queue_timeout_secs`, which a
/// task policy bounds so (seven days, `swarmd_types::task::MAX_POLICY_SECS`).
pub const MAX_TIMEOUT_SECS: u32 = 7 * 86_400;

/// A declared flow: its name, its typed input and its graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// The name a run, a `call` node and the MCP tool use (`[a-z0-9_-]`, at
    /// most 64 characters).
    pub name: String,
    /// One line for people and for the MCP tool list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the run's input, available to the graph as `$.input`.
    /// A run whose input does not match is refused before it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The run's result, read when the graph ends; the whole context when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Expr>,
    /// Bounds checked before a run starts; the daemon's own limits cap them.
    #[serde(default)]
    pub limits: Limits,
    /// What all the run's steps together may spend; past it the run fails
    /// (a `try` around the body is the branch taken then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The graph.
    pub body: Node,
}

/// Bounds of one run, checked by `lint` before it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Steps (tasks) one run may start, loops and fan-outs included.
    pub max_steps: u32,
    /// Items one fan-out may run.
    pub max_fanout: u32,
    /// Nesting depth of the graph.
    pub max_depth: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 1_000,
            max_fanout: 100,
            max_depth: 32,
        }
    }
}

/// A spending cap over every step of a run or of a fan-out: the usage
/// their tasks reported (docs/tasks.md, Budgets), added up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// US dollars, more than 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Tokens, input plus output, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// One node of the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Node {
    /// Runs agent `ref` as an ordinary task with input `in`; its result is
    /// written to `out`.
    Step {
        /// The agent.
        #[serde(rename = "ref")]
        agent: String,
        /// The task's input, an expression object: a string value is its
        /// prompt, any other value its input.
        #[serde(rename = "in")]
        input: Expr,
        /// Where the result goes (a `$.name` path).
        out: Expr,
        /// A name for people and for the run view; unique in the flow.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Retries of this step on top of the task's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry: Option<Retry>,
        /// Seconds the step's task may wait in the queue (1 to 604800).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = MAX_TIMEOUT_SECS))]
        queue_timeout_secs: Option<u32>,
        /// Seconds the step's task may run (1 to 604800).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = MAX_TIMEOUT_SECS))]
        timeout_secs: Option<u32>,
        /// Where the git changes of a passed step go (a `$.name` path): for
        /// an agent that works in a worktree, `{branch, base, head, files,
        /// insertions, deletions, …}` of its task's last attempt; null for
        /// one that recorded none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changes: Option<Expr>,
        /// Where the agent session of a passed step goes (a `$.name`
        /// path): `{task, agent, session_id?, branch?, head?}`, the value a
        /// later step's `continue` takes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<Expr>,
        /// A session (as `session` wrote it) or a task id: the step's task
        /// continues that finished task of the same agent, in its CLI
        /// session and on its branch (docs/tasks.md, Continuations).
        #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
        continue_from: Option<Expr>,
        /// A local branch (a string) the step's worktree starts from
        /// instead of its agent's `base`: a merge conflict's `work_branch`
        /// for a resolver, say. Not with `continue`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_from: Option<Expr>,
    },
    /// Runs its children in order.
    Seq {
        /// The children.
        children: Vec<Node>,
    },
    /// Runs `then` when `cond` is true, else `else`.
    Branch {
        /// A boolean expression.
        cond: Expr,
        /// Taken when `cond` is true.
        #[serde(rename = "then")]
        then_branch: Box<Node>,
        /// Taken when `cond` is false.
        #[serde(rename = "else")]
        else_branch: Box<Node>,
    },
    /// Runs `body` once per item of `items`, each with the item at `bind`,
    /// and writes the joined results to `out`.
    Fanout {
        /// An expression giving an array.
        items: Expr,
        /// Where each branch finds its item (a `$.name` path).
        bind: Expr,
        /// The node each item runs.
        body: Box<Node>,
        /// How the branches' results are joined.
        join: JoinMode,
        /// Where the joined result goes.
        out: Expr,
        /// Branches running at once; all of them when absent (still bounded
        /// by `limits.max_fanout`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        concurrency: Option<u32>,
        /// What the fan-out's steps together may spend; past it the
        /// fan-out fails and its running steps are cancelled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<Budget>,
    },
    /// Runs `body` while `cond` holds, at most `max` times, counting in
    /// `counter`.
    Loop {
        /// Where the iteration count is written (a `$.name` path).
        counter: Expr,
        /// Tested before each iteration.
        cond: Expr,
        /// The node each iteration runs.
        body: Box<Node>,
        /// The most iterations; lint refuses a loop without it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u32>,
    },
    /// Runs `body`; when it fails, undoes its writes and runs `catch` with
    /// the error at `err_at`.
    Try {
        /// The node tried.
        body: Box<Node>,
        /// The node run on failure.
        catch: Box<Node>,
        /// Where the failure's message goes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        err_at: Option<Expr>,
    },
    /// Writes `value` to `at` (upstream's `assign`).
    #[serde(alias = "assign")]
    Let {
        /// Where the value goes (a `$.name` path).
        at: Expr,
        /// The value.
        value: Expr,
    },
    /// Waits for an answer from a person or a program: the run pauses
    /// until the wait is answered (with a token scoped to it) or times out.
    Wait {
        /// The wait's name, unique in the flow.
        name: String,
        /// What the person is asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<Expr>,
        /// JSON Schema the answer must match.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        /// Seconds before the wait fails; it waits for ever when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u32>,
        /// Where the answer goes.
        out: Expr,
    },
    /// Turns coding branches into one new branch through a `merge` agent:
    /// `pick_best` asks a judge step to name the winner first; `sequence`
    /// and `octopus` merge them all; a conflict runs the `on_conflict`
    /// agent as a resolver step in a worktree holding it.
    Merge {
        /// The merge agent (`kind = "merge"`).
        #[serde(rename = "ref")]
        agent: String,
        /// An array of branch names, or of objects with a `branch` (a
        /// coding step's `changes`); items with neither are candidates the
        /// judge sees but cannot win.
        branches: Expr,
        /// How the branches become one.
        strategy: MergeStrategy,
        /// The judge agent of `pick_best`: it gets `{candidates, branches}`
        /// and answers `{winner, reason}`, `winner` an index into
        /// `candidates` or a branch name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        judge: Option<String>,
        /// The resolver agent run on a conflict, from the conflict's work
        /// branch; the branches after the conflicting one are then merged
        /// onto its head in another round. Without it a conflict is in the
        /// result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_conflict: Option<String>,
        /// Retries of each inner step (judge, merge, resolve), as a
        /// `step`'s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry: Option<Retry>,
        /// Seconds each inner step's task may run (1 to 604800).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1, max = MAX_TIMEOUT_SECS))]
        timeout_secs: Option<u32>,
        /// Where the result goes: `{branch, head, strategy, merge,
        /// verdict?, resolved?, conflict?, rounds}`.
        out: Expr,
    },
    /// Runs the flow named `flow` as a sub-run with input `in`.
    Call {
        /// The sub-flow's name.
        flow: String,
        /// Its input.
        #[serde(rename = "in")]
        input: Expr,
        /// Where its result goes.
        out: Expr,
    },
}

/// A `merge` node's strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MergeStrategy {
    /// A judge names the best branch, which alone is merged (`pick`).
    PickBest,
    /// Each branch in order onto the base, stopping at the first conflict.
    Sequence,
    /// All in one merge commit; any conflict applies none.
    Octopus,
}

impl MergeStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeStrategy::PickBest => "pick_best",
            MergeStrategy::Sequence => "sequence",
            MergeStrategy::Octopus => "octopus",
        }
    }
}

/// How a fan-out joins its branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JoinMode {
    /// Every branch must pass; the result is the array of their contexts.
    /// The first failure cancels the others and fails the fan-out.
    All,
    /// The first branch to pass wins and the others are cancelled; the
    /// fan-out fails only when all fail.
    Any,
    /// The first branch to end decides, pass or fail; the others are
    /// cancelled.
    Race,
    /// Every branch runs to its end; the result records each one's
    /// `{status, value | reason}`; never fails.
    AllSettled,
}

/// A step's retries: attempts, backoff, and the reasons never retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    /// Seconds before the first retry; doubled for each one after.
    #[serde(default)]
    pub backoff_secs: u32,
    /// Failure reasons (as a task reports them) that end the step at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_retryable: Vec<String>,
}

impl Node {
    /// The node's children, in evaluation order.
    pub fn children(&self) -> Vec<(&'static str, &Node)> {
        match self {
            Node::Seq { children } => children.iter().map(|c| ("children", c)).collect(),
            Node::Branch {
                then_branch,
                else_branch,
                ..
            } => vec![("then", then_branch), ("else", else_branch)],
            Node::Fanout { body, .. } | Node::Loop { body, .. } => vec![("body", body)],
            Node::Try { body, catch, .. } => vec![("body", body), ("catch", catch)],
            Node::Step { .. }
            | Node::Let { .. }
            | Node::Wait { .. }
            | Node::Call { .. }
            | Node::Merge { .. } => Vec::new(),
        }
    }

    /// The kind as written in the IR.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Step { .. } => "step",
            Node::Seq { .. } => "seq",
            Node::Branch { .. } => "branch",
            Node::Fanout { .. } => "fanout",
            Node::Loop { .. } => "loop",
            Node::Try { .. } => "try",
            Node::Let { .. } => "let",
            Node::Wait { .. } => "wait",
            Node::Call { .. } => "call",
            Node::Merge { .. } => "merge",
        }
    }
}

impl Flow {
    /// Whether the flow or one of its fan-outs has a budget, so the runner
    /// records what each step spent.
    pub fn has_budget(&self) -> bool {
        fn any(node: &Node) -> bool {
            matches!(
                node,
                Node::Fanout {
                    budget: Some(_),
                    ..
                }
            ) || node.children().into_iter().any(|(_, c)| any(c))
        }
        self.budget.is_some() || any(&self.body)
    }

    /// Parses a flow from JSON; the error names the place.
    pub fn from_json(text: &str) -> Result<Flow, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The published JSON Schema of the IR: standard keywords only (the
    /// numeric `format`s schemars adds, such as `uint32`, are not JSON
    /// Schema's and are left out; `minimum` carries the bound), and
    /// upstream's `assign` accepted where `let` is.
    pub fn json_schema() -> Value {
        let mut schema = serde_json::to_value(schemars::schema_for!(Flow)).unwrap_or(Value::Null);
        normalise_schema(&mut schema);
        schema
    }
}

fn normalise_schema(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("const") == Some(&Value::from("let")) {
                map.remove("const");
                map.insert("enum".into(), serde_json::json!(["let", "assign"]));
            }
            let numeric = map.get("format").and_then(Value::as_str).is_some_and(|f| {
                ["int", "uint", "float", "double"]
                    .iter()
                    .any(|p| f.starts_with(p))
            });
            if numeric {
                map.remove("format");
            }
            map.values_mut().for_each(normalise_schema);
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_schema),
        _ => {}
    }
}

#[cfg(test)]
#[path = "ir_tests.rs"]
mod tests;
