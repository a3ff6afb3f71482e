//! Flows written in Lua: a `.lua` script in the flows directory is run once
//! at start and offered like a JSON flow; a broken one stops the start with
//! its file named.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use super::{daemon, run, start};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// Two echo steps in sequence, then a fan-out of echoes over a literal list.
const PLAN_DO: &str = r#"
local steps = seq{
  step("echo", "plan {{ input.topic }}", "$.plan"),
  step("echo", "do {{ plan }}", "$.done"),
  fanout{items = {"x", "y"}, bind = "$.tag", out = "$.tags",
         body = step("echo", "{{ tag }}", "$.said")},
}
return {
  name = "plan-do-lua",
  description = "Plan, do and tag, written in Lua.",
  input_schema = {type = "object", required = {"topic"}},
  output = path("$.done"),
  body = steps,
}
"#;

#[tokio::test]
async fn a_lua_flow_is_offered_and_runs_like_a_json_one() {
    let sw = daemon(&[]);
    std::fs::write(sw.dir().join("flows").join("plan-do.lua"), PLAN_DO).unwrap();
    let sw = sw.start().await;

    let flows: Value = sw
        .get("/v1/flows", &sw.admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = &flows["flows"][0];
    assert_eq!(listed["name"], "plan-do-lua", "{flows}");
    assert!(
        listed.to_string().contains("plan-do.lua"),
        "the source names the script: {flows}"
    );

    let (status, body) = start(
        &sw,
        json!({"flow": "plan-do-lua", "input": {"topic": "tea"}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let view = run(&sw, &id, 30).await;
    assert_eq!(view["status"], "passed", "{view}");
    assert_eq!(view["result"], "DO PLAN TEA", "{view}");

    // The input schema written as a Lua table is enforced.
    let (status, body) = start(&sw, json!({"flow": "plan-do-lua", "input": {}})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_input")),
        "{body}"
    );
}

#[tokio::test]
async fn a_broken_lua_flow_stops_the_start_naming_its_file() {
    let cases = [
        ("escape.lua", "os.execute('true')\nreturn {}", "a nil value"),
        ("spin.lua", "while true do end", "instruction budget"),
        (
            "shape.lua",
            "return {name = 'x', body = {kind = 'seq'}}",
            "not a flow",
        ),
    ];
    for (file, source, why) in cases {
        let sw = daemon(&[]);
        let flows = sw.dir().join("flows");
        std::fs::write(flows.join(file), source).unwrap();
        let output = Command::new(BINARY)
            .args(["serve", "--bind", "127.0.0.1:0", "--config"])
            .arg(sw.dir().join("swarmd.toml"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(60), output)
            .await
            .unwrap_or_else(|_| panic!("{file}: the daemon started anyway"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{file}: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains(&format!("{}", flows.join(file).display())))
            .unwrap_or_else(|| panic!("{file} is not named:\n{stderr}"));
        assert!(line.contains(why), "{file}: {line}");
        assert!(
            !stderr.contains("listening on"),
            "{file}: the daemon listened:\n{stderr}"
        );
    }
}
