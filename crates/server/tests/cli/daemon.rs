//! Black-box tests of the `swarmd` client commands against a daemon this
//! test starts: what `task get`, `task list` (and its note on an agent the
//! daemon lacks), `flow answer`, `flow lint` of a document that is not
//! flow IR, `flow run --wait` stopping at a person's wait, a cancelled
//! run's step, and a refused credential print (the relay's and a worker
//! pool's too).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::{swarmd, text};

/// How long the daemon may take to say where it listens.
const PATIENCE: Duration = Duration::from_secs(60);

/// A flow that only waits for an approval, answerable with its token.
const ASK: &str = r#"{"name": "ask", "body": {"kind": "wait", "name": "approve",
    "timeout_secs": 600, "prompt": {"op": "lit", "value": "Ship it?"},
    "out": {"op": "path", "at": "$.ok"}}}"#;

/// A flow that waits for a person with a question of several lines.
const REVIEW: &str = r#"{"name": "review", "body": {"kind": "wait", "name": "approve",
    "timeout_secs": 600,
    "prompt": {"op": "lit", "value": "Review the diff:\n  +12 -3 src/a.rs\nShip it?"},
    "out": {"op": "path", "at": "$.ok"}}}"#;

/// A flow whose one step sleeps for 30 s.
const SLOW: &str = r#"{"name": "slow", "body": {"kind": "step", "ref": "sleepy",
    "in": {"op": "lit", "value": "zz"}, "out": {"op": "path", "at": "$.r"}}}"#;

/// `swarmd serve` on a free loopback port with its state in memory, the
/// agents `cat` and `sleepy` (30 s) and the flows `ask`, `review` and
/// `slow`; killed when dropped.
struct Daemon {
    child: Child,
    url: String,
    admin: String,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let flows = dir.path().join("flows");
        std::fs::create_dir(&flows).unwrap();
        std::fs::write(flows.join("ask.json"), ASK).unwrap();
        std::fs::write(flows.join("review.json"), REVIEW).unwrap();
        std::fs::write(flows.join("slow.json"), SLOW).unwrap();
        let state = dir.path().join("state");
        let config = dir.path().join("swarmd.toml");
        let text = format!(
            r#"
[server]
bind = "127.0.0.1:0"
shutdown_grace_secs = 1

[store]
backend = "memory"
state_dir = "{state}"

[agents.cat]
kind = "process"
program = "/bin/cat"

[agents.sleepy]
kind = "process"
program = "/bin/sh"
args = ["-c", "/bin/sleep 30; /bin/cat"]

[flows_dir]
path = "{flows}"
"#,
            state = state.display(),
            flows = flows.display(),
        );
        std::fs::write(&config, text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        // Reads the log to its end, so that the daemon never blocks on a
        // full pipe; the first `listening on` line names the address.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        let Ok(addr) = rx.recv_timeout(PATIENCE) else {
            let _ = child.kill();
            panic!("swarmd did not say where it listens");
        };
        let admin = std::fs::read_to_string(state.join("admin.token"))
            .unwrap()
            .trim()
            .to_owned();
        Daemon {
            child,
            url: format!("http://{addr}"),
            admin,
            dir,
        }
    }

    /// `swarmd args… --url <the daemon>` with `env` as the environment
    /// (besides PATH).
    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(args)
            .args(["--url", &self.url])
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// `swarmd args…` as the admin.
    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[("SWARMD_TOKEN", &self.admin)])
    }

    /// `swarmd args…` as the admin, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        text(&output.stdout)
    }

    /// `swarmd args… -o json` as the admin, parsed.
    fn json(&self, args: &[&str]) -> Value {
        let all: Vec<&str> = args.iter().copied().chain(["-o", "json"]).collect();
        serde_json::from_str(&self.ok(&all)).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last 8 hex digits of `id`, as a table prints them.
fn tail(id: &str) -> &str {
    &id[id.len() - 8..]
}

/// The value of `key` in a key/value block.
fn field<'a>(block: &'a str, key: &str) -> Option<&'a str> {
    block.lines().find_map(|line| {
        line.strip_prefix(key)
            .filter(|rest| rest.starts_with("  "))
            .map(str::trim)
    })
}

#[test]
fn task_get_marks_a_prompt_cut_after_its_first_line() {
    let daemon = Daemon::start();
    let spawned = |prompt: &str| {
        let task = daemon.json(&["task", "spawn", "--agent", "cat", "--prompt", prompt]);
        task["task_id"].as_str().unwrap().to_owned()
    };
    let several = spawned("fix the parser\nthen the lexer");
    let one = spawned("fix the parser\n");
    let shown = daemon.ok(&["task", "get", &several]);
    assert_eq!(field(&shown, "prompt"), Some("fix the parser …"), "{shown}");
    let shown = daemon.ok(&["task", "get", &format!("…{}", tail(&one))]);
    assert_eq!(field(&shown, "prompt"), Some("fix the parser"), "{shown}");
}

#[test]
fn task_list_after_takes_the_tail_a_table_prints() {
    let daemon = Daemon::start();
    for prompt in ["older", "newer"] {
        daemon.ok(&["task", "spawn", "--agent", "cat", "--prompt", prompt]);
    }
    let ids = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| task["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = ids(&daemon.json(&["task", "list"]));
    assert_eq!(all.len(), 2, "{all:?}");
    let newest = &all[0];
    for after in [tail(newest).to_owned(), format!("…{}", tail(newest))] {
        let page = daemon.json(&["task", "list", "--after", &after]);
        assert_eq!(ids(&page), all[1..], "--after {after}");
    }
    let refused = daemon.run(&["task", "list", "--after", "T-nope"]);
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
}

#[test]
fn an_empty_table_for_an_agent_the_daemon_lacks_says_so() {
    let daemon = Daemon::start();
    daemon.ok(&["task", "spawn", "--agent", "cat", "--prompt", "p"]);
    let typo = daemon.run(&["task", "list", "--agent", "caat"]);
    assert_eq!(typo.status.code(), Some(0), "{typo:?}");
    let stderr = text(&typo.stderr);
    assert!(stderr.contains("no agent `caat`"), "{stderr}");
    // A known agent with no tasks in the page says nothing.
    let known = daemon.run(&["task", "list", "--agent", "cat", "--status", "failed"]);
    assert!(text(&known.stderr).is_empty(), "{known:?}");
}

#[test]
fn a_wait_token_answers_by_the_whole_run_id_and_prints_only_the_answer() {
    let daemon = Daemon::start();
    let run = daemon.ok(&["flow", "run", "ask"]).trim().to_owned();
    assert!(run.starts_with("R-"), "{run}");
    let view = daemon.json(&["flow", "show", &run]);
    let token = view["waits"][0]["token"].as_str().unwrap().to_owned();
    let with_token = ["--token", token.as_str()];

    let short = [
        &["flow", "answer", tail(&run), "approve", "true"][..],
        &with_token,
    ]
    .concat();
    let refused = daemon.run_with(&short, &[]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains("give the run's whole id") && stderr.contains("wait's own token"),
        "{stderr}"
    );
    assert!(!stderr.contains(&token), "{stderr}");

    let whole = [
        &["flow", "answer", &run, "approve", "true"][..],
        &with_token,
    ]
    .concat();
    let answered = daemon.run_with(&whole, &[]);
    assert_eq!(answered.status.code(), Some(0), "{answered:?}");
    let shown = text(&answered.stdout);
    assert_eq!(field(&shown, "id"), Some(run.as_str()), "{shown}");
    assert_eq!(field(&shown, "wait"), Some("approve"), "{shown}");
    assert!(field(&shown, "status").is_some(), "{shown}");
    assert_eq!(field(&shown, "flow"), None, "{shown}");
    assert_eq!(shown.lines().count(), 3, "{shown}");
}

#[test]
fn a_refused_credential_names_where_it_was_read_from_and_not_itself() {
    let daemon = Daemon::start();
    let secret = "sws-not-the-daemons";
    let file = daemon.dir.path().join("token");
    std::fs::write(&file, secret).unwrap();
    let file = file.to_str().unwrap();
    let other_state = daemon.dir.path().join("other");
    let minted = swarmd(&["admin-token", "--state-dir", other_state.to_str().unwrap()]);
    assert_eq!(minted.status.code(), Some(0), "{minted:?}");
    let other_admin = text(&minted.stdout).trim().to_owned();
    let admin_file = other_state.join("admin.token");
    // `task list` with `flags` and `env` is refused; the error names
    // `source` and never shows the credential `sent`.
    let refused_naming = |flags: &[&str], env: &[(&str, &str)], source: &str, sent: &str| {
        let args = [&["task", "list"][..], flags].concat();
        let refused = daemon.run_with(&args, env);
        let stderr = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("HTTP 401"), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("(credential from {source}")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains(sent), "{args:?}: {stderr}");
    };
    refused_naming(&["--token", secret], &[], "--token", secret);
    let source = format!("the file {file} of --token-file");
    refused_naming(&["--token-file", file], &[], &source, secret);
    refused_naming(&[], &[("SWARMD_TOKEN", secret)], "SWARMD_TOKEN", secret);
    let source = format!("the file {file} of SWARMD_TOKEN_FILE");
    refused_naming(&[], &[("SWARMD_TOKEN_FILE", file)], &source, secret);
    let source = format!("the admin token file {}", admin_file.display());
    let flags = ["--state-dir", other_state.to_str().unwrap()];
    refused_naming(&flags, &[], &source, &other_admin);
}

#[test]
fn the_relay_and_a_pool_name_where_a_refused_credential_was_read_from() {
    let daemon = Daemon::start();
    let secret = "swc1.not.the.pools";
    let file = daemon.dir.path().join("pool.token");
    std::fs::write(&file, secret).unwrap();
    let file = file.to_str().unwrap();
    // `args` is refused at once; the error names `source`, never `secret`.
    let refused_naming = |args: &[&str], env: &[(&str, &str)], source: &str| {
        let refused = Command::new(env!("CARGO_BIN_EXE_swarmd"))
            .args(args)
            .current_dir(daemon.dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", daemon.dir.path())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("(credential from {source})")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains(secret), "{args:?}: {stderr}");
    };
    let url = daemon.url.as_str();
    refused_naming(&["mcp", "--url", url, "--token", secret], &[], "--token");
    refused_naming(
        &["mcp", "--url", url],
        &[("SWARMD_TOKEN", secret)],
        "SWARMD_TOKEN",
    );
    let pool = ["worker", "pool", "--server", url, "--agent", "cat"];
    refused_naming(
        &[&pool[..], &["--", "true"]].concat(),
        &[("SWARMD_TOKEN", secret)],
        "SWARMD_TOKEN",
    );
    let source = format!("the file {file} of --token-file");
    refused_naming(
        &[&pool[..], &["--token-file", file, "--", "true"]].concat(),
        &[],
        &source,
    );
}

#[test]
fn lint_says_when_a_file_is_larger_than_the_flows_directory_reads() {
    let daemon = Daemon::start();
    let big = serde_json::json!({"name": "big", "body": {"kind": "let",
        "at": {"op": "path", "at": "$.x"},
        "value": {"op": "lit", "value": "x".repeat(1_100_000)}}});
    let path = daemon.dir.path().join("big.json");
    std::fs::write(&path, big.to_string()).unwrap();
    let linted = daemon.run(&["flow", "lint", path.to_str().unwrap()]);
    assert_eq!(linted.status.code(), Some(0), "{linted:?}");
    let stderr = text(&linted.stderr);
    assert!(stderr.contains("runs only sent inline"), "{stderr}");
}

#[test]
fn lint_prints_a_document_that_is_not_flow_ir_as_a_finding_and_exits_1() {
    let daemon = Daemon::start();
    let shape = serde_json::json!({"name": "m", "body": {"kind": "merge", "ref": "cat",
        "strategy": "best", "branches": {"op": "lit", "value": []},
        "out": {"op": "path", "at": "$.m"}}});
    let path = daemon.dir.path().join("shape.json");
    std::fs::write(&path, shape.to_string()).unwrap();
    let linted = daemon.run(&["flow", "lint", path.to_str().unwrap()]);
    assert_eq!(linted.status.code(), Some(1), "{linted:?}");
    let printed = text(&linted.stdout);
    assert!(
        printed.starts_with("/body/strategy  invalid_flow  "),
        "{printed}"
    );
    assert!(printed.contains("best"), "{printed}");
    assert!(
        !text(&linted.stderr).contains("answered HTTP"),
        "{linted:?}"
    );
    let json = daemon.run(&["flow", "lint", path.to_str().unwrap(), "-o", "json"]);
    assert_eq!(json.status.code(), Some(1), "{json:?}");
    let answer: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(answer["problems"][0]["code"], "invalid_flow", "{answer}");
}

#[test]
fn run_wait_stops_at_a_persons_wait_and_prints_the_question_whole() {
    let daemon = Daemon::start();
    let started = std::time::Instant::now();
    let waited = daemon.run(&["flow", "run", "review", "--wait", "60"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(waited.status.code(), Some(3), "{waited:?}");
    let shown = text(&waited.stdout);
    assert_eq!(field(&shown, "status"), Some("waiting"), "{shown}");
    let run = field(&shown, "id").unwrap().to_owned();
    for line in [
        "  approve  open  (ends in ",
        "    │ Review the diff:",
        "    │   +12 -3 src/a.rs",
        "    │ Ship it?",
        &format!("    answer: swarmd flow answer {run} approve '<JSON>'"),
    ] {
        assert!(shown.contains(line), "{line:?} in\n{shown}");
    }
    let stderr = text(&waited.stderr);
    assert!(
        stderr.contains("waits for an answer to approve"),
        "{stderr}"
    );
    let started = std::time::Instant::now();
    let shown = daemon.run(&["flow", "show", &run, "--wait", "60"]);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(shown.status.code(), Some(3), "{shown:?}");
}

#[test]
fn a_cancelled_runs_step_stops_counting_and_its_task_has_the_runs_reason() {
    let daemon = Daemon::start();
    let run = daemon.ok(&["flow", "run", "slow"]).trim().to_owned();
    let mut task = String::new();
    for _ in 0..100 {
        let view = daemon.json(&["flow", "show", &run]);
        if let Some(id) = view["nodes"][0]["tries"][0]["task_id"].as_str() {
            task = id.to_owned();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(task.starts_with("T-"), "the step did not start");
    std::thread::sleep(Duration::from_millis(1200));
    daemon.ok(&["flow", "cancel", &run, "--reason", "x"]);
    let view = daemon.json(&["flow", "show", &run]);
    let one = &view["nodes"][0]["tries"][0];
    assert_eq!(one["ended_ms"], view["updated_ms"], "{view}");
    assert_eq!(one["reason"], "run cancelled: x", "{view}");
    let step_line = |shown: &str| {
        shown
            .lines()
            .find(|line| line.contains("step"))
            .unwrap_or_default()
            .to_owned()
    };
    let first = step_line(&daemon.ok(&["flow", "show", &run]));
    assert!(first.starts_with("⊘ step  cancelled  task …"), "{first}");
    assert!(first.ends_with("run cancelled: x"), "{first}");
    std::thread::sleep(Duration::from_millis(1500));
    let later = step_line(&daemon.ok(&["flow", "show", &run]));
    assert_eq!(first, later);
    for _ in 0..100 {
        let got = daemon.json(&["task", "get", &task]);
        if got["status"] == "cancelled" {
            let reason = got.to_string();
            assert!(reason.contains("run cancelled: x"), "{got}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the step's task was not cancelled");
}
