//! Stream adapters end to end (docs/agents-cli.md): a stand-in for each LLM
//! CLI checks it was given the flags the docs name, reads the prompt on
//! stdin, and replays a recorded transcript (tests/fixtures/cli-streams,
//! named by the prompt) as a process agent with `stream = "claude"`,
//! `"codex"` or `"gemini"`; the task's output and result are read back over
//! HTTP. The real CLIs, installed by `scripts/llm-clis-env.sh`, must still
//! take every argument the shipped example agents pass them.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::daemon::{Swarmd, repo_root};

/// One stand-in, `$0` the CLI's name: it refuses arguments other than
/// those docs/agents-cli.md gives that CLI, reads the transcript's name on
/// stdin and replays it. Transcripts named `*noauth*` or `*error*` exit 1,
/// as the real CLIs do after such a run.
const STAND_IN: &str = r#"
case "$0" in
  claude) want="-p --output-format stream-json --verbose" ;;
  codex) want="exec --json" ;;
  gemini) want="--output-format stream-json" ;;
esac
[ "$*" = "$want" ] || { echo "$0: unexpected arguments: $*" >&2; exit 64; }
name=$(cat)
cat "@FIXTURES@/$name" || exit 66
case "$name" in *noauth*|*error*) exit 1 ;; esac
"#;

fn agents() -> String {
    let fixtures = repo_root().join("tests/fixtures/cli-streams");
    let script = STAND_IN.replace("@FIXTURES@", &fixtures.display().to_string());
    let agent = |name: &str, args: &str| {
        format!(
            "[agents.{name}]\nkind = \"process\"\nprogram = \"/bin/sh\"\n\
             args = [\"-c\", '''{script}''', \"{name}\", {args}]\n\
             stream = \"{name}\"\nenv = {{ PATH = \"/usr/bin:/bin\" }}\n\n"
        )
    };
    [
        agent(
            "claude",
            r#""-p", "--output-format", "stream-json", "--verbose""#,
        ),
        agent("codex", r#""exec", "--json""#),
        agent("gemini", r#""--output-format", "stream-json""#),
    ]
    .concat()
}

/// Runs `agent` on the transcript `fixture`; the finished task and its
/// output records' events.
async fn replay(sw: &Swarmd, agent: &str, fixture: &str) -> (Value, Vec<Value>) {
    let (status, created) = sw
        .create(json!({"agent": agent, "prompt": fixture, "wait_secs": 10}))
        .await;
    assert_eq!(status, 201, "{created}\n{}", sw.log());
    let task = created["task_id"].as_str().unwrap().to_owned();
    let view = sw.finished(&task).await;
    let events = sw
        .output(&task)
        .await
        .into_iter()
        .map(|record| record["event"].clone())
        .collect();
    (view, events)
}

/// The events of one type.
fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The `usage` note, parsed; it comes just before the (first) Final.
fn usage(events: &[Value]) -> Value {
    let at = events
        .iter()
        .position(|e| e["type"] == "final")
        .expect("a final");
    let note = &events[at - 1];
    assert_eq!(note["stage"], "usage", "{note}");
    serde_json::from_str(note["note"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn each_cli_transcript_ends_with_its_final_partials_and_progress() {
    let sw = Swarmd::new(&agents()).start().await;

    let (view, events) = replay(&sw, "claude", "claude-tool-run.jsonl").await;
    let answer = "Fixed the off-by-one in `sum`; both tests pass.";
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (&json!("pass"), &json!(answer)),
        "{view}"
    );
    let texts: Vec<&Value> = of_type(&events, "partial")
        .iter()
        .map(|e| &e["chunk"]["value"])
        .collect();
    assert_eq!(texts, [&json!("I'll run the tests first."), &json!(answer)]);
    assert!(
        events
            .iter()
            .any(|e| e["stage"] == "Bash" && e["note"] == "cargo test -p demo"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["stage"] == "unknown:rate_limit_event"),
        "{events:?}"
    );
    let spent = usage(&events);
    assert_eq!(
        (&spent["session_id"], &spent["turns"], &spent["cost_usd"]),
        (
            &json!("5b0c2f9e-8f7a-4d0e-9a51-2d7c7c1b9e10"),
            &json!(3),
            &json!(0.0421)
        )
    );
    assert_eq!(events.last().unwrap()["type"], "final");

    // The real CLI's lines without a login: a failed Final, exit status 1.
    let (view, events) = replay(&sw, "claude", "claude-noauth.jsonl").await;
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (
            &json!("blocked"),
            &json!("Not logged in · Please run /login")
        ),
        "{view}"
    );
    assert_eq!(usage(&events)["cli"], "claude");

    let (view, events) = replay(&sw, "codex", "codex-tool-run.jsonl").await;
    let answer = "Fixed the range in `sum`; `cargo test -p demo` passes.";
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (&json!("pass"), &json!(answer)),
        "{view}"
    );
    assert_eq!(of_type(&events, "partial").len(), 1);
    assert!(
        events.iter().any(|e| e["stage"] == "command_execution"),
        "{events:?}"
    );
    assert_eq!(usage(&events)["reasoning_tokens"], 64);

    // Codex offline retries until it is stopped: no Final, so the attempt fails.
    let (view, events) = replay(&sw, "codex", "codex-offline.jsonl").await;
    assert_eq!(view["status"], "failed", "{view}");
    assert!(view.to_string().contains("without a final event"), "{view}");
    assert_eq!(of_type(&events, "progress").len(), 12);

    let (view, events) = replay(&sw, "gemini", "gemini-tool-run.jsonl").await;
    assert_eq!(
        (&view["status"], &view["result"]["value"]),
        (
            &json!("pass"),
            &json!("The range stops one short of the end.")
        ),
        "{view}"
    );
    assert_eq!(of_type(&events, "partial").len(), 3);
    assert!(
        events.iter().any(|e| e["stage"] == "read_file"),
        "{events:?}"
    );
    assert_eq!(usage(&events)["total_tokens"], 5210);

    let (view, _) = replay(&sw, "gemini", "gemini-error.jsonl").await;
    assert_eq!(view["status"], "blocked", "{view}");
}

/// The real CLIs at the versions the adapters were written against,
/// installed once per test run by `scripts/llm-clis-env.sh` (a no-op once
/// they are in the tools cache): the directory holding their executables.
/// If the install fails, the test fails and says why; it is never skipped.
fn installed_clis() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::installed(&BIN, "scripts/llm-clis-env.sh", "the LLM CLIs")
}

/// The shipped example agent of each CLI (config/swarmd.toml): its program
/// is the real CLI, and every argument it passes, flag or value, is still in
/// the help of that CLI (of its subcommand, for `codex exec`), so a person
/// who switches the example on gets a command line the CLI takes.
#[tokio::test]
async fn the_example_agents_flags_exist_in_the_real_clis() {
    let bin = installed_clis();
    let text = std::fs::read_to_string(repo_root().join("config/swarmd.toml")).unwrap();
    let config: toml::Table = toml::from_str(&text).unwrap();
    let home = tempfile::tempdir().unwrap();
    for cli in ["claude", "codex", "gemini"] {
        let agent = &config["agents"][cli];
        assert_eq!(agent["program"].as_str(), Some(cli), "{agent}");
        assert_eq!(agent["stream"].as_str(), Some(cli), "{agent}");
        assert_eq!(agent["enabled"].as_bool(), Some(false), "{agent}");
        let args: Vec<&str> = agent["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        // Leading words name a subcommand, whose own help lists its flags.
        let subcommand: Vec<&str> = args
            .iter()
            .copied()
            .take_while(|a| !a.starts_with('-'))
            .collect();
        let run = tokio::process::Command::new(bin.join(cli))
            .args(&subcommand)
            .arg("--help")
            .env("HOME", home.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(std::time::Duration::from_secs(60), run)
            .await
            .unwrap_or_else(|_| panic!("{cli} {subcommand:?} --help did not answer within 60 s"))
            .unwrap();
        assert!(out.status.success(), "{cli} {subcommand:?} --help: {out:?}");
        let help = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for arg in &args[subcommand.len()..] {
            assert!(
                help.contains(arg),
                "{cli} {subcommand:?} --help no longer lists {arg}:\n{help}"
            );
        }
        // What a continuation adds: its flags and subcommands, not the
        // placeholder or `-` (stdin), are in the same help.
        let resume_args = agent.get("resume_args").and_then(|a| a.as_array());
        for arg in resume_args.into_iter().flatten() {
            let arg = arg.as_str().unwrap();
            if arg.contains("{resume_session}") || arg == "-" {
                continue;
            }
            assert!(
                help.contains(arg),
                "{cli} {subcommand:?} --help no longer lists {arg} of resume_args:\n{help}"
            );
        }
        // The stand-in above replays the adapter's transcripts with the
        // streaming flags; the example passes the same ones.
        let streaming: &[&str] = match cli {
            "claude" => &["-p", "--output-format", "stream-json", "--verbose"],
            "codex" => &["exec", "--json"],
            _ => &["--output-format", "stream-json"],
        };
        for flag in streaming {
            assert!(args.contains(flag), "{cli} example lacks {flag}: {args:?}");
        }
    }
}
