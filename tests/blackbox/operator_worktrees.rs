//! Worktrees of operator agents (docs/tasks.md, Worktrees) with the real
//! binary, a MainAI on the real socket and real `git`: the `spawn` frame
//! and its directive name the attempt's checkout, the SubAgent works and
//! commits there and submits with its handle, and the attempt's `worktree`
//! artifact lists what it changed; a cancelled operator attempt has its
//! worktree concluded all the same; and a SubAgent that outlives a kill -9
//! finds its checkout again, on its branch, once recovery recorded it;
//! `check-config` checks an operator agent's `repo` as a process agent's;
//! and the upstream client `mse` takes such a `spawn` as it is.

use std::path::Path;

use serde_json::{Value, json};

use crate::daemon::{Login, Swarmd, Ws, eventually};
use crate::harness::parts;
use crate::worktrees::{
    git, make_repo, recorded_artifact, recorded_branch, refused, worktrees_dir,
};

const AGENTS: &str = r#"
[agents.coder]
kind = "operator"
operator_role = "main-ai"
worker_binding = { subagent_type = "general-purpose", tools = ["Read", "Edit", "Bash"] }
worktree = { repo = "@DIR@/repo", base = "main" }
"#;

/// A daemon with `coder`, a MainAI holding `main-ai` on its socket, and a
/// task of `coder` whose `spawn` frame has arrived.
async fn spawned() -> (Swarmd, Login, Ws, String, Value) {
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    make_repo(sw.dir());
    let sw = sw.start().await;
    let login = sw.login(json!({"roles": ["main-ai"]})).await;
    let mut ws = sw.connect(&login).await;
    let (status, created) = sw
        .create(json!({"agent": "coder", "prompt": "add a feature", "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{created}");
    let task = created["task_id"].as_str().unwrap().to_owned();
    let spawn = ws.recv_type("spawn").await;
    assert_eq!(spawn["task_id"], task.as_str(), "{spawn}");
    (sw, login, ws, task, spawn)
}

/// What the SubAgent does in its worktree: a new file it commits, and a
/// change it leaves uncommitted.
fn work_in(dir: &Path) {
    std::fs::write(dir.join("feature.txt"), "the feature\n").unwrap();
    git(dir, &["add", "feature.txt"]);
    git(dir, &["commit", "-q", "-m", "the SubAgent's commit"]);
    std::fs::write(dir.join("notes.txt"), "first\nand a note\n").unwrap();
}

#[tokio::test]
async fn the_subagent_works_in_the_worktree_its_spawn_frame_names() {
    let (sw, _login, _ws, task, spawn) = spawned().await;
    let repo = sw.dir().join("repo");
    let base = git(&repo, &["rev-parse", "main"]);
    let dir = worktrees_dir(&sw).join(format!("{task}-1"));
    let branch = recorded_branch(&spawn["worktree"], &task);
    assert_eq!(
        spawn["worktree"],
        json!({"path": dir.display().to_string(), "branch": branch, "base": base}),
        "{spawn}"
    );
    let directive = spawn["directive"].as_str().unwrap();
    assert!(
        directive.contains(&format!("make {} its working directory", dir.display()))
            && directive.contains(&format!("on the branch {branch}")),
        "{directive}"
    );
    assert!(
        dir.is_dir(),
        "the checkout exists before the frame goes out"
    );
    assert_eq!(git(&dir, &["rev-parse", "--abbrev-ref", "HEAD"]), branch);

    work_in(&dir);
    let handle = spawn["worker_handle"].as_str().unwrap();
    let base_url = spawn["base_url"].as_str().unwrap();
    let (status, body) = parts(
        reqwest::Client::new()
            .post(format!("{base_url}/v1/worker/submit?task_id={task}"))
            .bearer_auth(handle)
            .json(&json!({"summary": "added feature.txt"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(status == 200 || status == 204, "{status} {body}");
    let done = sw.finished(&task).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());

    let value = recorded_artifact(&sw, &task).await;
    assert_eq!(value["branch"], branch.as_str(), "{value}");
    assert_eq!(value["base"], base.as_str(), "{value}");
    assert_eq!(value["head"], git(&repo, &["rev-parse", &branch]).as_str());
    assert_eq!(
        value["files"],
        json!(["feature.txt", "notes.txt"]),
        "{value}"
    );
    assert_eq!(value["committed_leftovers"], true, "{value}");
    assert!(
        value["diff"].as_str().unwrap().contains("+the feature"),
        "{value}"
    );
    // The SubAgent's own commit is on the branch, under swarmd's, whose
    // subject is the prompt's first line and whose trailers name the task.
    let log = git(&repo, &["log", "--format=%s", &format!("main..{branch}")]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["add a feature", "the SubAgent's commit"]
    );
    let trailers = git(
        &repo,
        &["log", "-1", "--format=%(trailers:only,unfold)", &branch],
    );
    assert_eq!(
        trailers.lines().collect::<Vec<_>>(),
        [format!("Swarmd-Task: {task}").as_str(), "Swarmd-Attempt: 1"]
    );
    let author = git(&repo, &["log", "-1", "--format=%an", &branch]);
    assert_eq!(author, "swarmd");
    eventually("the worktree to be removed", || !dir.exists()).await;
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn a_cancelled_operator_attempt_has_its_worktree_concluded() {
    let (sw, _login, mut ws, task, spawn) = spawned().await;
    let repo = sw.dir().join("repo");
    let dir = std::path::PathBuf::from(spawn["worktree"]["path"].as_str().unwrap());
    let branch = recorded_branch(&spawn["worktree"], &task);
    std::fs::write(dir.join("half.txt"), "half done\n").unwrap();

    let (status, body) = parts(
        sw.post(&format!("/v1/tasks/{task}/cancel"), &sw.admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let cancel = ws.recv_type("cancel").await;
    assert_eq!(cancel["req_id"], spawn["req_id"], "{cancel}");
    assert_eq!(sw.finished(&task).await["status"], "cancelled");

    let value = recorded_artifact(&sw, &task).await;
    assert_eq!(value["branch"], branch.as_str(), "{value}");
    assert_eq!(value["files"], json!(["half.txt"]), "{value}");
    assert_eq!(value["committed_leftovers"], true, "{value}");
    assert_eq!(value["head"], git(&repo, &["rev-parse", &branch]).as_str());
    eventually("the worktree to be removed", || !dir.exists()).await;
    assert_eq!(sw.task(&task).await["status"], "cancelled");
}

/// Every `worktree` artifact of the task, oldest first.
async fn artifacts(sw: &Swarmd, task: &str) -> Vec<Value> {
    sw.output(task)
        .await
        .into_iter()
        .filter(|r| r["event"]["type"] == "artifact" && r["event"]["name"] == "worktree")
        .map(|r| r["event"]["content"]["value"].clone())
        .collect()
}

#[tokio::test]
async fn a_subagent_outliving_a_kill_9_finds_its_worktree_again() {
    let (mut sw, login, ws, task, spawn) = spawned().await;
    let repo = sw.dir().join("repo");
    let dir = std::path::PathBuf::from(spawn["worktree"]["path"].as_str().unwrap());
    let branch = recorded_branch(&spawn["worktree"], &task);
    std::fs::write(dir.join("half.txt"), "before the crash\n").unwrap();
    drop(ws);
    sw.kill9().await;
    sw.restart().await;

    // Recovery committed what the checkout held and recorded it.
    let value = recorded_artifact(&sw, &task).await;
    assert_eq!(value["branch"], branch.as_str(), "{value}");
    assert_eq!(value["files"], json!(["half.txt"]), "{value}");
    assert_eq!(value["committed_leftovers"], true, "{value}");

    // The attempt is announced again, in the same checkout on its branch.
    let mut ws = sw.connect(&login).await;
    let again = ws.recv_type("spawn").await;
    assert_eq!(again["task_id"], task.as_str(), "{again}");
    assert_eq!(again["worktree"], spawn["worktree"], "{again}");
    assert_eq!(git(&dir, &["rev-parse", "--abbrev-ref", "HEAD"]), branch);
    assert_eq!(
        std::fs::read_to_string(dir.join("half.txt")).unwrap(),
        "before the crash\n"
    );

    std::fs::write(dir.join("more.txt"), "after the restart\n").unwrap();
    let handle = again["worker_handle"].as_str().unwrap();
    let (status, body) = parts(
        reqwest::Client::new()
            .post(sw.url(&format!("/v1/worker/submit?task_id={task}")))
            .bearer_auth(handle)
            .json(&json!("done"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(status == 200 || status == 204, "{status} {body}");
    assert_eq!(sw.finished(&task).await["status"], "pass", "{}", sw.log());
    let mut all = Vec::new();
    for _ in 0..200 {
        all = artifacts(&sw, &task).await;
        if all.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[1]["files"], json!(["half.txt", "more.txt"]), "{all:#?}");
    assert_eq!(all[1]["head"], git(&repo, &["rev-parse", &branch]).as_str());
    eventually("the worktree to be removed", || !dir.exists()).await;
}

#[tokio::test]
async fn check_config_refuses_an_operator_agent_s_repo_that_is_not_a_git_repository() {
    let stderr = refused(&AGENTS.replace("@DIR@/repo", "@DIR@/plain")).await;
    assert!(
        stderr.contains("agent `coder`") && stderr.contains("is not a git repository"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_upstream_client_takes_a_spawn_with_its_worktree_named_as_on_disk() {
    let config = r#"
[auth]
loopback_login = true

[agents.helper]
kind = "operator"
description = "Any MainAI's SubAgent"
worktree = { repo = "@DIR@/repo", base = "main" }
"#;
    let sw = Swarmd::new(config).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    make_repo(sw.dir());
    let mut sw = sw.start().await;
    let seen = crate::mse::run(&mut sw, "delegated").await;

    let task = seen["created"]["body"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let step = format!("ST-{}", task.strip_prefix("T-").unwrap());
    let payload = &seen["frame"]["payload"];
    assert_eq!(payload["task_id"], step.as_str(), "{payload}");
    let path = worktrees_dir(&sw).join(format!("{task}-1"));
    let path = path.display().to_string();
    let branch = recorded_branch(&payload["worktree"], &task);
    assert_eq!(payload["worktree"]["path"], path.as_str(), "{payload}");
    let directive = payload["directive"].as_str().unwrap();
    assert!(
        directive.contains(&format!("task_id: {step}"))
            && directive.contains(&format!("make {path} its working directory"))
            && directive.contains(&format!("on the branch {branch}")),
        "{directive}"
    );
    assert_eq!(seen["done"]["body"]["status"], "pass", "{seen:#}");
    // The SubAgent changed nothing: the artifact says so, and no branch is left.
    let value = recorded_artifact(&sw, &task).await;
    assert_eq!(value["branch"], branch.as_str(), "{value}");
    assert_eq!(value["files"], json!([]), "{value}");
    assert_eq!(value["committed_leftovers"], false, "{value}");
    let repo = sw.dir().join("repo");
    eventually("the empty branch to be deleted", || {
        git(&repo, &["branch", "--list", &branch]).is_empty()
    })
    .await;
}
