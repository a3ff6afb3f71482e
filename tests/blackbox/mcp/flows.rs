//! MCP tools at work through the Python client: the listing with schemas
//! on both revisions, fan-out and collect, progress during a wait, the wait
//! modes and timeout, and a drain during a wait.

use std::time::Duration;

use serde_json::json;

use super::{EXTRA, LEGACY, MODERN, Via, call, run, tool_error};
use crate::daemon::Swarmd;
use crate::harness::{Daemon, PATIENCE, parts};

#[tokio::test]
async fn tools_are_listed_with_input_and_output_schemas_on_both_revisions() {
    let daemon = Daemon::start_with(EXTRA).await;
    for (via, mode, version) in [
        (Via::Http, MODERN, MODERN),
        (Via::Http, LEGACY, "2025-11-25"),
        (Via::Stdio, MODERN, MODERN),
        (Via::Stdio, LEGACY, "2025-11-25"),
    ] {
        let seen = run(&daemon, via, mode, "tools", &daemon.admin, &[]).await;
        assert_eq!(seen["protocol_version"], version, "{via:?}");
        let tools = seen["tools"].as_object().unwrap();
        let mut names: Vec<_> = tools.keys().cloned().collect();
        names.sort();
        assert_eq!(
            names,
            [
                "agents",
                "answer_wait",
                "apply",
                "branches",
                "cancel",
                "cancel_run",
                "diff",
                "flows",
                "frames",
                "lint_flow",
                "mse_ack",
                "mse_operator_join",
                "mse_operator_leave",
                "mse_pending_wait",
                "mse_worker_fetch",
                "mse_worker_submit",
                "output",
                "reply",
                "run",
                "spawn",
                "spawn_many",
                "start_run",
                "task",
                "tasks",
                "wait",
                "worker_progress",
                "worker_prompt",
                "worker_submit"
            ],
            "{via:?} {mode}"
        );
        for (name, tool) in tools {
            assert_eq!(tool["input"]["type"], "object", "{name}");
            assert_eq!(tool["output"]["type"], "object", "{name}");
            assert!(tool["description"].as_str().unwrap().len() > 40, "{name}");
        }
        // `agent` may be left out with `continue_from` (docs/tasks.md, Continuations).
        assert_eq!(tools["spawn"]["input"]["required"], json!(["prompt"]));
        assert_eq!(tools["wait"]["input"]["required"], json!(["task_ids"]));
    }
}

/// spawn_many of five `cat` tasks, wait(all), and the read tools on them.
async fn fan_out_and_collect(via: Via, mode: &str) {
    let daemon = Daemon::start_with(EXTRA).await;
    let seen = run(&daemon, via, mode, "fanout", &daemon.admin, &[]).await;
    let spawned = &seen["spawned"]["structured"];
    assert_eq!(spawned["created"], 5, "{seen}");
    let ids = seen["ids"].as_array().unwrap();

    let waited = &seen["waited"];
    assert_eq!(waited["is_error"], false, "{waited}");
    let waited = &waited["structured"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(true), &json!(5))
    );
    let tasks = waited["tasks"].as_array().unwrap();
    for (n, (task, id)) in tasks.iter().zip(ids).enumerate() {
        assert_eq!(&task["task_id"], id);
        assert_eq!(task["status"], "pass", "{task}");
        assert_eq!(task["ok"], true, "{task}");
        assert_eq!(task["value"], json!({ "n": n }), "{task}");
    }

    let task = &seen["task"]["structured"];
    assert_eq!((&task["id"], &task["status"]), (&ids[0], &json!("pass")));
    assert_eq!(task["attempts"].as_array().unwrap().len(), 1, "{task}");
    let output = &seen["output"]["structured"];
    assert_eq!(output["task_id"], ids[0]);
    assert!(
        !output["records"].as_array().unwrap().is_empty(),
        "{output}"
    );
    let listed = seen["tasks"]["structured"]["tasks"].as_array().unwrap();
    assert_eq!(listed.len(), 5, "{listed:?}");
    assert!(
        listed
            .iter()
            .all(|t| t["agent"] == "cat" && t["status"] == "pass")
    );

    let agents = seen["agents"]["structured"]["agents"].as_array().unwrap();
    let slow = agents.iter().find(|a| a["name"] == "slow").expect("slow");
    assert_eq!(slow["kind"], "process");
    assert_eq!(slow["description"], "Answers its prompt after 1.5 s");
    assert_eq!(
        slow["input_schema"]["type"],
        serde_json::json!(["object", "null"])
    );
    assert!(agents.iter().any(|a| a["name"] == "cat"));
}

#[tokio::test]
async fn fan_out_and_collect_over_http() {
    fan_out_and_collect(Via::Http, LEGACY).await;
}

#[tokio::test]
async fn fan_out_and_collect_over_stdio() {
    fan_out_and_collect(Via::Stdio, MODERN).await;
}

/// A 1.5 s wait with a 200 ms progress interval: several notifications,
/// growing, saying how many tasks are done, then the result.
async fn wait_reports_progress(via: Via, mode: &str) {
    let daemon = Daemon::start_with(EXTRA).await;
    let seen = run(&daemon, via, mode, "progress", &daemon.admin, &[]).await;
    let waited = &seen["waited"]["structured"];
    assert_eq!(waited["done"], true, "{seen}");
    assert_eq!(waited["tasks"][0]["value"], json!({ "slow": 1 }), "{seen}");
    let progress = seen["progress"].as_array().unwrap();
    assert!(progress.len() >= 3, "{progress:?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    for p in progress {
        assert_eq!(p["total"], 1.0, "{p}");
        assert!(
            p["message"].as_str().unwrap().starts_with("0/1 done"),
            "{p}"
        );
    }
}

#[tokio::test]
async fn wait_reports_progress_over_http() {
    wait_reports_progress(Via::Http, MODERN).await;
}

#[tokio::test]
async fn wait_reports_progress_over_stdio() {
    wait_reports_progress(Via::Stdio, LEGACY).await;
}

#[tokio::test]
async fn wait_modes_and_its_timeout_return_what_they_have() {
    let daemon = Daemon::start_with(EXTRA).await;
    let admin = daemon.admin.as_str();
    let spawn = |agent: &'static str| {
        let daemon = &daemon;
        async move {
            let body = json!({"agent": agent, "prompt": "{\"k\": 1}"});
            daemon.spawn(body).await
        }
    };
    let quick = spawn("cat").await;
    let sleepy = spawn("sleepy").await;

    let agents = call(&daemon, Via::Http, admin, "agents", json!({})).await;
    let agents = agents["structured"]["agents"].as_array().unwrap().clone();
    let counts = agents.iter().find(|a| a["name"] == "sleepy").unwrap();
    assert_eq!(
        (&counts["running"], &counts["queued"]),
        (&json!(1), &json!(0)),
        "{counts}"
    );

    let started = tokio::time::Instant::now();
    let args = json!({"task_ids": [&sleepy, &quick], "mode": "any", "timeout_secs": 20});
    let any = call(&daemon, Via::Http, admin, "wait", args).await["structured"].clone();
    assert_eq!(
        (&any["done"], &any["finished"]),
        (&json!(true), &json!(1)),
        "{any}"
    );
    assert_eq!(any["tasks"][0]["status"], "running", "{any}");
    assert_eq!(any["tasks"][1]["value"], json!({"k": 1}), "{any}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "any waited for both"
    );

    let args = json!({"task_ids": [&quick, &sleepy], "timeout_secs": 1});
    // The relay acts as the admin itself (`--no-login`): a session it
    // logged in would not see the admin's tasks.
    let args = args.to_string();
    let env = [
        ("MCP_TOOL", "wait"),
        ("MCP_ARGS", args.as_str()),
        ("SWARMD_MCP_ARGS", r#"["--no-login"]"#),
    ];
    let all = run(&daemon, Via::Stdio, MODERN, "call", admin, &env).await["structured"].clone();
    assert_eq!(
        (&all["done"], &all["finished"]),
        (&json!(false), &json!(1)),
        "{all}"
    );
    assert_eq!(all["tasks"][1]["status"], "running", "{all}");

    let args = json!({"task_ids": [&quick, &sleepy], "mode": "first", "n": 1, "timeout_secs": 5});
    let first = call(&daemon, Via::Http, admin, "wait", args).await["structured"].clone();
    assert_eq!(first["done"], true, "{first}");

    let args = json!({"agent": "cat", "prompt": "x", "policy": {"max_attempts": 0}});
    let refused = call(&daemon, Via::Http, admin, "spawn", args).await;
    let error = tool_error(&refused);
    assert_eq!(error["code"], "bad_request");
    assert!(
        error["error"].as_str().unwrap().contains("max_attempts"),
        "{error}"
    );
}

#[tokio::test]
async fn a_draining_daemon_ends_a_wait_with_what_it_has() {
    let mut daemon = Swarmd::new(EXTRA).start().await;
    let (status, body) = parts(
        daemon
            .post("/v1/tasks", &daemon.admin)
            .json(&json!({"agent": "sleepy", "prompt": "z"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap().to_owned();
    let args = json!({"task_ids": [&id], "timeout_secs": 300});
    let waiting = call(&daemon, Via::Http, &daemon.admin, "wait", args);
    let stop = async {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !daemon.log().contains("wait started") {
            assert!(tokio::time::Instant::now() < deadline, "{}", daemon.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        daemon.sigterm();
    };
    let (waited, ()) = tokio::join!(waiting, stop);
    let waited = &waited["structured"];
    assert_eq!(
        (&waited["done"], &waited["finished"]),
        (&json!(false), &json!(0)),
        "{waited}"
    );
    assert_eq!(waited["tasks"][0]["status"], "running", "{waited}");
    assert!(daemon.exited().await.success());
}

#[tokio::test]
async fn a_draining_daemon_answers_mcp_with_draining_not_an_internal_error() {
    let daemon = Swarmd::new(EXTRA).start().await;
    // A running task keeps the drain open past rmcp's close.
    let (status, body) = parts(
        daemon
            .post("/v1/tasks", &daemon.admin)
            .json(&json!({"agent": "sleepy", "prompt": "z"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    daemon.sigterm();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    // Once the drain's grace for streams is over, every request is 503.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let (status, body) = loop {
        let answer = daemon
            .http
            .post(daemon.url("/mcp"))
            .header("Accept", "application/json, text/event-stream")
            .bearer_auth(&daemon.admin)
            .json(&initialize)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        assert_ne!(status, 500, "{}", answer.text().await.unwrap());
        if status != 200 {
            break parts(answer).await;
        }
        assert!(tokio::time::Instant::now() < deadline, "still 200");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((status, &body["code"]), (503, &json!("draining")), "{body}");
}

#[tokio::test]
async fn a_wait_over_large_values_stays_within_what_the_python_sdk_reads() {
    let daemon = Daemon::start_with(EXTRA).await;
    // 100 values of 8 KiB: 800 KiB, sent twice in one message, would pass
    // the Python SDK's 1 MiB limit on a message.
    let mut ids = Vec::new();
    for i in 0..100 {
        let prompt = format!("{i:03}{}", "x".repeat(8 * 1024 - 3));
        ids.push(
            daemon
                .spawn(json!({"agent": "cat", "prompt": prompt}))
                .await,
        );
    }
    let args = json!({"task_ids": ids, "timeout_secs": 120});
    let waited = call(&daemon, Via::Http, &daemon.admin, "wait", args).await;
    let waited = &waited["structured"];
    assert_eq!(waited["done"], true, "{}", waited["finished"]);
    let tasks = waited["tasks"].as_array().unwrap();
    // `cat`'s value is its stdout as `{"raw": …}`, a little over 8 KiB.
    let carried = tasks
        .iter()
        .filter(|t| t["value"]["raw"].is_string())
        .count();
    let left_out: Vec<_> = tasks.iter().filter(|t| t["value"].is_null()).collect();
    // 256 KiB of values in the order asked; the rest named by their size.
    assert_eq!(carried, 31, "{}", tasks[0]);
    assert_eq!(
        tasks[0]["value"]["raw"].as_str().map(str::len),
        Some(8 * 1024)
    );
    assert_eq!(left_out.len(), 100 - 31);
    let size = serde_json::to_vec(&tasks[0]["value"]).unwrap().len();
    assert!(
        left_out.iter().all(|t| t["value_bytes"] == size),
        "{:?}",
        left_out.first()
    );
}
