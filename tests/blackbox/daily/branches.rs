//! The branches coding tasks leave, acted on with the real binary and real
//! git: a task's branch is named after its short id and prompt and swarmd's
//! commit on it carries the prompt and the task; `branch list` shows it,
//! `branch show` prints its diff; `branch apply --into` a new branch makes
//! it at the task's head and leaves the checked-out branch and the working
//! tree as they were, while applying into the checked-out branch is refused
//! unless asked; a conflicting apply answers 409 naming the file and
//! changes nothing; `branch prune --dry-run` lists and `prune` deletes what
//! the base holds, both keeping (and saying why) a branch another worktree
//! has checked out; a merge task's branches (its own, a conflict's work
//! branch, a name it was given) are listed, shown and applied the same way,
//! a merge stopped at a conflict is not applied, and prune leaves a name the
//! task was given; the MCP tools `branches`, `diff` and `apply` answer; and
//! continuing a passed task whose worktree directory is gone starts from
//! its readable branch.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use tokio::process::Command;

use crate::daemon::Swarmd;
use crate::harness::parts;
use crate::mcp::{Via, call, tool_error};
use crate::worktrees::{git, make_repo};

const BINARY: &str = env!("CARGO_BIN_EXE_swarmd");

/// `coder` appends a line naming its task to `notes.txt`, or with a prompt
/// containing `clash` rewrites its first line; it commits nothing itself
/// (swarmd commits either). The dashboard's branch view uses it too
/// (`daemon`, `passed`).
const AGENTS: &str = r#"
[agents.coder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
prompt=$(cat)
case "$prompt" in
  *clash*) printf 'worker line\nworker two\n' > notes.txt ;;
  *slowly*) sleep 30 ;;
  *) echo "added by $SWARM_TASK_ID" >> notes.txt ;;
esac
echo '{"done": true}'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }
"#;

/// A daemon with `coder` on a fresh repository; the repository's path.
pub(crate) async fn daemon() -> (Swarmd, std::path::PathBuf) {
    let sw = Swarmd::new(AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    (sw.start().await, repo)
}

/// A passed task of `coder` with `prompt`; its id.
pub(crate) async fn passed(sw: &Swarmd, prompt: &str) -> String {
    let (status, body) = sw
        .create(json!({"agent": "coder", "prompt": prompt, "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["task_id"].as_str().unwrap().to_owned();
    let done = sw.finished(&id).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    id
}

/// `swarmd branch <args>` against the daemon, from an empty directory.
async fn branch(sw: &Swarmd, args: &[&str]) -> Output {
    let cwd = tempfile::tempdir().unwrap();
    Command::new(BINARY)
        .arg("branch")
        .args(args)
        .args(["--url", &sw.base, "--token", &sw.admin])
        .current_dir(cwd.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .await
        .unwrap()
}

/// `branch` that must succeed; its stdout.
async fn branch_ok(sw: &Swarmd, args: &[&str]) -> String {
    let out = branch(sw, args).await;
    assert!(
        out.status.success(),
        "swarmd branch {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn apply(sw: &Swarmd, task: &str, body: Value) -> (u16, Value) {
    let path = format!("/v1/tasks/{task}/apply");
    parts(sw.post(&path, &sw.admin).json(&body).send().await.unwrap()).await
}

/// What a user's repository looks like: branch heads, status, a file.
fn snapshot(repo: &Path) -> (String, String, String, String) {
    (
        git(repo, &["rev-parse", "--abbrev-ref", "HEAD"]),
        git(repo, &["rev-parse", "main"]),
        git(repo, &["status", "--porcelain", "--untracked-files=all"]),
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
    )
}

#[tokio::test]
async fn a_task_branch_is_readable_listed_shown_applied_and_pruned() {
    let (sw, repo) = daemon().await;
    let task = passed(&sw, "Fix the login bug!\nAnd say why.").await;
    let short = &task[task.len() - 8..];
    let name = format!("swarmd/t-{short}-fix-the-login-bug/1");

    // The name, and swarmd's commit of the worker's leftovers.
    let head = git(&repo, &["rev-parse", &name]);
    let message = git(&repo, &["log", "-1", "--format=%B", &name]);
    assert!(message.starts_with("Fix the login bug!\n"), "{message}");
    assert!(
        message.contains(&format!("Swarmd-Task: {task}")),
        "{message}"
    );
    assert!(message.contains("Swarmd-Attempt: 1"), "{message}");

    // Listed as a table and as JSON.
    let table = branch_ok(&sw, &["list"]).await;
    let row = table
        .lines()
        .find(|l| l.contains(&name))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains(short) && row.contains("pass") && row.contains("Fix the login bug!"),
        "{row}"
    );
    // `--wide` shows the id `show` and `apply` take.
    let wide = branch_ok(&sw, &["list", "--wide"]).await;
    assert!(
        wide.lines()
            .any(|l| l.contains(&name) && l.contains(task.as_str())),
        "{wide}"
    );
    assert!(!table.contains(task.as_str()), "{table}");
    let listed: Value =
        serde_json::from_str(&branch_ok(&sw, &["list", "--agent", "coder", "-o", "json"]).await)
            .unwrap();
    let entry = &listed["branches"][0];
    assert_eq!(entry["name"], name.as_str(), "{listed}");
    assert_eq!(entry["task_id"], task.as_str());
    assert_eq!(
        (entry["ahead"].as_u64(), entry["merged"].as_bool()),
        (Some(1), Some(false))
    );
    assert_eq!(entry["head"], head.as_str());

    // `show` prints the diff.
    let diff = branch_ok(&sw, &["show", &task]).await;
    assert!(
        diff.starts_with("diff --git a/notes.txt b/notes.txt"),
        "{diff}"
    );
    assert!(diff.contains(&format!("+added by {task}")), "{diff}");

    // Into a new branch: made at the task's head; the user's checkout,
    // untracked file included, is as it was.
    std::fs::write(repo.join("mine.txt"), "the user's own\n").unwrap();
    let before = snapshot(&repo);
    let applied = branch_ok(&sw, &["apply", &task, "--into", "feature/login"]).await;
    assert!(
        applied.starts_with(&format!("created: {name} into feature/login")),
        "{applied}"
    );
    assert_eq!(git(&repo, &["rev-parse", "feature/login"]), head);
    assert_eq!(snapshot(&repo), before);

    // Into the checked-out `main`: refused unless asked.
    let (status, body) = apply(&sw, &task, json!({"into": "main"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("branch_conflict")),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap().contains("checked out"),
        "{body}"
    );
    let out = branch(&sw, &["apply", &task, "--into", "main"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(snapshot(&repo), before);

    // A conflicting apply names the file and changes nothing.
    let clash = passed(&sw, "clash with main").await;
    let (status, body) = apply(&sw, &clash, json!({"into": "feature/login"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("branch_conflict")),
        "{body}"
    );
    assert_eq!(body["files"], json!(["notes.txt"]), "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("notes.txt"),
        "{body}"
    );
    assert_eq!(git(&repo, &["rev-parse", "feature/login"]), head);
    assert_eq!(snapshot(&repo), before);

    // The user merges the first by hand: prune lists it dry, then deletes it.
    git(&repo, &["merge", "--ff-only", "-q", &name]);
    let dry: Value =
        serde_json::from_str(&branch_ok(&sw, &["prune", "--dry-run", "-o", "json"]).await).unwrap();
    let names: Vec<&str> = dry["pruned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [name.as_str()], "{dry}");
    assert_eq!(git(&repo, &["rev-parse", &name]), head, "a dry run deleted");
    branch_ok(&sw, &["prune"]).await;
    assert_eq!(git(&repo, &["branch", "--list", &name]), "");
    let left: Value = serde_json::from_str(&branch_ok(&sw, &["list", "-o", "json"]).await).unwrap();
    assert_eq!(left["branches"].as_array().unwrap().len(), 1, "{left}");
    assert_eq!(left["branches"][0]["task_id"], clash.as_str());
}

#[tokio::test]
async fn a_dry_prune_keeps_what_prune_keeps_a_branch_in_a_worktree() {
    let (sw, repo) = daemon().await;
    let task = passed(&sw, "Add a note").await;
    let short = &task[task.len() - 8..];
    let name = format!("swarmd/t-{short}-add-a-note/1");
    git(&repo, &["merge", "--ff-only", "-q", &name]);
    // The merged branch checked out in a worktree of its own (as a kept
    // attempt's worktree is): git will not delete it, so neither run
    // lists it as deleted, and both say where it is checked out.
    let elsewhere = tempfile::tempdir().unwrap();
    let dir = elsewhere.path().join("kept");
    git(
        &repo,
        &["worktree", "add", "-q", dir.to_str().unwrap(), &name],
    );
    for args in [
        &["prune", "--dry-run", "-o", "json"][..],
        &["prune", "-o", "json"],
    ] {
        let ran: Value = serde_json::from_str(&branch_ok(&sw, args).await).unwrap();
        assert_eq!(ran["pruned"], json!([]), "{args:?}: {ran}");
        assert_eq!(ran["kept"][0]["name"], name.as_str(), "{args:?}: {ran}");
        let reason = ran["kept"][0]["reason"].as_str().unwrap();
        assert!(
            reason.contains(dir.to_str().unwrap()) && reason.contains("git worktree remove"),
            "{args:?}: {reason}"
        );
    }
    git(&repo, &["worktree", "remove", dir.to_str().unwrap()]);
    let dry: Value =
        serde_json::from_str(&branch_ok(&sw, &["prune", "--dry-run", "-o", "json"]).await).unwrap();
    assert_eq!(dry["pruned"][0]["name"], name.as_str(), "{dry}");
    assert_eq!(dry["kept"], json!([]), "{dry}");
}

#[tokio::test]
async fn a_running_tasks_branch_is_not_applied_and_says_why() {
    let (sw, _repo) = daemon().await;
    let (status, body) = sw
        .create(json!({"agent": "coder", "prompt": "work slowly"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let task = body["task_id"].as_str().unwrap().to_owned();
    let (status, body) = apply(&sw, &task, json!({"into": "feature/x"})).await;
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("task_not_finished")),
        "{body}"
    );
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("only a finished task's branch can be applied"),
        "{error}"
    );
}

#[tokio::test]
async fn the_branch_tools_answer_over_mcp() {
    let (sw, repo) = daemon().await;
    let task = passed(&sw, "Add a line").await;
    let clash = passed(&sw, "clash").await;
    let admin = sw.admin.clone();

    let listed = call(
        &sw,
        Via::Http,
        &admin,
        "branches",
        json!({"agent": "coder"}),
    )
    .await;
    assert_eq!(listed["is_error"], false, "{listed}");
    let branches = listed["structured"]["branches"].as_array().unwrap();
    assert_eq!(branches.len(), 2, "{listed}");
    assert!(
        branches
            .iter()
            .all(|b| b["name"].as_str().unwrap().starts_with("swarmd/t-"))
    );

    let diff = call(&sw, Via::Http, &admin, "diff", json!({"task_id": task})).await;
    assert_eq!(diff["structured"]["files"], json!(["notes.txt"]), "{diff}");
    assert!(
        diff["structured"]["diff"]
            .as_str()
            .unwrap()
            .contains(&format!("+added by {task}"))
    );

    let applied = call(
        &sw,
        Via::Http,
        &admin,
        "apply",
        json!({"task_id": task, "into": "from-mcp"}),
    )
    .await;
    assert_eq!(applied["structured"]["outcome"], "created", "{applied}");
    let branch = applied["structured"]["branch"].as_str().unwrap();
    assert_eq!(
        git(&repo, &["rev-parse", "from-mcp"]),
        git(&repo, &["rev-parse", branch])
    );

    let refused = call(
        &sw,
        Via::Http,
        &admin,
        "apply",
        json!({"task_id": clash, "into": "from-mcp"}),
    )
    .await;
    let error = tool_error(&refused);
    assert_eq!(error["code"], "branch_conflict", "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("notes.txt"),
        "{error}"
    );
}

#[tokio::test]
async fn continuing_passed_work_starts_from_its_readable_branch_with_its_directory_gone() {
    let (sw, repo) = daemon().await;
    let first = passed(&sw, "Write the first line").await;
    let short = &first[first.len() - 8..];
    let name = format!("swarmd/t-{short}-write-the-first-line/1");
    let head = git(&repo, &["rev-parse", &name]);
    // `keep` is `never`: the passed attempt's directory is gone, its branch stays.
    assert!(!sw.dir().join(format!("state/worktrees/{first}-1")).exists());

    let (status, body) = sw
        .create(json!({"continue_from": first, "prompt": "Then a second", "policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(status, 201, "{body}");
    let second = body["task_id"].as_str().unwrap().to_owned();
    let done = sw.finished(&second).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    let diff = branch_ok(&sw, &["show", &second, "-o", "json"]).await;
    let diff: Value = serde_json::from_str(&diff).unwrap();
    assert_eq!(diff["base"], head.as_str(), "{diff}");
    let short = &second[second.len() - 8..];
    assert_eq!(
        diff["branch"],
        format!("swarmd/t-{short}-then-a-second/1").as_str()
    );
    let notes = git(
        &repo,
        &[
            "show",
            &format!("{}:notes.txt", diff["branch"].as_str().unwrap()),
        ],
    );
    assert_eq!(notes, format!("first\nadded by {first}\nadded by {second}"));
}

/// `adder` writes its prompt's first word, then a line of the rest, to
/// `<word>.txt` and commits nothing itself; `merge` merges from `main`.
const MERGE_AGENTS: &str = r#"
[agents.adder]
kind = "process"
program = "/bin/sh"
args = ["-c", """
read -r word rest
echo "$rest" > "$word.txt"
echo '"done"'
"""]
env = { PATH = "/usr/local/bin:/usr/bin:/bin" }
worktree = { repo = "@DIR@/repo", base = "main" }

[agents.merge]
kind = "merge"
repo = "@DIR@/repo"
base = "main"
"#;

/// A daemon with `adder` and `merge` on a fresh repository; the
/// repository's path.
pub(crate) async fn merge_daemon() -> (Swarmd, std::path::PathBuf) {
    let sw = Swarmd::new(MERGE_AGENTS).env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let repo = make_repo(sw.dir());
    (sw.start().await, repo)
}

/// A passed task of `agent` given `body`'s rest; its id and result.
pub(crate) async fn passed_of(sw: &Swarmd, agent: &str, body: Value) -> (String, Value) {
    let mut body = body;
    body["agent"] = json!(agent);
    body["policy"] = json!({"max_attempts": 1});
    let (status, made) = sw.create(body).await;
    assert_eq!(status, 201, "{made}");
    let id = made["task_id"].as_str().unwrap().to_owned();
    let done = sw.finished(&id).await;
    assert_eq!(done["status"], "pass", "{done}\n{}", sw.log());
    (id, done["result"].clone())
}

/// The sorted `name`s of the branches in `answer[key]`.
fn names(answer: &Value, key: &str) -> Vec<String> {
    let mut names: Vec<String> = answer[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {answer}"))
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort_unstable();
    names
}

/// The branch of `adder`'s passed task for `prompt`.
pub(crate) async fn added(sw: &Swarmd, repo: &Path, prompt: &str) -> String {
    let (task, _) = passed_of(sw, "adder", json!({"prompt": prompt})).await;
    let short = &task[task.len() - 8..];
    let name = git(
        repo,
        &[
            "for-each-ref",
            "--format=%(refname:lstrip=2)",
            "refs/heads/swarmd/",
        ],
    );
    name.lines()
        .find(|n| n.starts_with(&format!("swarmd/t-{short}")))
        .unwrap_or_else(|| panic!("no branch of {task} in {name}"))
        .to_owned()
}

/// `adder`'s branches of `alpha.txt` and `beta.txt`, and the passed merge
/// task of both: the branches, the merge's id and its result.
pub(crate) async fn merged_two(sw: &Swarmd, repo: &Path) -> (String, String, String, Value) {
    let alpha = added(sw, repo, "alpha first line").await;
    let beta = added(sw, repo, "beta second line").await;
    let (merge, record) = passed_of(
        sw,
        "merge",
        json!({"prompt": "merge both", "input": {"branches": [alpha, beta]}}),
    )
    .await;
    (alpha, beta, merge, record)
}

#[tokio::test]
async fn a_merge_tasks_branch_is_listed_shown_applied_and_pruned() {
    let (sw, repo) = merge_daemon().await;
    let (alpha, beta, merge, record) = merged_two(&sw, &repo).await;
    let short = &merge[merge.len() - 8..];
    let name = format!("swarmd/merge-{short}");
    assert_eq!(record["value"]["branch"], name.as_str(), "{record}");
    let head = git(&repo, &["rev-parse", &name]);

    // Listed with the attempts' branches, and alone for the merge agent.
    let table = branch_ok(&sw, &["list"]).await;
    assert!(
        table.lines().any(|l| l.contains(&name)
            && l.contains(short)
            && l.contains("sequence merge of 2 branches")),
        "{table}"
    );
    assert!(table.contains(&alpha) && table.contains(&beta), "{table}");
    let listed: Value =
        serde_json::from_str(&branch_ok(&sw, &["list", "--agent", "merge", "-o", "json"]).await)
            .unwrap();
    let rows = listed["branches"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(
        (rows[0]["name"].as_str(), rows[0]["task_id"].as_str()),
        (Some(name.as_str()), Some(merge.as_str()))
    );
    assert_eq!(rows[0]["head"], head.as_str());
    assert_eq!(rows[0]["merged"], false);
    assert!(rows[0]["ahead"].as_u64().unwrap() >= 2, "{listed}");

    // `show` is the diff from the merge's base to its head.
    let diff = branch_ok(&sw, &["show", short]).await;
    assert!(
        diff.contains("+++ b/alpha.txt") && diff.contains("+first line"),
        "{diff}"
    );
    assert!(
        diff.contains("+++ b/beta.txt") && diff.contains("+second line"),
        "{diff}"
    );

    // Applied into a new branch: made at the merge's head.
    let applied = branch_ok(&sw, &["apply", short, "--into", "release/next"]).await;
    assert!(
        applied.starts_with(&format!("created: {name} into release/next")),
        "{applied}"
    );
    assert_eq!(git(&repo, &["rev-parse", "release/next"]), head);

    // A merge given its own name is listed under it.
    let (named, _) = passed_of(
        &sw,
        "merge",
        json!({"prompt": "merge named", "input": {"branches": [alpha], "into": "team/merged"}}),
    )
    .await;
    // Once moved, it is not applied: it no longer holds what `show` shows.
    git(&repo, &["branch", "-f", "team/merged", "main"]);
    let (status, body) = apply(&sw, &named, json!({"into": "release/named"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("branch_conflict")),
        "{body}"
    );
    assert!(
        body["error"].as_str().unwrap().contains("has moved"),
        "{body}"
    );

    // A merge may not be given a name under swarmd/, such as another
    // task's branch (kept, being at the head the merge makes, it would
    // pass for the merge's own): the task fails, saying why.
    let (status, made) = sw
        .create(
            json!({"agent": "merge", "prompt": "squat", "policy": {"max_attempts": 1},
            "input": {"branches": [name], "strategy": "pick", "pick": 0, "into": name}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let squatter = sw.finished(made["task_id"].as_str().unwrap()).await;
    assert_eq!(squatter["status"], "failed", "{squatter}");
    assert!(
        squatter["reason"]
            .as_str()
            .unwrap()
            .contains("under swarmd/"),
        "{squatter}"
    );

    // A merge that stopped at a conflict is not applied; its work branch
    // is listed with it.
    let one = added(&sw, &repo, "clash one side").await;
    let two = added(&sw, &repo, "clash other side").await;
    let (stopped, record) = passed_of(
        &sw,
        "merge",
        json!({"prompt": "merge clash", "input": {"branches": [one, two]}}),
    )
    .await;
    assert_eq!(record["value"]["conflict"]["files"], json!(["clash.txt"]));
    let (status, body) = apply(&sw, &stopped, json!({"into": "release/clash"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("branch_conflict")),
        "{body}"
    );
    assert_eq!(body["files"], json!(["clash.txt"]), "{body}");
    assert_eq!(git(&repo, &["branch", "--list", "release/clash"]), "");
    let listed: Value =
        serde_json::from_str(&branch_ok(&sw, &["list", "--agent", "merge", "-o", "json"]).await)
            .unwrap();
    let stopped_short = &stopped[stopped.len() - 8..];
    let conflict_branch = format!("swarmd/merge-{stopped_short}-conflict");
    let stopped_branch = format!("swarmd/merge-{stopped_short}");
    let mut want = vec![
        name.as_str(),
        "team/merged",
        stopped_branch.as_str(),
        conflict_branch.as_str(),
    ];
    want.sort_unstable();
    assert_eq!(names(&listed, "branches"), want, "{listed}");

    // Once `main` holds the merge, prune deletes its branch, and only it.
    git(&repo, &["merge", "--ff-only", "-q", &name]);
    let pruned: Value =
        serde_json::from_str(&branch_ok(&sw, &["prune", "--agent", "merge", "-o", "json"]).await)
            .unwrap();
    assert_eq!(names(&pruned, "pruned"), [name.as_str()], "{pruned}");
    assert_eq!(git(&repo, &["branch", "--list", &name]), "");
    assert_eq!(git(&repo, &["rev-parse", &stopped_branch]).len(), 40);
    // Pruned by age: swarmd's names go, the name the task was given stays.
    let pruned: Value = serde_json::from_str(
        &branch_ok(
            &sw,
            &[
                "prune",
                "--agent",
                "merge",
                "--older-than",
                "0s",
                "-o",
                "json",
            ],
        )
        .await,
    )
    .unwrap();
    assert_eq!(
        names(&pruned, "pruned"),
        [stopped_branch.as_str(), conflict_branch.as_str()],
        "{pruned}"
    );
    let left: Value =
        serde_json::from_str(&branch_ok(&sw, &["list", "--agent", "merge", "-o", "json"]).await)
            .unwrap();
    assert_eq!(left["branches"].as_array().unwrap().len(), 1, "{left}");
    assert_eq!(left["branches"][0]["name"], "team/merged", "{left}");
    assert_eq!(left["branches"][0]["task_id"], named.as_str(), "{left}");
}
