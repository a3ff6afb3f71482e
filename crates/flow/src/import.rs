//! Importing an upstream Blueprint (mlua-swarm's package of a flow-ir
//! `flow` and its agents) as a swarmd flow. The flow's seven node kinds
//! and its expressions are rewritten into swarmd IR that means the same
//! (docs/flows.md, Upstream Blueprints, lists each rule); what has no
//! swarmd meaning is reported, every problem at once, with the RFC 6901
//! pointer of its place in the Blueprint. Blueprint fields swarmd keeps
//! elsewhere (agents, operators, runners, audits…) are not imported and
//! are listed as `not_imported`.

mod expr;

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::expr::Expr;
use crate::ir::{Flow, JoinMode, Limits, Node};
use crate::lint::{Problem, unbound_variables};

/// The name given to a flow imported from a bare node (no Blueprint `id`).
pub const BARE_FLOW_NAME: &str = "imported";

/// An imported Blueprint.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The flow, in swarmd IR.
    pub flow: Flow,
    /// The agents its steps name; swarmd must know them to run it.
    pub agents: BTreeSet<String>,
    /// Blueprint fields that were present and not imported (code
    /// `not_imported`); the flow runs without them.
    pub dropped: Vec<Problem>,
}

/// Converts an upstream Blueprint (a whole document, or only its `flow`
/// node) into a swarmd flow, or names everything that could not be
/// converted.
pub fn from_blueprint(value: &Value) -> Result<Flow, Vec<Problem>> {
    import_blueprint(value).map(|imported| imported.flow)
}

/// As [`from_blueprint`], with the agents the flow needs and the fields
/// that were dropped.
pub fn import_blueprint(value: &Value) -> Result<Imported, Vec<Problem>> {
    let mut conv = Conv::default();
    let imported = conv.document(value);
    match imported {
        Some(imported) if conv.problems.is_empty() => Ok(imported),
        _ => Err(conv.problems),
    }
}

/// Fields of a Blueprint; `id`, `flow`, `schema_version`,
/// `default_init_ctx` and `metadata.description` are imported.
const BLUEPRINT_FIELDS: &[&str] = &[
    "schema_version",
    "id",
    "flow",
    "agents",
    "operators",
    "metas",
    "hints",
    "strategy",
    "metadata",
    "spawner_hints",
    "default_agent_kind",
    "default_operator_kind",
    "default_init_ctx",
    "default_agent_ctx",
    "default_context_policy",
    "projection_placement",
    "audits",
    "degradation_policy",
    "runners",
    "default_runner",
    "subprocesses",
    "check_policy",
    "blueprint_ref_includes",
];

#[derive(Default)]
struct Conv {
    problems: Vec<Problem>,
    dropped: Vec<Problem>,
    agents: BTreeSet<String>,
}

impl Conv {
    fn problem(&mut self, pointer: &str, code: &'static str, message: String, hint: &str) {
        self.problems.push(Problem {
            pointer: pointer.to_owned(),
            code,
            message,
            hint: hint.to_owned(),
        });
    }

    fn drop_field(&mut self, pointer: String, why: &str) {
        self.dropped.push(Problem {
            pointer,
            code: "not_imported",
            message: why.to_owned(),
            hint: "swarmd keeps this outside the flow; set it up there if it matters".into(),
        });
    }

    fn document(&mut self, value: &Value) -> Option<Imported> {
        let (name, description, defaults, body) = if value.get("kind").is_some() {
            let body = self.node(value, "");
            (BARE_FLOW_NAME.to_owned(), None, None, body)
        } else {
            let map = self.fields(value, "", BLUEPRINT_FIELDS)?;
            let name = self.name(map);
            let description = self.metadata(map.get("metadata"));
            for key in map.keys() {
                if !matches!(
                    key.as_str(),
                    "schema_version" | "id" | "flow" | "metadata" | "default_init_ctx"
                ) {
                    self.drop_field(format!("/{key}"), "a Blueprint field outside the flow");
                }
            }
            let defaults = match map.get("default_init_ctx") {
                None | Some(Value::Null) => None,
                Some(Value::Object(defaults)) => Some(defaults.clone()),
                Some(_) => {
                    self.problem(
                        "/default_init_ctx",
                        "not_an_object",
                        "swarmd imports an object `default_init_ctx` only".into(),
                        "give the defaults as an object of variables",
                    );
                    None
                }
            };
            let body = match self.field(map, "", "flow") {
                Some(flow) => self.node(flow, "/flow"),
                None => None,
            };
            (name?, description, defaults, body)
        };
        let mut flow = Flow {
            name,
            description,
            input_schema: None,
            output: None,
            limits: Limits::default(),
            budget: None,
            body: body?,
        };
        seed(&mut flow, defaults.as_ref());
        Some(Imported {
            flow,
            agents: std::mem::take(&mut self.agents),
            dropped: std::mem::take(&mut self.dropped),
        })
    }

    fn name(&mut self, map: &Map<String, Value>) -> Option<String> {
        let id = self.field(map, "", "id")?;
        let valid = id.as_str().filter(|id| {
            !id.is_empty()
                && id.len() <= 64
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        });
        if valid.is_none() {
            self.problem(
                "/id",
                "bad_name",
                format!("the Blueprint's id {id} is not a swarmd flow name"),
                "use 1 to 64 of a-z, 0-9, `_` and `-`",
            );
        }
        valid.map(str::to_owned)
    }

    fn metadata(&mut self, metadata: Option<&Value>) -> Option<String> {
        let map = metadata?.as_object()?;
        for key in map.keys().filter(|k| *k != "description") {
            self.drop_field(
                format!("/metadata/{}", expr::escape(key)),
                "Blueprint metadata other than the description",
            );
        }
        map.get("description")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    fn child(&mut self, map: &Map<String, Value>, at: &str, key: &str) -> Option<Box<Node>> {
        let value = self.field(map, at, key)?;
        self.node(value, &format!("{at}/{key}")).map(Box::new)
    }

    fn read(&mut self, map: &Map<String, Value>, at: &str, key: &str) -> Option<Expr> {
        let value = self.field(map, at, key)?;
        self.expr(value, &format!("{at}/{key}"))
    }

    fn write(&mut self, map: &Map<String, Value>, at: &str, key: &str) -> Option<Expr> {
        let value = self.field(map, at, key)?;
        self.target(value, &format!("{at}/{key}"))
    }

    /// An upstream node in swarmd's terms. Every field is converted before
    /// giving up, so every problem is reported.
    fn node(&mut self, value: &Value, at: &str) -> Option<Node> {
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        match kind {
            "step" => {
                let map = self.fields(value, at, &["kind", "ref", "in", "out"])?;
                let agent = match self.field(map, at, "ref")?.as_str() {
                    Some(agent) => agent.to_owned(),
                    None => {
                        self.problem(
                            &format!("{at}/ref"),
                            "bad_ref",
                            "`ref` is a string".into(),
                            "",
                        );
                        return None;
                    }
                };
                self.agents.insert(agent.clone());
                let input = self.read(map, at, "in");
                let out = self.write(map, at, "out");
                Some(Node::Step {
                    agent,
                    input: input?,
                    out: out?,
                    name: None,
                    retry: None,
                    queue_timeout_secs: None,
                    timeout_secs: None,
                    changes: None,
                    session: None,
                    continue_from: None,
                    start_from: None,
                })
            }
            "seq" => {
                let map = self.fields(value, at, &["kind", "children"])?;
                let Some(list) = self.field(map, at, "children")?.as_array() else {
                    self.problem(
                        &format!("{at}/children"),
                        "not_an_array",
                        "`children` is an array".into(),
                        "",
                    );
                    return None;
                };
                let children: Vec<Option<Node>> = list
                    .iter()
                    .enumerate()
                    .map(|(i, c)| self.node(c, &format!("{at}/children/{i}")))
                    .collect();
                Some(Node::Seq {
                    children: children.into_iter().collect::<Option<_>>()?,
                })
            }
            "branch" => {
                let map = self.fields(value, at, &["kind", "cond", "then", "else"])?;
                // Upstream, as swarmd, wants a boolean here: no truthiness.
                let cond = self.read(map, at, "cond");
                let then_branch = self.child(map, at, "then");
                let else_branch = self.child(map, at, "else");
                Some(Node::Branch {
                    cond: cond?,
                    then_branch: then_branch?,
                    else_branch: else_branch?,
                })
            }
            "fanout" => self.fanout(value, at),
            "loop" => self.looped(value, at),
            "try" => {
                let map = self.fields(value, at, &["kind", "body", "catch", "err_at"])?;
                let body = self.child(map, at, "body");
                let catch = self.child(map, at, "catch");
                let err_at = match map.get("err_at") {
                    None | Some(Value::Null) => Some(None),
                    Some(v) => self.target(v, &format!("{at}/err_at")).map(Some),
                };
                Some(Node::Try {
                    body: body?,
                    catch: catch?,
                    err_at: err_at?,
                })
            }
            // flow-ir 0.2 writes `assign` with a `path` expression; 0.3
            // renamed it `let`, with a bare path string.
            "assign" | "let" => {
                let map = self.fields(value, at, &["kind", "at", "value"])?;
                let target = self.write(map, at, "at");
                let value = self.read(map, at, "value");
                Some(Node::Let {
                    at: target?,
                    value: value?,
                })
            }
            _ => {
                self.problem(
                    &format!("{at}/kind"),
                    "unknown_kind",
                    format!("`{kind}` is not an upstream node kind"),
                    "upstream's kinds are step, seq, branch, fanout, loop, try and assign",
                );
                None
            }
        }
    }

    /// A fan-out: upstream starts every branch at once, so its
    /// concurrency is its width (a literal list's length, else
    /// `limits.max_fanout`).
    fn fanout(&mut self, value: &Value, at: &str) -> Option<Node> {
        let map = self.fields(value, at, &["kind", "items", "bind", "body", "join", "out"])?;
        let items = self.read(map, at, "items");
        let bind = self.write(map, at, "bind");
        let body = self.child(map, at, "body");
        let join = match self.field(map, at, "join") {
            Some(join) => match serde_json::from_value::<JoinMode>(join.clone()) {
                Ok(join) => Some(join),
                Err(_) => {
                    self.problem(
                        &format!("{at}/join"),
                        "bad_join",
                        format!("{join} is not a join mode"),
                        "all, any, race or all_settled",
                    );
                    None
                }
            },
            None => None,
        };
        let out = self.write(map, at, "out");
        let items = items?;
        let width = match &items {
            Expr::Lit {
                value: Value::Array(list),
            } => u32::try_from(list.len()).unwrap_or(u32::MAX).max(1),
            _ => Limits::default().max_fanout,
        };
        Some(Node::Fanout {
            items,
            bind: bind?,
            body: body?,
            join: join?,
            out: out?,
            concurrency: Some(width),
            budget: None,
        })
    }

    /// A loop: upstream tests `counter < max` before `cond` (so `cond` is
    /// not evaluated once the count is reached) and `cond`'s truthiness.
    fn looped(&mut self, value: &Value, at: &str) -> Option<Node> {
        let map = self.fields(value, at, &["kind", "counter", "cond", "body", "max"])?;
        let counter = self.write(map, at, "counter");
        let cond = self.read(map, at, "cond");
        let body = self.child(map, at, "body");
        let max = match self.field(map, at, "max") {
            Some(max) => match max.as_u64().and_then(|m| u32::try_from(m).ok()) {
                Some(max) => Some(max),
                None => {
                    self.problem(
                        &format!("{at}/max"),
                        "bad_max",
                        format!("{max} is not a count"),
                        "give a whole number",
                    );
                    None
                }
            },
            None => None,
        };
        let (counter, max) = (counter?, max?);
        if max == 0 {
            // The body never runs; the counter is written 0.
            return Some(Node::Let {
                at: counter,
                value: Expr::Lit { value: json!(0) },
            });
        }
        let Expr::Path { at: counter_at } = &counter else {
            return None;
        };
        let cond = Expr::And {
            args: vec![
                Expr::Lt {
                    lhs: Box::new(Expr::Path {
                        at: counter_at.clone(),
                    }),
                    rhs: Box::new(Expr::Lit { value: json!(max) }),
                },
                expr::truthy(cond?),
            ],
        };
        Some(Node::Loop {
            counter,
            cond,
            body: body?,
            max: Some(max),
        })
    }
}

/// Upstream's context starts as the run's initial context (the Blueprint's
/// `default_init_ctx` under the launch's `init_ctx`); swarmd's holds the
/// run's input at `$.input`. So the imported flow takes the initial
/// context as its input and first copies from it each variable it reads
/// before writing: from the input, else from the default; a variable no
/// node writes and without a default must be in the input (the input
/// schema requires it); one that some node writes is null when neither
/// gives it.
fn seed(flow: &mut Flow, defaults: Option<&Map<String, Value>>) {
    let unbound = unbound_variables(flow);
    if unbound.is_empty() {
        return;
    }
    let mut written = BTreeSet::new();
    writes(&flow.body, &mut written);
    let mut required = Vec::new();
    let mut prologue = Vec::new();
    for variable in unbound {
        let target = Expr::Path {
            at: format!("$.{variable}"),
        };
        // The input's key is upstream's name of the variable.
        let key = if variable == expr::RENAMED_INPUT {
            "input".to_owned()
        } else {
            variable.clone()
        };
        let from = expr::read_query(&["input".to_owned(), key.clone()]);
        let copy = Node::Let {
            at: target.clone(),
            value: Expr::Path { at: from.clone() },
        };
        let fallback = match defaults.and_then(|d| d.get(&key)) {
            Some(default) => default.clone(),
            None if written.contains(&variable) => Value::Null,
            None => {
                required.push(key);
                prologue.push(copy);
                continue;
            }
        };
        prologue.push(Node::Branch {
            cond: Expr::Exists { at: from },
            then_branch: Box::new(copy),
            else_branch: Box::new(Node::Let {
                at: target,
                value: Expr::Lit { value: fallback },
            }),
        });
    }
    flow.input_schema = Some(if required.is_empty() {
        json!({"type": "object"})
    } else {
        json!({"type": "object", "required": required})
    });
    let body = std::mem::replace(
        &mut flow.body,
        Node::Seq {
            children: Vec::new(),
        },
    );
    flow.body = match body {
        Node::Seq { children } => {
            prologue.extend(children);
            Node::Seq { children: prologue }
        }
        other => {
            prologue.push(other);
            Node::Seq { children: prologue }
        }
    };
}

/// The variables some node of `node` writes.
fn writes(node: &Node, out: &mut BTreeSet<String>) {
    let mut add = |target: &Expr| {
        if let Expr::Path { at } = target
            && let Some(name) = at.strip_prefix("$.")
        {
            out.insert(name.split('.').next().unwrap_or(name).to_owned());
        }
    };
    match node {
        Node::Step { out: target, .. }
        | Node::Merge { out: target, .. }
        | Node::Wait { out: target, .. }
        | Node::Call { out: target, .. } => add(target),
        Node::Let { at, .. } => add(at),
        Node::Fanout { out: target, .. } => add(target),
        Node::Loop { counter, .. } => add(counter),
        Node::Try { err_at, .. } => {
            if let Some(target) = err_at {
                add(target);
            }
        }
        Node::Seq { .. } | Node::Branch { .. } => {}
    }
    for (_, child) in node.children() {
        writes(child, out);
    }
}

#[cfg(test)]
#[path = "import_tests.rs"]
mod tests;
