//! The process spawner through the engine, with real shell children.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use swarmd_engine::gate::Verb;
use swarmd_engine::task::{PolicyOverrides, Task, TaskSpec, TaskStatus};
use swarmd_engine::{Engine, WorkerAuth};
use swarmd_engine::{ResultPost, body_digest};
use swarmd_output_store::OutputEvent;

use super::*;
use crate::process::{EnvVar, HostEnv, ProcessSpec};
use crate::testing::{engine_running, outputs, run_task};

fn spawner(dir: &Path, body: &str, stream: StreamMode) -> Arc<ProcessSpawner> {
    let script = dir.join("child.sh");
    std::fs::write(&script, body).unwrap();
    let mut spec = ProcessSpec::new("/bin/sh");
    spec.args = vec![script.display().to_string()];
    spec.env = vec![EnvVar::Pass("PATH".into())];
    spec.stream = stream;
    spec.max_output_bytes = 64 * 1024;
    spec.kill_grace = Duration::from_millis(200);
    let host = HostEnv::from_pairs([("PATH", "/usr/bin:/bin")]);
    let runner = ProcessRunner::new(spec, &host).unwrap();
    Arc::new(ProcessSpawner::new(runner, "http://127.0.0.1:7700"))
}

async fn run(body: &str, stream: StreamMode) -> (Engine, Task) {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_running("proc", spawner(dir.path(), body, stream));
    let task = run_task(&engine, "proc", PolicyOverrides::default()).await;
    (engine, task)
}

fn result(task: &Task) -> (Value, bool) {
    let r = task.result.clone().expect("a result");
    (r.value, r.ok)
}

#[tokio::test]
async fn plain_json_passes_and_exit_one_blocks() {
    let (_, task) = run(
        r#"read p; echo "{\"echo\": \"$p\", \"attempt\": $SWARM_ATTEMPT}""#,
        StreamMode::None,
    )
    .await;
    assert_eq!(task.status(), TaskStatus::Pass);
    assert_eq!(
        result(&task),
        (json!({"echo": "do it", "attempt": 1}), true)
    );

    let (_, task) = run("echo plain words; exit 1", StreamMode::None).await;
    assert_eq!(task.status(), TaskStatus::Blocked);
    assert_eq!(
        result(&task),
        (json!({"raw": "plain words", "stderr": ""}), false)
    );
}

#[tokio::test]
async fn ndjson_events_land_in_the_tail_in_order() {
    let body = r#"echo '{"type":"progress","stage":"one"}'
echo '{"type":"partial","chunk":{"kind":"inline","value":"p"}}'
echo 'garbage'
echo '{"type":"artifact","name":"a","content":{"kind":"inline","value":1}}'
echo '{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}'"#;
    let (engine, task) = run(body, StreamMode::Ndjson).await;
    assert_eq!(task.status(), TaskStatus::Pass);
    let kinds: Vec<String> = outputs(&engine, task.id, 1)
        .await
        .into_iter()
        .map(|r| match r.event {
            OutputEvent::Progress { stage, .. } => format!("progress:{stage}"),
            OutputEvent::Partial { .. } => "partial".into(),
            OutputEvent::Artifact { name, .. } => format!("artifact:{name}"),
            OutputEvent::Final { ok, .. } => format!("final:{ok}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "progress:one",
            "partial",
            "progress:invalid_output",
            "artifact:a",
            "final:true"
        ]
    );
}

#[tokio::test]
async fn a_nonzero_exit_demotes_an_ok_final() {
    let body =
        r#"echo '{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}'; exit 3"#;
    let (engine, task) = run(body, StreamMode::Ndjson).await;
    assert_eq!(task.status(), TaskStatus::Blocked);
    assert_eq!(result(&task), (json!("done"), false));
    let tail = outputs(&engine, task.id, 1).await;
    assert_eq!(
        tail.len(),
        3,
        "the child's final stays; a note and the demoted final follow"
    );
    assert!(
        matches!(&tail[1].event, OutputEvent::Progress { note: Some(n), .. } if n.contains("exit status 3"))
    );
}

#[tokio::test]
async fn ndjson_without_a_final_and_a_flood_both_fail() {
    let (_, task) = run(
        r#"echo '{"type":"progress","stage":"x"}'"#,
        StreamMode::Ndjson,
    )
    .await;
    assert_eq!(task.status(), TaskStatus::Failed);
    assert!(
        task.reason
            .as_deref()
            .unwrap()
            .contains("without a final event"),
        "{task:?}"
    );

    let (_, task) = run(
        "while true; do echo flooding-the-pipe; done",
        StreamMode::None,
    )
    .await;
    assert_eq!(task.status(), TaskStatus::Failed);
    assert!(
        task.reason.as_deref().unwrap().contains("max_output_bytes"),
        "{task:?}"
    );
}

#[tokio::test]
async fn a_final_the_child_posted_itself_decides_in_plain_mode() {
    let dir = tempfile::tempdir().unwrap();
    let handle_file = dir.path().join("handle");
    let go = dir.path().join("go");
    let body = format!(
        "echo \"$SWARM_WORKER_HANDLE\" > {h}.tmp && mv {h}.tmp {h}\nwhile [ ! -e {go} ]; do sleep 0.01; done\necho 'stdout loses'",
        h = handle_file.display(),
        go = go.display()
    );
    let engine = engine_running("proc", spawner(dir.path(), &body, StreamMode::None));
    let spec = TaskSpec {
        agent: "proc".into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    let handle = loop {
        if let Ok(text) = std::fs::read_to_string(&handle_file) {
            break text.trim().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let auth: WorkerAuth = engine
        .authenticate_worker(&handle, Verb::PostResult)
        .unwrap();
    let post = ResultPost {
        task_id: None,
        attempt: None,
        value: json!("posted over http"),
        ok: true,
        idempotency_key: None,
        body_digest: body_digest(b"x"),
    };
    engine.post_result(&auth, post).await.unwrap();
    std::fs::write(&go, "").unwrap();
    let done = engine
        .wait_task(task.id, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Pass);
    assert_eq!(result(&done), (json!("posted over http"), true));
    let finals = outputs(&engine, task.id, 1)
        .await
        .iter()
        .filter(|r| r.event.is_final())
        .count();
    assert_eq!(finals, 1);
}

#[tokio::test]
async fn cancelling_the_task_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let body = format!(
        "sleep 1000 &\necho $! > {p}.tmp && mv {p}.tmp {p}\nwait",
        p = pid_file.display()
    );
    let engine = engine_running("proc", spawner(dir.path(), &body, StreamMode::None));
    let spec = TaskSpec {
        agent: "proc".into(),
        prompt: "p".into(),
        ..TaskSpec::default()
    };
    let task = engine.create_task(spec).await.unwrap();
    let pid: i32 = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file) {
            break text.trim().parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    engine
        .cancel_task(task.id, Some("stop".into()))
        .await
        .unwrap();
    let mut dead = false;
    for _ in 0..250 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        if stat.map_or(true, |s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim().starts_with('Z'))
        }) {
            dead = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(dead, "grandchild {pid} survived the cancel");
    let done = engine
        .wait_task(task.id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(done.status(), TaskStatus::Cancelled);
}
