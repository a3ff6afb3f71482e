//! Flows run by the daemon (docs/flows.md): runs started, read, waited
//! for, cancelled and answered over HTTP on the real binary, with steps
//! run as ordinary tasks by Lua and process agents, and runs that outlive
//! a kill -9.

mod best_of_five;
mod example;
mod http;
mod import;
mod input_schema;
mod lua_flows;
mod merge;
mod merge_rounds;
mod merge_unresolved;
mod pinned;
mod restart;
mod run_done;
mod runtime_fixes;
mod sessions;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::daemon::Swarmd;

/// `echo` upper-cases its prompt (Lua); `hold` runs until `@DIR@/release`
/// exists, then prints its prompt; `fail` always fails. A task gets a
/// second attempt, so a step whose worker died with the daemon goes on.
pub(crate) const AGENTS: &str = r#"
[defaults]
max_attempts = 2

[agents.echo]
kind = "lua"
script = "@DIR@/echo.lua"

[agents.hold]
kind = "process"
program = "/bin/sh"
args = ["-c", "i=0; while [ ! -e \"$DIR/release\" ] && [ \"$i\" -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; cat"]
env = { DIR = "@DIR@", PATH = "/usr/bin:/bin" }

[agents.fail]
kind = "lua"
script = "@DIR@/fail.lua"

[flows_dir]
path = "@DIR@/flows"
"#;

/// A daemon with `AGENTS` and `flows` (name, IR) in its flows directory.
pub(crate) fn daemon(flows: &[(&str, Value)]) -> Swarmd {
    let sw = Swarmd::new(AGENTS);
    write_files(sw.dir(), flows);
    sw
}

pub(crate) fn write_files(dir: &Path, flows: &[(&str, Value)]) {
    std::fs::write(dir.join("echo.lua"), "return string.upper(prompt)\n").unwrap();
    std::fs::write(dir.join("fail.lua"), "error(\"no luck: \" .. prompt)\n").unwrap();
    let flows_dir = dir.join("flows");
    std::fs::create_dir_all(&flows_dir).unwrap();
    for (name, flow) in flows {
        std::fs::write(flows_dir.join(format!("{name}.json")), flow.to_string()).unwrap();
    }
}

pub(crate) fn step(agent: &str, text: &str, out: &str) -> Value {
    json!({"kind": "step", "ref": agent, "in": {"op": "template", "text": text},
           "out": {"op": "path", "at": out}})
}

/// Starts a run as the admin; (status, body).
pub(crate) async fn start(sw: &Swarmd, body: Value) -> (u16, Value) {
    let response = sw
        .post("/v1/runs", &sw.admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// The run, waiting up to `wait` seconds for it to end.
pub(crate) async fn run(sw: &Swarmd, id: &str, wait: u64) -> Value {
    let response = sw
        .get(&format!("/v1/runs/{id}?wait={wait}"), &sw.admin)
        .timeout(Duration::from_secs(wait + 10))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "GET run {id}");
    response.json().await.unwrap()
}

/// Polls the run until `check` holds (20 s at most).
pub(crate) async fn run_until(
    sw: &Swarmd,
    id: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..200 {
        let view = run(sw, id, 0).await;
        if check(&view) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {id}: {what} did not happen: {}", run(sw, id, 0).await);
}

/// The node of `view` with key `key`.
pub(crate) fn node<'a>(view: &'a Value, key: &str) -> &'a Value {
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["key"] == key)
        .unwrap_or_else(|| panic!("no node {key} in {view}"))
}
