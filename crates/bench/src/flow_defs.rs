//! The flows of the `flows` workload, as IR (docs/flows.md), over the
//! generated config's `lua` agent (a script that returns its prompt):
//! `bench-seq3`, three steps in sequence each given the previous one's
//! result; `bench-fan5`, five items fanned out at once (`join: all`) and one
//! step after the join given their results; `bench-hold`, a wait named `go`
//! then one step given the answer (the recovery runs). A spawned daemon
//! reads them from its `[flows_dir]`; a daemon given with `--url` gets the
//! IR with each run instead.

use serde_json::{Value, json};

/// The flows directory inside a spawned daemon's directory.
pub(crate) const FLOWS_DIR: &str = "flows";

/// The agent every step runs.
pub(crate) const AGENT: &str = "lua";

/// Items of the fan-out.
pub(crate) const FAN_WIDTH: usize = 5;

/// Steps of the sequence.
pub(crate) const SEQ_LEN: usize = 3;

/// The wait of `bench-hold`.
pub(crate) const HOLD_WAIT: &str = "go";

/// The two measured shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `SEQ_LEN` steps in sequence.
    Seq3,
    /// `FAN_WIDTH` steps at once, then one.
    Fan5,
}

impl Shape {
    /// The label in reports (`seq3`, `fan5`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Shape::Seq3 => "seq3",
            Shape::Fan5 => "fan5",
        }
    }

    /// The flow's name in the catalog.
    pub(crate) fn flow_name(self) -> &'static str {
        match self {
            Shape::Seq3 => "bench-seq3",
            Shape::Fan5 => "bench-fan5",
        }
    }

    /// The flow's IR.
    pub(crate) fn flow(self) -> Value {
        match self {
            Shape::Seq3 => seq3(),
            Shape::Fan5 => fan5(),
        }
    }

    /// Engine tasks one run starts.
    pub(crate) fn steps(self) -> usize {
        match self {
            Shape::Seq3 => SEQ_LEN,
            Shape::Fan5 => FAN_WIDTH + 1,
        }
    }
}

/// The name of the recovery flow.
pub(crate) const HOLD_NAME: &str = "bench-hold";

fn step(name: &str, input: Value, out: &str) -> Value {
    json!({"kind": "step", "ref": AGENT, "name": name, "in": input,
           "out": {"op": "path", "at": out}})
}

fn path(at: &str) -> Value {
    json!({"op": "path", "at": at})
}

fn template(text: &str) -> Value {
    json!({"op": "template", "text": text})
}

/// `a` gets the input's `text`, `b` what `a` returned, `c` what `b` did.
fn seq3() -> Value {
    json!({
        "name": Shape::Seq3.flow_name(),
        "description": "swarmd-bench: three Lua steps in sequence, each given the last one's result",
        "output": path("$.c"),
        "body": {"kind": "seq", "children": [
            step("a", path("$.input.text"), "$.a"),
            step("b", path("$.a"), "$.b"),
            step("c", path("$.b"), "$.c"),
        ]}
    })
}

/// Five `part`s at once, then `after` given every part's result.
fn fan5() -> Value {
    let items: Vec<usize> = (0..FAN_WIDTH).collect();
    json!({
        "name": Shape::Fan5.flow_name(),
        "description": "swarmd-bench: five Lua steps at once, joined, then one more",
        "output": path("$.after"),
        "body": {"kind": "seq", "children": [
            {"kind": "fanout", "items": {"op": "lit", "value": items},
             "bind": path("$.n"), "concurrency": FAN_WIDTH, "join": "all",
             "out": path("$.parts"),
             "body": step("part", template("{{ input.text }} {{ n }}"), "$.part")},
            step("after", template("{% for p in parts %}{{ p.part }};{% endfor %}"), "$.after"),
        ]}
    })
}

/// A wait named `go`, then one step given the answer.
pub(crate) fn hold() -> Value {
    json!({
        "name": HOLD_NAME,
        "description": "swarmd-bench: waits for an answer, then one Lua step (recovery runs)",
        "output": path("$.done"),
        "body": {"kind": "seq", "children": [
            {"kind": "wait", "name": HOLD_WAIT, "out": path("$.go")},
            step("done", template("{{ go }}"), "$.done"),
        ]}
    })
}

/// Every flow as `(file name, JSON text)`, for a flows directory.
pub(crate) fn files() -> Vec<(String, String)> {
    [Shape::Seq3.flow(), Shape::Fan5.flow(), hold()]
        .into_iter()
        .map(|flow| {
            let name = flow["name"].as_str().unwrap_or("flow").to_owned();
            (format!("{name}.json"), flow.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_has_its_own_file_and_runs_the_lua_agent() {
        let files = files();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["bench-seq3.json", "bench-fan5.json", "bench-hold.json"]
        );
        for (_, text) in &files {
            let flow: Value = serde_json::from_str(text).unwrap();
            assert!(text.contains("\"ref\":\"lua\""), "{text}");
            assert_eq!(flow["body"]["kind"], "seq", "{text}");
        }
    }

    #[test]
    fn the_shapes_match_the_plain_tasks_they_are_compared_with() {
        let seq = Shape::Seq3.flow();
        assert_eq!(
            seq["body"]["children"].as_array().map(Vec::len),
            Some(Shape::Seq3.steps())
        );
        let fan = Shape::Fan5.flow();
        let fanout = &fan["body"]["children"][0];
        assert_eq!(fanout["items"]["value"].as_array().map(Vec::len), Some(5));
        assert_eq!(fanout["concurrency"], 5);
        assert_eq!(fanout["join"], "all");
        assert_eq!(Shape::Fan5.steps(), 6);
        assert_eq!(hold()["body"]["children"][0]["name"], HOLD_WAIT);
    }
}
