//! Agents defined without `[agents.NAME]` tables, against the real binary:
//! a process agent made only of `SWARMD_AGENTS__…` variables runs a task; a
//! four-line TOML file in `agents_dir` makes an agent of each kind (process
//! and Lua run a task, operator and remote are listed by `GET /v1/agents`),
//! and every agent there names its source; a name defined twice, or a bad
//! value in an agent file, stops `swarmd serve` with exit 78 and a line
//! naming the file(s) or variable the problem came from.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::Swarmd;
use crate::harness::{PATIENCE, parts};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// The agents directory of a test's config.
const AGENTS_DIR: &str = "[agents_dir]\npath = \"@DIR@/agents\"\n";

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `GET /v1/agents`, the entry named `name`.
async fn listed(sw: &Swarmd, name: &str) -> Value {
    let (status, page) = parts(sw.get("/v1/agents", &sw.admin).send().await.unwrap()).await;
    assert_eq!(status, 200, "{page}");
    page["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|agent| agent["name"] == name)
        .unwrap_or_else(|| panic!("no agent `{name}` in {page}"))
        .clone()
}

/// Runs a task on `agent` to the end; its result value.
async fn run(sw: &Swarmd, agent: &str, prompt: &str) -> Value {
    let (status, task) = sw
        .create(json!({"agent": agent, "prompt": prompt, "wait_secs": 15}))
        .await;
    assert_eq!(status, 201, "{task}");
    let task = match task["status"].as_str() {
        Some("pass" | "blocked" | "failed" | "cancelled") => task,
        _ => sw.finished(task["task_id"].as_str().unwrap()).await,
    };
    assert_eq!(task["status"], "pass", "{task}");
    task["result"]["value"].clone()
}

/// Runs `swarmd serve` on `dir/swarmd.toml` with `env`, which must exit 78
/// before listening; its stderr.
async fn refused(dir: &Path, env: &[(&str, &str)]) -> String {
    let child = Command::new(BINARY)
        .args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(dir.join("swarmd.toml"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("swarmd serve should refuse its configuration and exit")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(78), "{stderr}");
    stderr
}

/// A temp directory holding `swarmd.toml` = state directory + `body`
/// (`@DIR@` replaced by the directory).
fn config_dir(body: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let text = format!(
        "[store]\nstate_dir = \"{root}/state\"\n{}",
        body.replace("@DIR@", &root)
    );
    write(dir.path(), "swarmd.toml", &text);
    dir
}

#[tokio::test]
async fn a_process_agent_made_only_of_environment_variables_runs_a_task() {
    let sw = Swarmd::new("")
        .env("SWARMD_AGENTS__ENVCAT__KIND", "process")
        .env("SWARMD_AGENTS__ENVCAT__PROGRAM", "/bin/cat")
        .env("SWARMD_AGENTS__ENVCAT__TIMEOUT_SECS", "30")
        .start()
        .await;
    assert_eq!(
        run(&sw, "envcat", "from the environment").await["raw"],
        "from the environment"
    );
    let agent = listed(&sw, "envcat").await;
    assert_eq!(
        (
            agent["kind"].as_str(),
            agent["source"].as_str(),
            agent["source_kind"].as_str()
        ),
        (Some("process"), Some("environment"), Some("environment")),
        "{agent}"
    );
}

#[tokio::test]
async fn a_four_line_file_of_each_kind_makes_an_agent() {
    let sw = Swarmd::new(AGENTS_DIR);
    let dir = sw.dir().to_owned();
    write(
        &dir,
        "agents/cat.toml",
        "kind = \"process\"\nprogram = \"/bin/cat\"\n\
         description = \"Prints its prompt.\"\ntimeout_secs = 30\n",
    );
    write(
        &dir,
        "agents/shout.toml",
        &format!(
            "kind = \"lua\"\nscript = \"{}/shout.lua\"\ndescription = \"Shouts.\"\nconcurrency = 2\n",
            dir.display()
        ),
    );
    write(
        &dir,
        "shout.lua",
        "return { value = string.upper(prompt), ok = true }\n",
    );
    write(
        &dir,
        "agents/helper.toml",
        "kind = \"operator\"\noperator_role = \"main-ai\"\n\
         description = \"Helps.\"\nmodel = \"sonnet\"\n",
    );
    write(
        &dir,
        "agents/builder.toml",
        "kind = \"remote\"\nstream = \"ndjson\"\n\
         description = \"Builds on a pool.\"\ntimeout_secs = 600\n",
    );
    // Today's Markdown form still loads beside them.
    write(
        &dir,
        "agents/reviewer.md",
        "---\nname: reviewer\n---\nReview.\n",
    );
    let sw = sw.start().await;

    assert_eq!(run(&sw, "cat", "four lines").await["raw"], "four lines");
    assert_eq!(run(&sw, "shout", "quiet").await, "QUIET");
    for (name, kind, file) in [
        ("cat", "process", "cat.toml"),
        ("shout", "lua", "shout.toml"),
        ("helper", "operator", "helper.toml"),
        ("builder", "remote", "builder.toml"),
        ("reviewer", "operator", "reviewer.md"),
    ] {
        let agent = listed(&sw, name).await;
        let path = dir.join("agents").join(file).display().to_string();
        assert_eq!(
            (
                agent["kind"].as_str(),
                agent["source"].as_str(),
                agent["source_kind"].as_str()
            ),
            (Some(kind), Some(path.as_str()), Some("agent_file")),
            "{agent}"
        );
    }
}

#[tokio::test]
async fn a_name_defined_twice_stops_the_start_naming_both_sources() {
    let dir = config_dir(&format!(
        "{AGENTS_DIR}[agents.dup]\nkind = \"process\"\nprogram = \"/bin/cat\"\n"
    ));
    write(
        dir.path(),
        "agents/dup.toml",
        "kind = \"lua\"\nscript = \"x.lua\"\n",
    );
    let stderr = refused(dir.path(), &[]).await;
    let config = dir.path().join("swarmd.toml");
    let file = dir.path().join("agents/dup.toml");
    for source in [config.display().to_string(), file.display().to_string()] {
        assert!(stderr.contains(&source), "{source} not named: {stderr}");
    }
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    // Two agent files, and a file against an environment-only agent.
    let dir = config_dir(AGENTS_DIR);
    write(
        dir.path(),
        "agents/dup.toml",
        "kind = \"process\"\nprogram = \"/bin/cat\"\n",
    );
    write(
        dir.path(),
        "agents/dup.md",
        "---\nname: dup\n---\nReview.\n",
    );
    let stderr = refused(dir.path(), &[]).await;
    for file in ["agents/dup.md", "agents/dup.toml"] {
        let path = dir.path().join(file).display().to_string();
        assert!(stderr.contains(&path), "{path} not named: {stderr}");
    }
    std::fs::remove_file(dir.path().join("agents/dup.md")).unwrap();
    let stderr = refused(dir.path(), &[("SWARMD_AGENTS__DUP__KIND", "operator")]).await;
    assert!(stderr.contains("SWARMD_AGENTS__DUP__"), "{stderr}");
    assert!(stderr.contains("agents/dup.toml"), "{stderr}");
}

#[tokio::test]
async fn a_bad_value_in_an_agent_file_or_variable_is_refused_naming_it() {
    // Out of range: the validation of the merged configuration names the file.
    let dir = config_dir(AGENTS_DIR);
    write(
        dir.path(),
        "agents/slow.toml",
        "kind = \"process\"\nprogram = \"/bin/cat\"\ntimeout_secs = 0\n",
    );
    let stderr = refused(dir.path(), &[]).await;
    let file = dir.path().join("agents/slow.toml").display().to_string();
    assert!(stderr.contains("agents.slow.timeout_secs"), "{stderr}");
    assert!(stderr.contains(&file), "{stderr}");

    // The wrong type, or a key of another kind: the file and its line.
    write(
        dir.path(),
        "agents/slow.toml",
        "kind = \"process\"\nprogram = \"/bin/cat\"\ntimeout_secs = \"soon\"\n",
    );
    let stderr = refused(dir.path(), &[]).await;
    assert!(stderr.contains(&format!("{file}: line 3")), "{stderr}");

    // A variable of an environment-only agent is named.
    let dir = config_dir("");
    let stderr = refused(
        dir.path(),
        &[
            ("SWARMD_AGENTS__ENVCAT__KIND", "process"),
            ("SWARMD_AGENTS__ENVCAT__PROGRAM", "/bin/cat"),
            ("SWARMD_AGENTS__ENVCAT__MAX_OUTPUT_BYTES", "0"),
        ],
    )
    .await;
    assert!(
        stderr.contains("SWARMD_AGENTS__ENVCAT__MAX_OUTPUT_BYTES"),
        "{stderr}"
    );
    let stderr = refused(dir.path(), &[("SWARMD_AGENTS__ENVCAT__KIND", "process")]).await;
    assert!(
        stderr.contains("SWARMD_AGENTS__ENVCAT__KIND") && stderr.contains("needs `program`"),
        "{stderr}"
    );
}
