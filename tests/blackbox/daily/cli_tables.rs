//! The human CLI against a real daemon: `task list` prints a table (short
//! ids, statuses, agents, relative ages, durations, reasons) and `-o json`
//! one JSON document; its filters select; `task get` is a key/value block;
//! `agents` and `sessions` list; the connection is found from the
//! environment or the per-user configuration in a directory with none;
//! columns stay aligned and cells are cut by display width with wide and
//! combining text; `task tail --after-seq` needs `--attempt`; and a
//! subcommand's help lists its own options before the connection ones.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::harness::{Daemon, parts};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// An agent with a description, for `swarmd agents`.
const DESCRIBED: &str = r#"
[agents.echo]
kind = "process"
program = "/bin/cat"
description = "Repeats its prompt"
"#;

/// Runs the CLI in an empty directory with only `env` (no HOME: no
/// per-user configuration), and returns its output.
async fn run(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(BINARY)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap()
}

/// `run` with the connection flags; stdout when it succeeded.
async fn cli(daemon: &Daemon, args: &[&str]) -> String {
    let cwd = tempfile::tempdir().unwrap();
    let mut all = args.to_vec();
    all.extend(["--url", &daemon.base, "--token", &daemon.admin]);
    let output = run(cwd.path(), &[], &all).await;
    assert!(
        output.status.success(),
        "swarmd {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

async fn json(daemon: &Daemon, args: &[&str]) -> Value {
    let out = cli(daemon, args).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// The ids of a `task list -o json` answer, newest first.
fn ids(page: &Value) -> Vec<&str> {
    page["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|task| task["id"].as_str().unwrap())
        .collect()
}

/// Whether `text` holds a relative time of this test's few seconds.
fn relative(text: &str) -> bool {
    text.contains("just now")
        || text
            .match_indices("s ago")
            .any(|(at, _)| text[..at].ends_with(|c: char| c.is_ascii_digit()))
}

/// The table row of a task: the line holding its short id (its last 8
/// hex digits).
fn row<'a>(table: &'a str, id: &str) -> &'a str {
    let short = &id[id.len() - 8..];
    table
        .lines()
        .find(|line| line.contains(short))
        .unwrap_or_else(|| panic!("no row for {id}:\n{table}"))
}

#[tokio::test]
async fn task_list_is_a_table_and_json_and_its_filters_select() {
    let daemon = Daemon::start_with(DESCRIBED).await;
    let passed = daemon.spawn(json!({"agent": "echo", "prompt": "hi"})).await;
    assert_eq!(daemon.finished(&passed).await["status"], "pass");
    let cancelled = daemon.spawn(json!({"agent": "hold", "prompt": "a"})).await;
    daemon.handle(&cancelled, 1).await;
    let (status, body) = parts(
        daemon
            .post(&format!("/v1/tasks/{cancelled}/cancel"), &daemon.admin)
            .json(&json!({"reason": "not needed"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let running = daemon.spawn(json!({"agent": "hold", "prompt": "b"})).await;
    daemon.handle(&running, 1).await;

    // The default is a table: a header, one row per task, newest first.
    let table = cli(&daemon, &["task", "list"]).await;
    let header = table.lines().next().unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        ["ID", "STATUS", "AGENT", "AGE", "DURATION", "COST", "REASON"],
        "{table}"
    );
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(!table.contains(&passed), "ids are short:\n{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[1], row(&table, &running), "newest first:\n{table}");
    let done = row(&table, &passed);
    for needle in ["pass", "echo", "ms "] {
        assert!(done.contains(needle), "{needle}: {done}");
    }
    assert!(relative(done), "{done}");
    let stopped = row(&table, &cancelled);
    for needle in ["cancelled", "hold", "not needed"] {
        assert!(stopped.contains(needle), "{needle}: {stopped}");
    }
    assert!(row(&table, &running).contains("running"), "{table}");

    // `-o json`: one document, the daemon's page.
    let page = json(&daemon, &["task", "list", "-o", "json"]).await;
    assert_eq!(ids(&page), [&running, &cancelled, &passed], "{page}");

    // Filters select.
    let only = |args: &'static [&'static str]| {
        let daemon = &daemon;
        async move {
            let mut all = vec!["task", "list", "-o", "json"];
            all.extend(args);
            json(daemon, &all).await
        }
    };
    assert_eq!(ids(&only(&["--status", "running"]).await), [&running]);
    assert_eq!(ids(&only(&["--agent", "echo"]).await), [&passed]);
    assert_eq!(ids(&only(&["--limit", "1"]).await), [&running]);
    assert_eq!(ids(&only(&["--since", "1h"]).await).len(), 3);
    let parent = ["task", "list", "-o", "json", "--parent", &passed];
    assert!(ids(&json(&daemon, &parent).await).is_empty());

    // `task get`: a key/value block; `-o json` the task as the daemon has it.
    let block = cli(&daemon, &["task", "get", &cancelled]).await;
    for (key, value) in [
        ("id", cancelled.as_str()),
        ("status", "cancelled"),
        ("agent", "hold"),
        ("reason", "not needed"),
    ] {
        assert!(
            block
                .lines()
                .any(|line| line.starts_with(key) && line.ends_with(value)),
            "{key}: {value}\n{block}"
        );
    }
    assert!(relative(&block), "{block}");
    let got = json(&daemon, &["task", "get", &cancelled, "-o", "json"]).await;
    assert_eq!(got["status"], "cancelled", "{got}");
    daemon.release(&running);
}

/// The short id a table prints names its task in every task verb; a tail
/// that names none, or several, says so and exits 1, and text that is
/// neither an id nor a tail is a usage error.
#[tokio::test]
async fn a_task_is_named_by_the_tail_its_table_prints() {
    let daemon = Daemon::start_with(DESCRIBED).await;
    let passed = daemon.spawn(json!({"agent": "echo", "prompt": "hi"})).await;
    assert_eq!(daemon.finished(&passed).await["status"], "pass");
    let table = cli(&daemon, &["task", "list"]).await;
    let short = row(&table, &passed).split_whitespace().next().unwrap();
    assert_eq!(
        short,
        format!("…{}", &passed[passed.len() - 8..]),
        "{table}"
    );

    let got = json(&daemon, &["task", "get", short, "-o", "json"]).await;
    assert_eq!(got["id"], passed.as_str(), "{got}");
    let waited = json(&daemon, &["task", "wait", &short[3..], "-o", "json"]).await;
    assert_eq!(waited["id"], passed.as_str(), "{waited}");
    let children = json(&daemon, &["task", "list", "--parent", short, "-o", "json"]).await;
    assert!(ids(&children).is_empty(), "{children}");

    let cwd = tempfile::tempdir().unwrap();
    let connection = [
        "--url",
        daemon.base.as_str(),
        "--token",
        daemon.admin.as_str(),
    ];
    let absent = if passed.ends_with("0000") {
        "…ffff"
    } else {
        "…0000"
    };
    let mut args = vec!["task", "get", absent];
    args.extend(connection);
    let output = run(cwd.path(), &[], &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no task you can see ends in"), "{stderr}");

    let mut args = vec!["task", "get", "zz"];
    args.extend(connection);
    let output = run(cwd.path(), &[], &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("the tail a table prints"), "{stderr}");

    // An error that quotes what the user gave carries none of its escape
    // sequences or bidi overrides to the terminal.
    let agent = "x\u{1b}]52;c;SGk=\u{7}\u{1b}[2J\u{202e}y";
    let mut args = vec!["task", "spawn", "--agent", agent, "--prompt", "hi"];
    args.extend(connection);
    let output = run(cwd.path(), &[], &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("unknown agent"), "{stderr}");
    assert!(
        !stderr.contains(['\u{1b}', '\u{7}', '\u{202e}']),
        "{stderr:?}"
    );
}

#[tokio::test]
async fn agents_and_sessions_are_listed() {
    let daemon = Daemon::start_with(DESCRIBED).await;
    let table = cli(&daemon, &["agents"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[..3], ["NAME", "KIND", "DESCRIPTION"], "{table}");
    let echo = table
        .lines()
        .find(|line| line.starts_with("echo "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(echo.contains("process") && echo.contains("Repeats its prompt"));
    let agents = json(&daemon, &["agents", "-o", "json"]).await;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|agent| agent["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"hold"),
        "{agents}"
    );

    let (status, login) = parts(
        daemon
            .post("/v1/operators", &daemon.admin)
            .json(&json!({"roles": ["main-ai"], "kind": "main_ai", "description": "planner"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{login}");
    let sid = login["sid"].as_str().unwrap();
    let table = cli(&daemon, &["sessions"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "SID",
            "KIND",
            "ROLES",
            "CONNECTED",
            "LAST",
            "SEEN",
            "DESCRIPTION"
        ],
        "{table}"
    );
    let line = table
        .lines()
        .find(|line| line.starts_with(sid))
        .unwrap_or_else(|| panic!("{table}"));
    for needle in ["main_ai", "main-ai", " no ", "planner"] {
        assert!(line.contains(needle), "{needle}: {line}");
    }
    assert!(relative(line), "{line}");
    let token = login["token"].as_str().unwrap();
    assert!(!table.contains(token), "{table}");
    let sessions = json(&daemon, &["sessions", "-o", "json"]).await;
    assert_eq!(sessions[0]["sid"], sid, "{sessions}");

    // The daemon's own state: where it runs, its store and its load.
    let text = cli(&daemon, &["status"]).await;
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("swarmd ") && lines[0].contains(" at http://127.0.0.1:"),
        "{text}"
    );
    assert!(lines[1].starts_with("store: "), "{text}");
    assert!(lines[2].starts_with("tasks: 0 queued, 0 running"), "{text}");
    assert!(lines[3].starts_with("sessions: 1 (0 connected)"), "{text}");
    assert!(!text.contains("cluster"), "{text}");
    let status = json(&daemon, &["status", "-o", "json"]).await;
    assert_eq!(status["counts"]["sessions"], 1, "{status}");
    assert!(status.get("cluster").is_none(), "{status}");
}

#[tokio::test]
async fn the_connection_comes_from_the_environment_or_the_user_config() {
    let daemon = Daemon::start_with(DESCRIBED).await;
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let home = root.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home = home.to_str().unwrap();

    // SWARMD_URL and SWARMD_TOKEN_FILE, from a directory with no configuration.
    let token_file = root.path().join("token");
    std::fs::write(&token_file, format!("{}\n", daemon.admin)).unwrap();
    let from_env = [
        ("HOME", home),
        ("SWARMD_URL", daemon.base.as_str()),
        ("SWARMD_TOKEN_FILE", token_file.to_str().unwrap()),
    ];
    let output = run(&project, &from_env, &["agents", "-o", "json"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let agents: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(agents["agents"].is_array(), "{agents}");

    // No daemon at the URL: the error says how to start one or name another.
    let nobody = [
        ("HOME", home),
        ("SWARMD_URL", "http://127.0.0.1:1"),
        ("SWARMD_TOKEN_FILE", token_file.to_str().unwrap()),
    ];
    let output = run(&project, &nobody, &["status"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("http://127.0.0.1:1") && stderr.contains("`swarmd serve`"),
        "{stderr}"
    );

    // A flag wins over the environment: a wrong --token is refused, and the
    // refusal does not print it.
    let mut args = vec!["task", "list", "--token", "sws-not-the-admin-token"];
    let output = run(&project, &from_env, &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains("sws-not-the-admin-token"), "{stderr}");
    args.truncate(2);

    // SWARMD_TOKEN_FILE naming no file: the error names the variable and
    // the path, not a token.
    let missing = root.path().join("absent");
    let env = [
        ("HOME", home),
        ("SWARMD_URL", daemon.base.as_str()),
        ("SWARMD_TOKEN_FILE", missing.to_str().unwrap()),
    ];
    let output = run(&project, &env, &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("SWARMD_TOKEN_FILE") && stderr.contains(missing.to_str().unwrap()),
        "{stderr}"
    );

    // The per-user configuration: its base URL and its state directory's
    // admin token, with nothing on the command line or in the environment.
    let config = Path::new(home).join(".config/swarmd/swarmd.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let state = daemon.config_path().with_file_name("state");
    std::fs::write(
        &config,
        format!(
            "[server]\nbase_url = \"{}\"\n\n[store]\nstate_dir = \"{}\"\n",
            daemon.base,
            state.display()
        ),
    )
    .unwrap();
    let output = run(&project, &[("HOME", home)], &["task", "list", "-o", "json"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let page: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(page["tasks"].is_array(), "{page}");
    // The URL from there, the credential from the environment: the
    // variable is the CLI's, not taken for a misspelt configuration key.
    let mixed = [
        ("HOME", home),
        ("SWARMD_TOKEN_FILE", token_file.to_str().unwrap()),
    ];
    let output = run(&project, &mixed, &["sessions", "-o", "json"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
}

#[tokio::test]
async fn subcommand_help_lists_its_own_options_first() {
    let cwd = tempfile::tempdir().unwrap();
    for verb in [
        &["task", "spawn", "--help"][..],
        &["task", "list", "--help"],
        &["agents", "--help"],
    ] {
        let output = run(cwd.path(), &[], verb).await;
        let help = String::from_utf8(output.stdout).unwrap();
        assert!(output.status.success(), "{help}");
        let own = if verb[0] == "agents" {
            "--output"
        } else if verb[1] == "spawn" {
            "--agent"
        } else {
            "--status"
        };
        let at = |needle: &str| {
            help.find(needle)
                .unwrap_or_else(|| panic!("{needle} in {verb:?}:\n{help}"))
        };
        assert!(at(own) < at("Connection options:"), "{verb:?}:\n{help}");
        assert!(at("Connection options:") < at("--url"), "{verb:?}:\n{help}");
        assert!(at("--url") < at("--log-format"), "{verb:?}:\n{help}");
    }
}

/// Agents whose descriptions are in wide scripts, emoji and combining
/// marks, for the width test.
const WIDE: &str = r#"
[agents.plain]
kind = "process"
program = "/bin/cat"
description = "Repeats its prompt"

[agents.kanji]
kind = "process"
program = "/bin/cat"
description = "日本語の説明です"

[agents.marks]
kind = "process"
program = "/bin/cat"
description = "re\u0301sume\u0301 🚀 launch"

[agents.long]
kind = "process"
program = "/bin/cat"
description = "説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明説明"
"#;

/// How many terminal columns `text` takes, for the characters these tests
/// use: combining marks none, kana, CJK ideographs and these emoji two,
/// the rest one.
fn columns(text: &str) -> usize {
    text.chars()
        .map(|c| match u32::from(c) {
            0x300..=0x36F => 0,
            0x3040..=0x30FF | 0x4E00..=0x9FFF | 0x1F300..=0x1F6FF => 2,
            _ => 1,
        })
        .sum()
}

/// A column of a table starts at the same terminal column on every line
/// whatever the width of the text before it, and a cell is cut to its
/// width (60 columns) without splitting a wide character.
#[tokio::test]
async fn wide_text_keeps_table_columns_aligned() {
    let daemon = Daemon::start_with(WIDE).await;
    let table = cli(&daemon, &["agents"]).await;
    let header = table.lines().next().unwrap();
    let running = columns(&header[..header.find("RUNNING").unwrap()]);
    for name in ["plain ", "kanji ", "marks ", "long "] {
        let line = table
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("{name}:\n{table}"));
        // The line ends with the RUNNING and QUEUED cells, a word each.
        let rest = line.trim_end();
        let rest = rest[..rest.rfind(' ').unwrap()].trim_end();
        let before = &rest[..=rest.rfind(' ').unwrap()];
        assert_eq!(columns(before), running, "{name}:\n{table}");
    }
    let long = table
        .lines()
        .find(|line| line.starts_with("long "))
        .unwrap();
    let cell = format!("{}…", "説明".repeat(14) + "説");
    assert!(long.contains(&cell), "{long}");
    assert_eq!(columns(&cell), 59);
    assert!(table.contains("re\u{301}sume\u{301} 🚀 launch"), "{table}");

    // A reason in a wide script is cut to the cell's width, not its count
    // of characters.
    let task = daemon.spawn(json!({"agent": "hold", "prompt": "p"})).await;
    daemon.handle(&task, 1).await;
    let reason = "取消".repeat(40);
    let path = format!("/v1/tasks/{task}/cancel");
    let (status, body) = parts(
        daemon
            .post(&path, &daemon.admin)
            .json(&json!({"reason": reason}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let table = cli(&daemon, &["task", "list"]).await;
    let line = row(&table, &task);
    let cut = &line[line.find('取').unwrap_or_else(|| panic!("{table}"))..];
    assert_eq!(cut, format!("{}取…", "取消".repeat(14)), "{table}");
    assert_eq!(columns(cut), 59);
}

/// `task tail --after-seq` names a seq of one attempt: without
/// `--attempt` the daemon refuses it and says so; with it, it reads on.
#[tokio::test]
async fn task_tail_after_a_seq_needs_its_attempt() {
    let daemon = Daemon::start_with(DESCRIBED).await;
    let task = daemon.spawn(json!({"agent": "echo", "prompt": "hi"})).await;
    assert_eq!(daemon.finished(&task).await["status"], "pass");
    let cwd = tempfile::tempdir().unwrap();
    let connection = [
        "--url",
        daemon.base.as_str(),
        "--token",
        daemon.admin.as_str(),
    ];

    let mut args = vec!["task", "tail", task.as_str(), "--after-seq", "0"];
    args.extend(connection);
    let output = run(cwd.path(), &[], &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Refused before any request: a usage error naming the flag it needs.
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--attempt"), "{stderr}");

    let mut args = vec![
        "task",
        "tail",
        task.as_str(),
        "--attempt",
        "1",
        "--after-seq",
        "0",
    ];
    args.extend(connection);
    let output = run(cwd.path(), &[], &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let records: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(!records.is_empty(), "{stdout}");
    assert!(records.iter().all(|r| r["attempt"] == 1), "{stdout}");
    assert!(
        records.iter().any(|r| r["event"]["type"] == "final"),
        "{stdout}"
    );
}
