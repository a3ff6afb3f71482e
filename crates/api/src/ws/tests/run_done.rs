//! The sessions' event router's `run_done`: only the write that ends a run
//! reaches the owning session, with the stored record's result or error,
//! and only that session.

use serde_json::{Value, json};
use swarmd_engine::event::Event;
use swarmd_engine::ids::SessionId;
use swarmd_engine::{RunId, RunRecord, RunStatus, WriteOp};

use super::support::Server;

fn record(
    id: RunId,
    session: SessionId,
    status: RunStatus,
    result: Option<Value>,
    error: Option<&str>,
) -> RunRecord {
    RunRecord {
        id,
        flow: "review".into(),
        flow_hash: "sha256:00".into(),
        status,
        session: Some(session),
        owner: Some(session.to_string()),
        idempotency_key: None,
        input: json!({}),
        created_ms: 1,
        updated_ms: 1,
        version: 1,
        state: json!({}),
        result,
        error: error.map(str::to_owned),
    }
}

/// Writes `run` with its `run_changed`, as the runner does.
async fn write(server: &Server, run: RunRecord, node: Option<&str>) {
    let event = Event::RunChanged {
        run_id: run.id,
        flow: run.flow.clone(),
        status: run.status,
        node: node.map(str::to_owned),
        node_status: node.map(|_| "running".to_owned()),
    };
    let session = run.session;
    server
        .engine()
        .write_run(vec![WriteOp::PutRun(Box::new(run))], vec![(session, event)])
        .await
        .unwrap();
}

#[tokio::test]
async fn the_owner_hears_run_done_once_a_run_ends_with_its_result_or_error() {
    let server = Server::start().await;
    let owner = server.login(json!({"roles": ["main-ai"]})).await;
    let other = server.login(json!({})).await;
    let mut client = server.connect(&owner).await;
    let mut bystander = server.connect(&other).await;

    let passed = RunId::new();
    let running = record(passed, owner.sid, RunStatus::Running, None, None);
    write(&server, running.clone(), None).await;
    write(&server, running, Some("/body/children/0")).await;
    let done = record(
        passed,
        owner.sid,
        RunStatus::Passed,
        Some(json!({"shipped": true})),
        None,
    );
    write(&server, done, None).await;
    // The first frame is the end: the running writes sent nothing.
    assert_eq!(
        client.recv().await,
        json!({"type": "run_done", "run_id": passed.to_string(), "flow": "review",
               "status": "passed", "result": {"shipped": true}})
    );

    let failed = RunId::new();
    let ended = record(
        failed,
        owner.sid,
        RunStatus::Cancelled,
        None,
        Some("the test stops it"),
    );
    write(&server, ended, None).await;
    assert_eq!(
        client.recv().await,
        json!({"type": "run_done", "run_id": failed.to_string(), "flow": "review",
               "status": "cancelled", "error": "the test stops it"})
    );

    // Another session's runs are not its business: its first frame is
    // about its own run.
    let own = RunId::new();
    write(
        &server,
        record(own, other.sid, RunStatus::Failed, None, Some("no")),
        None,
    )
    .await;
    let frame = bystander.recv().await;
    assert_eq!(frame["run_id"], own.to_string(), "{frame}");
    assert_eq!(frame["status"], "failed", "{frame}");
}
