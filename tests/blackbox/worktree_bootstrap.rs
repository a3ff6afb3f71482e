//! Worktrees ready to work in (docs/tasks.md, Bootstrap) with the real
//! binary and real `git`: an ignored `.env` is copied into each attempt's
//! worktree, `node_modules` is a symlink to the repository's own, the setup
//! command's lines appear in the task's output as `setup` progress events
//! before the agent runs, a failing setup fails the attempt with its reason
//! and never starts the agent, and two attempts alive at once get different
//! `SWARM_PORT`s.

use std::path::Path;

use serde_json::{Value, json};

use crate::daemon::Swarmd;
use crate::worktrees::{git, make_repo};

/// `booted` waits until two attempts have started (so both hold their
/// ports at once), then prints what its worktree holds and the ports it
/// got. `broken` has a setup that fails; its program must never run.
const AGENTS: &str = r#"
[agents.booted]
kind = "process"
program = "/bin/sh"
args = ["-c", """
touch "@DIR@/$SWARM_TASK_ID.started"
while [ "$(ls "@DIR@" | grep -c '[.]started$')" -lt 2 ]; do sleep 0.05; done
link=no
[ -L node_modules ] && link=yes
printf '{"env": "%s", "link": "%s", "pad": "%s", "setup_ran": "%s", "port": "%s", "port0": "%s", "port1": "%s"}' \
  "$(cat .env)" "$link" "$(cat node_modules/left-pad/index.js)" "$(cat .setup-ran)" \
  "$SWARM_PORT" "$SWARM_PORT_0" "$SWARM_PORT_1"
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main", copy = [".env", "config/*.toml"], link = ["node_modules"], setup = { command = ["sh", "-c", "echo preparing in $SWARM_BRANCH; echo setup-done > .setup-ran; echo warn >&2"], timeout_secs = 30 }, ports = { range = "47310-47329", count = 2 } }

[agents.broken]
kind = "process"
program = "/bin/sh"
args = ["-c", "touch @DIR@/broken-agent-ran; echo '{}'"]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main", setup = { command = ["sh", "-c", "echo about to fail; exit 1"] } }
"#;

/// The repository with an ignored `.env`, `config/local.toml` and
/// `node_modules`.
fn prepare(dir: &Path) {
    let repo = make_repo(dir);
    std::fs::write(
        repo.join(".gitignore"),
        ".env\nconfig/local.toml\nnode_modules/\n",
    )
    .unwrap();
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["commit", "-q", "-m", "ignore"]);
    std::fs::write(repo.join(".env"), "API_URL=http://local").unwrap();
    std::fs::create_dir_all(repo.join("config")).unwrap();
    std::fs::write(repo.join("config/local.toml"), "debug = true\n").unwrap();
    std::fs::create_dir_all(repo.join("node_modules/left-pad")).unwrap();
    std::fs::write(repo.join("node_modules/left-pad/index.js"), "pad").unwrap();
}

async fn spawn(sw: &Swarmd, agent: &str) -> String {
    let (status, body) = sw
        .create(json!({"agent": agent, "prompt": "go", "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    body["task_id"].as_str().unwrap().to_owned()
}

/// The notes of the task's `setup` progress events, in order (producer
/// `setup` from a local agent; a pool's events are the worker's).
async fn setup_notes(sw: &Swarmd, task: &str) -> Vec<String> {
    sw.output(task)
        .await
        .iter()
        .filter(|r| r["event"]["type"] == "progress" && r["event"]["stage"] == "setup")
        .map(|r| r["event"]["note"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn worktrees_get_copies_links_setup_and_ports_and_a_failed_setup_fails_the_attempt() {
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    prepare(sw.dir());
    let sw = sw.start().await;

    let tasks = [spawn(&sw, "booted").await, spawn(&sw, "booted").await];
    let mut ports = Vec::new();
    for task in &tasks {
        let done = sw.finished(task).await;
        assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
        let ran: &Value = &done["result"]["value"];
        assert_eq!(ran["env"], "API_URL=http://local", "{ran}");
        assert_eq!(ran["link"], "yes", "{ran}");
        assert_eq!(ran["pad"], "pad", "{ran}");
        // The setup ran in the worktree before the agent.
        assert_eq!(ran["setup_ran"], "setup-done", "{ran}");
        let port: u16 = ran["port"].as_str().unwrap().parse().unwrap();
        assert!((47310..=47329).contains(&port), "{ran}");
        assert_eq!(ran["port0"], ran["port"], "{ran}");
        assert_ne!(ran["port1"], ran["port"], "{ran}");
        ports.push(port);

        let notes = setup_notes(&sw, task).await;
        assert!(
            notes[0].starts_with("running sh -c echo preparing"),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.starts_with("preparing in swarmd/")),
            "{notes:?}"
        );
        assert!(notes.iter().any(|n| n == "warn"), "{notes:?}");
        assert!(notes.last().unwrap().starts_with("done in "), "{notes:?}");
    }
    assert_ne!(ports[0], ports[1], "two live attempts share a port");

    // The repository's own files are untouched and the copies and links
    // were not committed as the worker's work.
    let repo = sw.dir().join("repo");
    assert!(repo.join("node_modules/left-pad/index.js").is_file());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    let task = spawn(&sw, "broken").await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "failed", "{done}");
    let reason = done["attempts"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("setup failed: exit 1"), "{done}");
    let notes = setup_notes(&sw, &task).await;
    assert!(notes.iter().any(|n| n == "about to fail"), "{notes:?}");
    let producers: Vec<Value> = sw
        .output(&task)
        .await
        .iter()
        .map(|r| r["producer"].clone())
        .collect();
    assert!(producers.iter().all(|p| p == "setup"), "{producers:?}");
    assert_eq!(notes.last().unwrap(), "setup failed: exit 1");
    assert!(
        !sw.dir().join("broken-agent-ran").exists(),
        "the agent ran after its setup failed"
    );
}

/// The pool's child: reports what its worktree holds and its ports.
const POOL_CHILD: &str = r#"
cat > /dev/null
link=no
[ -L node_modules ] && link=yes
printf '{"type":"final","content":{"kind":"inline","value":{"env":"%s","link":"%s","setup_ran":"%s","port":"%s","port1":"%s"}},"ok":true}\n' \
  "$(cat .env)" "$link" "$(cat .setup-ran)" "$SWARM_PORT" "$SWARM_PORT_1"
"#;

#[tokio::test]
async fn a_pool_with_worktree_flags_bootstraps_its_checkouts_as_an_agent_does() {
    use crate::pools::{AGENTS as POOL_AGENTS, Pool, Setup, create, mint};
    let sw = Swarmd::new(POOL_AGENTS).start().await;
    let machine = tempfile::tempdir().unwrap();
    prepare(machine.path());
    let repo = machine.path().join("repo");
    let flags = [
        "--worktree-repo",
        &repo.display().to_string(),
        "--worktree-base",
        "main",
        "--worktree-dir",
        &machine.path().join("trees").display().to_string(),
        "--worktree-copy",
        ".env",
        "--worktree-link",
        "node_modules",
        "--worktree-setup",
        "echo pool setup; echo ready > .setup-ran",
        "--worktree-ports",
        "47340-47349",
        "--worktree-port-count",
        "2",
    ]
    .map(str::to_owned);
    let setup = Setup {
        args: flags.to_vec(),
        script: Some(POOL_CHILD),
        ..Setup::default()
    };
    let token = mint(&sw, &["remote"]);
    let pool = Pool::start_with(&sw, &token, "remote", "pool-boot", 1, setup).await;
    let task = create(&sw, json!({"agent": "remote", "prompt": "go"})).await;
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", pool.log());
    let ran = &done["result"]["value"];
    assert_eq!(ran["env"], "API_URL=http://local", "{ran}");
    assert_eq!(ran["link"], "yes", "{ran}");
    assert_eq!(ran["setup_ran"], "ready", "{ran}");
    let port: u16 = ran["port"].as_str().unwrap().parse().unwrap();
    assert!((47340..=47349).contains(&port), "{ran}");
    assert_ne!(ran["port1"], ran["port"], "{ran}");
    let notes = setup_notes(&sw, &task).await;
    assert!(notes.iter().any(|n| n == "pool setup"), "{notes:?}");
    assert!(notes.last().unwrap().starts_with("done in "), "{notes:?}");
}
