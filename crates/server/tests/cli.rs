//! Black-box tests of the `swarmd` binary's local commands: exit codes, the
//! one-line configuration error, the example configuration, secret files;
//! `daemon` runs the client commands against a daemon.

#![allow(
    clippy::disallowed_methods,
    reason = "a test program passes its PATH to the binary it starts"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "cli/daemon.rs"]
mod daemon;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `swarmd args…` from the repository root with a clean environment.
fn swarmd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(args)
        .current_dir(repo_root())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn example_configuration_is_valid_and_printed_redacted() {
    let output = swarmd(&["check-config", "--config", "config/swarmd.toml"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    for agent in ["echo", "ndjson-demo", "upper", "coder"] {
        assert!(printed.contains(&format!("[agents.{agent}]")), "{printed}");
    }
    assert!(printed.contains("# agent `reviewer` from config/agents/reviewer.md"));
    assert!(printed.contains("LANG = \"<redacted>\""), "{printed}");
}

#[test]
fn invalid_configuration_exits_78_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swarmd.toml");
    std::fs::write(&path, "[server]\nbind = \"127.0.0.1:1\"\nbnid = 1\n").unwrap();
    let output = swarmd(&["check-config", "--config", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(78));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "unknown key `bnid` in {} at line 3",
            path.display()
        )),
        "{stderr}"
    );
}

#[test]
fn check_config_takes_the_cli_stream_names_and_refuses_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swarmd.toml");
    let agents: String = ["claude", "codex", "gemini"]
        .iter()
        .map(|cli| {
            format!(
                "[agents.{cli}]\nkind = \"process\"\nprogram = \"/bin/cat\"\nstream = \"{cli}\"\n"
            )
        })
        .collect();
    std::fs::write(&path, &agents).unwrap();
    let output = swarmd(&["check-config", "--config", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let printed = text(&output.stdout);
    for cli in ["claude", "codex", "gemini"] {
        assert!(
            printed.contains(&format!("stream = \"{cli}\"")),
            "{printed}"
        );
    }
    std::fs::write(&path, agents.replace("\"gemini\"\n", "\"aider\"\n")).unwrap();
    let output = swarmd(&["check-config", "--config", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(78));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("unknown variant `aider`"), "{stderr}");
}

/// An agent that cannot be linked is a configuration error for
/// `check-config` and `serve` alike: status 78 and one line naming it.
#[test]
fn agents_that_cannot_link_exit_78_from_check_config_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("broken.lua");
    std::fs::write(&script, "this is not lua").unwrap();
    let path = dir.path().join("swarmd.toml");
    let config = format!(
        r#"
[server]
bind = "127.0.0.1:0"

[store]
backend = "memory"
state_dir = "{state}"

[agents.broken]
kind = "lua"
script = "{script}"

[agents.leaky]
kind = "process"
program = "/bin/true"
env = ["CREDENTIALS_DIRECTORY"]
"#,
        state = dir.path().join("state").display(),
        script = script.display(),
    );
    std::fs::write(&path, config).unwrap();
    refused_by_both(&path, &["agent `broken`", "CREDENTIALS_DIRECTORY"]);
}

/// `check-config` and `serve` both refuse the configuration at `path`:
/// exit 78, nothing on stdout, and a last stderr line naming each of
/// `needles`.
fn refused_by_both(path: &std::path::Path, needles: &[&str]) {
    for command in ["check-config", "serve"] {
        let output = swarmd(&[command, "--config", path.to_str().unwrap()]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(78), "{command}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        for needle in needles {
            assert!(last.contains(needle), "{command}: {needle}: {stderr}");
        }
        assert!(
            text(&output.stdout).is_empty(),
            "{command} printed a config"
        );
    }
}

/// A flow that could never run stops `serve`; `check-config` refuses it
/// the same way, so a configuration it accepts also starts.
#[test]
fn flows_that_cannot_run_exit_78_from_check_config_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let flows = dir.path().join("flows");
    std::fs::create_dir(&flows).unwrap();
    let flow = r#"{"name": "lost", "body": {"kind": "step", "ref": "nobody",
        "in": {"op": "path", "at": "$.input"}, "out": {"op": "path", "at": "$.out"}}}"#;
    std::fs::write(flows.join("lost.json"), flow).unwrap();
    let path = dir.path().join("swarmd.toml");
    let config = format!(
        r#"
[server]
bind = "127.0.0.1:0"

[store]
backend = "memory"
state_dir = "{state}"

[agents.echo]
kind = "process"
program = "/bin/cat"

[flows_dir]
path = "{flows}"
"#,
        state = dir.path().join("state").display(),
        flows = flows.display(),
    );
    std::fs::write(&path, config).unwrap();
    refused_by_both(&path, &["lost.json", "nobody"]);
    // A file that does not parse is named with the others' problems, not
    // instead of them.
    std::fs::write(flows.join("broken.toml"), "name = ").unwrap();
    refused_by_both(&path, &["broken.toml", "lost.json", "nobody"]);
    // A flow calling the broken file's flow is not also said to call an
    // unknown flow: the broken file is the problem.
    let caller = r#"{"name": "caller", "body": {"kind": "call", "flow": "broken",
        "in": {"op": "path", "at": "$.input"}, "out": {"op": "path", "at": "$.out"}}}"#;
    std::fs::write(flows.join("caller.json"), caller).unwrap();
    let output = swarmd(&["check-config", "--config", path.to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("broken.toml"), "{stderr}");
    assert!(!stderr.contains("unknown_flow"), "{stderr}");
    assert!(!stderr.contains("no flow is named"), "{stderr}");
    // Without the file, the call is the problem.
    std::fs::remove_file(flows.join("broken.toml")).unwrap();
    refused_by_both(&path, &["caller.json", "no flow is named `broken`"]);
    std::fs::remove_file(flows.join("caller.json")).unwrap();
    std::fs::write(flows.join("lost.json"), flow.replace("nobody", "echo")).unwrap();
    let output = swarmd(&["check-config", "--config", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

#[test]
fn usage_errors_exit_64() {
    let output = swarmd(&["serve", "--no-such-flag"]);
    assert_eq!(output.status.code(), Some(64));
    let output = swarmd(&["--help"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(text(&output.stdout).contains("check-config"));
}

/// A daemon URL that is not one is refused before anything is sent,
/// naming where it came from: the flag, or the variable.
#[test]
fn a_malformed_url_is_a_usage_error_naming_its_source() {
    for bad in [
        "notaurl",
        "http://127.0.0.1:99999",
        "ftp://127.0.0.1:1",
        "http://",
    ] {
        let output = swarmd(&["task", "list", "--token", "t", "--url", bad]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{bad}: {stderr}");
        assert!(stderr.contains(&format!("`{bad}` from --url")), "{stderr}");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_swarmd"))
        .args(["agents", "--token", "t"])
        .env_clear()
        .env("SWARMD_URL", "http://127.0.0.1:99999")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("from SWARMD_URL: "), "{stderr}");
    assert!(stderr.contains("invalid port number"), "{stderr}");
}

#[test]
fn a_worker_pool_token_without_an_agent_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let args = [
        "token",
        "mint",
        "--role",
        "worker-pool",
        "--state-dir",
        state,
    ];
    let output = swarmd(&args);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--agent"), "{stderr}");
    assert!(text(&output.stdout).is_empty());
    // --agent with another role, and an agent the configuration does not
    // have: both parse, neither goes with the rest, both are usage errors.
    for (role, agent) in [("observer", "x"), ("worker-pool", "nope")] {
        let args = [
            "token",
            "mint",
            "--role",
            role,
            "--agent",
            agent,
            "--state-dir",
            state,
        ];
        let output = swarmd(&args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{role}: {stderr}");
        assert!(stderr.contains("cannot mint the token: "), "{stderr}");
    }
}

#[test]
fn admin_token_is_created_once_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let args = ["admin-token", "--state-dir", state.to_str().unwrap()];
    let first = swarmd(&args);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let token = text(&first.stdout);
    assert!(token.trim().starts_with("sws-"), "{token}");
    assert_eq!(text(&swarmd(&args).stdout), token);
    let file = state.join("admin.token");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let state_mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(state_mode, 0o700);
}

#[test]
fn keys_rotate_prints_only_the_new_kid() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let first = text(&swarmd(&["keys", "rotate", "--state-dir", state]).stdout);
    let second = text(&swarmd(&["keys", "rotate", "--state-dir", state]).stdout);
    assert_eq!(first.lines().count(), 1);
    assert_ne!(first, second);
    let minted = swarmd(&[
        "token",
        "mint",
        "--role",
        "observer",
        "--ttl",
        "60",
        "--state-dir",
        state,
    ]);
    assert_eq!(minted.status.code(), Some(0), "{}", text(&minted.stderr));
    let token = text(&minted.stdout);
    assert!(
        token.starts_with(&format!("swc1.{}.", second.trim())),
        "{token}"
    );
}
