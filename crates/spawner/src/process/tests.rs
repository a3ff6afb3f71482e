//! Real-process tests of the runner: shell scripts in temporary directories.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use swarmd_output_store::OutputEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;

fn host() -> HostEnv {
    HostEnv::from_pairs([
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("NOTIFY_SOCKET", "/run/systemd/notify"),
        ("LISTEN_FDS", "3"),
        ("WATCHDOG_USEC", "1000000"),
        ("CREDENTIALS_DIRECTORY", "/run/credentials/swarmd"),
        ("SWARMD_AUTH__KEYS_FILE", "/var/lib/swarmd/keys.json"),
        ("HOME", "/root"),
    ])
}

fn vars() -> RunVars {
    RunVars {
        base_url: "http://127.0.0.1:7700".into(),
        task_id: "T-0123".into(),
        attempt: 2,
        agent: "echo".into(),
        worker_handle: "wh-abc".into(),
        prompt: "the prompt".into(),
        continued_from: None,
        resume_session: None,
    }
}

/// A spec running `body` with `/bin/sh` from a script file in `dir`.
fn sh(dir: &Path, body: &str) -> ProcessSpec {
    let path = dir.join(format!("s{}.sh", body.len()));
    std::fs::write(&path, body).unwrap();
    let mut spec = ProcessSpec::new("/bin/sh");
    spec.args = vec![path.display().to_string()];
    spec.env = vec![EnvVar::Pass("PATH".into())];
    spec.kill_grace = Duration::from_millis(300);
    spec
}

/// Runs to the end, collecting events.
async fn run(spec: ProcessSpec) -> (Result<Exited, ProcessError>, Vec<OutputEvent>) {
    let runner = ProcessRunner::new(spec, &host()).unwrap();
    let child = runner.start(&vars(), CancellationToken::new()).unwrap();
    let (tx, mut rx) = mpsc::channel(1024);
    let result = child.wait(tx).await;
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    (result, events)
}

/// Whether `pid` is dead: gone from /proc or a zombie waiting for init.
async fn dead(pid: i32) -> bool {
    for _ in 0..250 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat
                    .rsplit(')')
                    .next()
                    .and_then(|s| s.trim().chars().next());
                if state == Some('Z') {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn progress_stage(event: &OutputEvent) -> Option<&str> {
    match event {
        OutputEvent::Progress { stage, .. } => Some(stage),
        _ => None,
    }
}

#[tokio::test]
async fn json_stdout_is_the_value_and_exit_zero_is_ok() {
    let dir = tempfile::tempdir().unwrap();
    let (exited, events) = run(sh(dir.path(), r#"cat >/dev/null; echo '{"answer": 42}'"#)).await;
    let exited = exited.unwrap();
    assert_eq!(exited.plain_final(), (json!({"answer": 42}), true));
    assert!(events.is_empty());
}

#[tokio::test]
async fn raw_text_gets_trimmed_stdout_and_stderr_tail_with_the_prompt_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let spec = sh(
        dir.path(),
        "read line\necho \"got: $line\"\necho careful >&2\n",
    );
    let exited = run(spec).await.0.unwrap();
    assert_eq!(
        exited.plain_final(),
        (
            json!({"raw": "got: the prompt", "stderr": "careful\n"}),
            true
        )
    );
}

#[tokio::test]
async fn exit_one_makes_ok_false_and_keeps_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let exited = run(sh(dir.path(), "echo '\"no way\"'; exit 1"))
        .await
        .0
        .unwrap();
    assert_eq!(exited.plain_final(), (json!("no way"), false));
    assert_eq!(exited.describe(), "exit status 1");
}

#[tokio::test]
async fn ndjson_events_arrive_in_order_and_garbage_becomes_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        r#"echo '{"type":"progress","stage":"start","note":"1/3"}'
echo '{"type":"partial","chunk":{"kind":"inline","value":"par"}}'
echo 'not json at all'
echo ''
echo '{"type":"artifact","name":"report","content":{"kind":"inline","value":{"lines":3}}}'
printf '{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}'"#,
    );
    spec.stream = StreamMode::Ndjson;
    let (exited, events) = run(spec).await;
    let exited = exited.unwrap();
    assert!(exited.stdout.is_empty());
    assert_eq!((exited.finals, exited.last_final_ok), (1, Some(true)));
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(progress_stage(&events[0]), Some("start"));
    assert!(matches!(events[1], OutputEvent::Partial { .. }));
    assert_eq!(progress_stage(&events[2]), Some("invalid_output"));
    assert!(matches!(&events[3], OutputEvent::Artifact { name, .. } if name == "report"));
    assert_eq!(events[4], OutputEvent::inline_final(json!("done"), true));
}

#[tokio::test]
async fn ndjson_without_a_final_reports_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(dir.path(), r#"echo '{"type":"progress","stage":"x"}'"#);
    spec.stream = StreamMode::Ndjson;
    let exited = run(spec).await.0.unwrap();
    assert_eq!((exited.finals, exited.last_final_ok), (0, None));
    assert!(exited.success());
}

#[tokio::test]
async fn output_over_the_cap_kills_the_child_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        "echo $$ >&2\nwhile true; do echo xxxxxxxxxxxxxxxxxxxxxxxx; done",
    );
    spec.max_output_bytes = 10_000;
    let (result, _) = run(spec).await;
    assert!(matches!(
        result,
        Err(ProcessError::OutputTooLarge { limit: 10_000 })
    ));
}

#[tokio::test]
async fn a_child_ignoring_sigterm_dies_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        "trap '' TERM\necho \"{\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"$$\\\"}\"\nwhile true; do sleep 1; done",
    );
    spec.stream = StreamMode::Ndjson;
    let runner = ProcessRunner::new(spec, &host()).unwrap();
    let cancel = CancellationToken::new();
    let child = runner.start(&vars(), cancel.clone()).unwrap();
    let pid = child.pgid();
    let (tx, mut rx) = mpsc::channel(16);
    let waiting = tokio::spawn(child.wait(tx));
    let ready = rx.recv().await.unwrap();
    assert_eq!(progress_stage(&ready), Some(pid.to_string().as_str()));
    let started = std::time::Instant::now();
    cancel.cancel();
    let result = waiting.await.unwrap();
    assert!(matches!(result, Err(ProcessError::Cancelled)), "{result:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "SIGKILL only after the grace"
    );
    assert!(dead(pid).await);
}

#[tokio::test]
async fn cancel_kills_the_grandchild_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        "sleep 1000 &\necho \"{\\\"type\\\":\\\"progress\\\",\\\"stage\\\":\\\"$!\\\"}\"\nwait",
    );
    spec.stream = StreamMode::Ndjson;
    let runner = ProcessRunner::new(spec, &host()).unwrap();
    let cancel = CancellationToken::new();
    let child = runner.start(&vars(), cancel.clone()).unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let waiting = tokio::spawn(child.wait(tx));
    let ready = rx.recv().await.unwrap();
    let grandchild: i32 = progress_stage(&ready).unwrap().parse().unwrap();
    assert!(Path::new(&format!("/proc/{grandchild}")).exists());
    cancel.cancel();
    assert!(matches!(
        waiting.await.unwrap(),
        Err(ProcessError::Cancelled)
    ));
    assert!(dead(grandchild).await, "grandchild {grandchild} survived");
}

#[tokio::test]
async fn a_grandchild_left_behind_by_a_normal_exit_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exited = run(sh(dir.path(), "sleep 1000 &\necho $!"))
        .await
        .0
        .unwrap();
    let grandchild: i32 = String::from_utf8(exited.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(dead(grandchild).await, "orphan {grandchild} survived");
}

#[tokio::test]
async fn timeout_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(dir.path(), "sleep 1000");
    spec.timeout = Some(Duration::from_millis(200));
    let result = run(spec).await.0;
    let err = result.unwrap_err();
    assert!(matches!(err, ProcessError::TimedOut(_)));
    assert!(err.to_string().contains("0.2s"), "{err}");
}

#[tokio::test]
async fn dropping_a_run_kills_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let runner = ProcessRunner::new(sh(dir.path(), "sleep 1000"), &host()).unwrap();
    let child = runner.start(&vars(), CancellationToken::new()).unwrap();
    let pid = child.pgid();
    drop(child);
    assert!(dead(pid).await);
}

#[tokio::test]
async fn the_child_sees_only_allowed_variables() {
    let mut spec = ProcessSpec::new("env");
    spec.env = vec![
        EnvVar::Pass("PATH".into()),
        EnvVar::Pass("NOT_IN_HOST".into()),
        EnvVar::Set("MODE".into(), "fast".into()),
    ];
    spec.stdin = StdinMode::None;
    let exited = run(spec).await.0.unwrap();
    let text = String::from_utf8(exited.stdout).unwrap();
    let mut names: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "MODE",
            "PATH",
            "SWARM_AGENT",
            "SWARM_ATTEMPT",
            "SWARM_BASE_URL",
            "SWARM_TASK_ID",
            "SWARM_WORKER_HANDLE"
        ],
        "{text}"
    );
    for line in [
        "SWARM_ATTEMPT=2",
        "SWARM_WORKER_HANDLE=wh-abc",
        "SWARM_BASE_URL=http://127.0.0.1:7700",
        "MODE=fast",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in {text}");
    }
}

#[test]
fn misconfiguration_is_reported_at_construction() {
    let missing = ProcessRunner::new(ProcessSpec::new("/no/such/program"), &host());
    assert!(matches!(missing, Err(ProcessError::ProgramNotFound { .. })));
    let bare = ProcessRunner::new(ProcessSpec::new("no-such-program-xyz"), &host()).unwrap_err();
    assert!(bare.to_string().contains("not found in PATH"), "{bare}");
    let mut forged = ProcessSpec::new("/bin/sh");
    forged.env = vec![EnvVar::Pass("NOTIFY_SOCKET".into())];
    assert!(matches!(
        ProcessRunner::new(forged, &host()),
        Err(ProcessError::ForbiddenEnv(name)) if name == "NOTIFY_SOCKET"
    ));
    let mut bad_cwd = ProcessSpec::new("/bin/sh");
    bad_cwd.cwd = Some(PathBuf::from("/no/such/dir"));
    assert!(matches!(
        ProcessRunner::new(bad_cwd, &host()),
        Err(ProcessError::BadCwd { .. })
    ));
    let found = ProcessRunner::new(ProcessSpec::new("sh"), &host()).unwrap();
    assert!(found.program().is_absolute());
}

#[tokio::test]
async fn a_slow_store_after_a_clean_exit_still_gets_every_event() {
    // The child writes its lines and exits at once; the receiver takes
    // one event every 60 ms, so forwarding them outlasts the 2 s a held
    // pipe is given.
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        r#"i=0; while [ $i -lt 60 ]; do echo '{"type":"progress","stage":"s"}'; i=$((i+1)); done
printf '{"type":"final","content":{"kind":"inline","value":"done"},"ok":true}'"#,
    );
    spec.stream = StreamMode::Ndjson;
    let runner = ProcessRunner::new(spec, &host()).unwrap();
    let child = runner.start(&vars(), CancellationToken::new()).unwrap();
    let (tx, mut rx) = mpsc::channel(1);
    let slow = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = rx.recv().await {
            events.push(event);
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        events
    });
    let exited = child.wait(tx).await.unwrap();
    assert_eq!((exited.finals, exited.last_final_ok), (1, Some(true)));
    let events = slow.await.unwrap();
    assert_eq!(events.len(), 61);
    assert_eq!(events[60], OutputEvent::inline_final(json!("done"), true));
}
