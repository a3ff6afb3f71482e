//! Merges against real `git` in temporary repositories: each strategy,
//! conflicts, the fast-forward rule, refused names and existing branches,
//! and the spawner run by an engine.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use swarmd_engine::task::{TaskSpec, TaskStatus};

use super::apply::{MergeTask, Merger};
use super::*;
use crate::testing::git::{git, repo};
use swarmd_engine::testing::engine_running;

const TASK: &str = "T-0190f2a81b2c7d3e8f90a1b2c3d4e5f6";

fn host() -> HostEnv {
    HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")])
}

fn task() -> MergeTask {
    MergeTask {
        id: TASK.to_owned(),
        created_ms: 1_700_000_000_000,
    }
}

/// Branch `name` from `main` with one commit writing `file` as `text`;
/// `main` stays checked out.
fn branch(repo: &Path, name: &str, file: &str, text: &str) -> String {
    git(repo, &["checkout", "-q", "-b", name, "main"]);
    std::fs::write(repo.join(file), text).unwrap();
    git(repo, &["add", "-A"]);
    git(
        repo,
        &["commit", "-q", "-m", &format!("{name} writes {file}")],
    );
    git(repo, &["checkout", "-q", "main"]);
    git(repo, &["rev-parse", name])
}

async fn merge(spec: &MergeSpec, input: Value) -> Result<MergeRecord, MergeError> {
    let request = MergeRequest::parse(Some(&input), "", spec.max_branches)?;
    Merger::new(&host()).merge(spec, &request, &task()).await
}

/// The files of `rev`'s tree.
fn files(repo: &Path, rev: &str) -> Vec<String> {
    git(repo, &["ls-tree", "--name-only", rev])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn parents(repo: &Path, rev: &str) -> usize {
    git(repo, &["rev-list", "--parents", "-n", "1", rev])
        .split(' ')
        .count()
        - 1
}

#[tokio::test]
async fn sequence_merges_each_branch_in_order_into_a_new_branch() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let main = git(&repo, &["rev-parse", "main"]);
    let heads: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| branch(&repo, &format!("swarmd/t-0000000{n}/1"), n, n))
        .collect();
    let spec = MergeSpec::new(&repo);
    let record = merge(
        &spec,
        json!({"branches": ["swarmd/t-0000000a/1", "swarmd/t-0000000b/1", "swarmd/t-0000000c/1"]}),
    )
    .await
    .unwrap();
    assert_eq!(record.branch, "swarmd/merge-c3d4e5f6");
    assert_eq!(record.base, main);
    assert_eq!(record.strategy, "sequence");
    assert_eq!(record.conflict, None);
    let applied: Vec<&str> = record.applied.iter().map(|a| a.head.as_str()).collect();
    assert_eq!(applied, heads);
    assert_eq!(git(&repo, &["rev-parse", &record.branch]), record.head);
    assert_eq!(files(&repo, &record.head), ["a", "b", "c", "notes.txt"]);
    // A merge commit each, first parents back to the base.
    let chain = git(&repo, &["rev-list", "--first-parent", &record.head]);
    assert_eq!(chain.lines().count(), 4, "{chain}");
    assert_eq!(parents(&repo, &record.head), 2);
    let message = git(&repo, &["log", "-1", "--format=%an|%B", &record.head]);
    assert!(message.starts_with("swarmd|Merge swarmd/t-0000000c/1 into swarmd/merge-c3d4e5f6"));
    assert!(
        message.contains(&format!("Swarmd-Task: {TASK}")),
        "{message}"
    );
    // The base, the branches and the checkout are as they were.
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

#[tokio::test]
async fn a_conflict_stops_the_sequence_at_its_branch_and_names_the_files() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "one", "notes.txt", "one\n");
    branch(&repo, "two", "two", "two");
    branch(&repo, "three", "notes.txt", "three\n");
    branch(&repo, "four", "four", "four");
    let spec = MergeSpec::new(&repo);
    let record = merge(
        &spec,
        json!({"branches": ["one", "two", "three", "four"], "into": "merged"}),
    )
    .await
    .unwrap();
    let applied: Vec<&str> = record.applied.iter().map(|a| a.branch.as_str()).collect();
    assert_eq!(applied, ["one", "two"]);
    assert_eq!(
        record.summary,
        "sequence merge of 4 branches, stopped at a conflict with three after 2"
    );
    let conflict = record.conflict.clone().unwrap();
    let work = conflict.work_head.clone().unwrap();
    assert_eq!(
        conflict,
        Conflict {
            branch: "three".into(),
            files: vec!["notes.txt".into()],
            work_branch: Some("merged-conflict".into()),
            work_head: Some(work.clone()),
        }
    );
    // The new branch holds what went in.
    assert_eq!(git(&repo, &["rev-parse", "merged"]), record.head);
    assert_eq!(files(&repo, "merged"), ["notes.txt", "two"]);
    assert_eq!(git(&repo, &["show", "merged:notes.txt"]), "one");
    // The work branch holds the conflict: the result so far and the
    // conflicting branch as parents, the markers in the file.
    assert_eq!(git(&repo, &["rev-parse", "merged-conflict"]), work);
    let three = git(&repo, &["rev-parse", "three"]);
    assert_eq!(
        git(
            &repo,
            &["rev-parse", &format!("{work}^1"), &format!("{work}^2")]
        ),
        format!("{}\n{three}", record.head)
    );
    let marked = git(&repo, &["show", "merged-conflict:notes.txt"]);
    assert!(marked.starts_with("<<<<<<< "), "{marked}");
    assert!(marked.contains("one\n=======\nthree\n>>>>>>> "), "{marked}");
}

#[tokio::test]
async fn a_work_branch_that_cannot_be_made_leaves_nothing_made() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "one", "notes.txt", "one\n");
    branch(&repo, "three", "notes.txt", "three\n");
    git(&repo, &["branch", "merged-conflict", "one"]);
    let spec = MergeSpec::new(&repo);
    let error = merge(
        &spec,
        json!({"branches": ["one", "three"], "into": "merged"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, MergeError::BadInput(_)), "{error}");
    assert_eq!(git(&repo, &["branch", "--list", "merged"]), "");
    // `swarmd` itself, or a name under `swarmd/`, is swarmd's to name: it
    // could keep attempts' branches from being made, or be another task's.
    for into in [
        "swarmd",
        "swarmd/t-c3d4e5f6",
        "swarmd/merge-1a2b3c4d",
        "swarmd/x",
    ] {
        let error = merge(&spec, json!({"branches": ["one"], "into": into}))
            .await
            .unwrap_err();
        assert!(matches!(error, MergeError::BadInput(_)), "{into}: {error}");
    }
}

#[tokio::test]
async fn octopus_makes_one_commit_or_applies_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let main = git(&repo, &["rev-parse", "main"]);
    for n in ["a", "b", "c"] {
        branch(&repo, n, n, n);
    }
    let spec = MergeSpec::new(&repo);
    let record = merge(
        &spec,
        json!({"branches": ["a", "b", "c"], "strategy": "octopus", "into": "all"}),
    )
    .await
    .unwrap();
    assert_eq!(record.conflict, None);
    assert_eq!(record.applied.len(), 3);
    assert_eq!(record.summary, "octopus merge of 3 branches");
    assert_eq!(parents(&repo, &record.head), 4);
    assert_eq!(
        git(&repo, &["rev-parse", &format!("{}^1", record.head)]),
        main
    );
    assert_eq!(files(&repo, "all"), ["a", "b", "c", "notes.txt"]);

    branch(&repo, "x", "notes.txt", "x\n");
    branch(&repo, "y", "notes.txt", "y\n");
    let record = merge(
        &spec,
        json!({"branches": ["a", "x", "y"], "strategy": "octopus", "into": "none"}),
    )
    .await
    .unwrap();
    assert!(record.applied.is_empty());
    assert_eq!(record.head, main);
    assert_eq!(
        record.summary,
        "octopus merge of 3 branches, none applied: a conflict with y"
    );
    assert_eq!(record.conflict.unwrap().branch, "y");
    assert_eq!(git(&repo, &["rev-parse", "none"]), main);
}

#[tokio::test]
async fn pick_takes_a_descendant_as_it_is_and_merges_any_other() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "a", "a", "a");
    let b = branch(&repo, "b", "b", "b");
    let spec = MergeSpec::new(&repo);
    let record = merge(
        &spec,
        json!({"branches": ["a", "b"], "strategy": "pick", "pick": "b", "into": "won"}),
    )
    .await
    .unwrap();
    assert_eq!(record.head, b);
    assert_eq!(record.applied[0].branch, "b");
    assert_eq!(record.summary, "pick 1 of 2 branches");
    assert_eq!(git(&repo, &["rev-parse", "won"]), b);

    // The base moved on: the pick is merged onto it.
    branch(&repo, "later", "later", "later");
    let later = git(&repo, &["rev-parse", "later"]);
    let record = merge(
        &spec,
        json!({"branches": ["a", "b"], "strategy": "pick", "pick": 0, "base": "later",
               "into": "won-later"}),
    )
    .await
    .unwrap();
    assert_eq!(record.base, later);
    assert_eq!(parents(&repo, &record.head), 2);
    assert_eq!(files(&repo, "won-later"), ["a", "later", "notes.txt"]);
}

#[tokio::test]
async fn fast_forward_moves_only_the_configured_branch_and_only_forward() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "a", "a", "a");
    git(&repo, &["branch", "release", "main"]);
    let mut spec = MergeSpec::new(&repo);
    let input = |into: &str, ff: bool| json!({"branches": ["a"], "into": into, "fast_forward": ff});

    // Without the agent's branch, asking is refused before anything is made.
    let error = merge(&spec, input("m0", true)).await.unwrap_err();
    assert!(matches!(error, MergeError::NoFastForwardBranch), "{error}");
    assert_eq!(git(&repo, &["branch", "--list", "m0"]), "");

    spec.fast_forward = Some("release".into());
    let record = merge(&spec, input("m1", false)).await.unwrap();
    assert_eq!(record.fast_forwarded, None);
    assert_eq!(
        git(&repo, &["rev-parse", "release"]),
        git(&repo, &["rev-parse", "main"])
    );
    let record = merge(&spec, input("m2", true)).await.unwrap();
    assert_eq!(record.fast_forwarded.as_deref(), Some("release"));
    assert_eq!(git(&repo, &["rev-parse", "release"]), record.head);

    // release has a commit the next result lacks: left where it is.
    branch(&repo, "hotfix", "hotfix", "hotfix");
    git(&repo, &["branch", "-f", "release", "hotfix"]);
    let record = merge(&spec, input("m3", true)).await.unwrap();
    assert_eq!(record.fast_forwarded, None);
    assert!(
        record
            .fast_forward_refused
            .as_deref()
            .is_some_and(|r| r.contains("cannot be fast-forwarded")),
        "{record:?}"
    );
    assert_eq!(
        git(&repo, &["rev-parse", "release"]),
        git(&repo, &["rev-parse", "hotfix"])
    );

    // A checked-out branch is never moved.
    spec.fast_forward = Some("main".into());
    let main = git(&repo, &["rev-parse", "main"]);
    let record = merge(&spec, input("m4", true)).await.unwrap();
    assert!(
        record
            .fast_forward_refused
            .as_deref()
            .is_some_and(|r| r.contains("checked out")),
        "{record:?}"
    );
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
}

#[tokio::test]
async fn unknown_and_bad_names_are_refused_and_nothing_is_made() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "a", "a", "a");
    git(&repo, &["tag", "v1", "a"]);
    let spec = MergeSpec::new(&repo);
    let error = merge(&spec, json!({"branches": ["a", "nope"], "into": "m"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MergeError::NoBranch(b) if b == "nope"),
        "{error}"
    );
    // A tag is not a branch.
    let error = merge(&spec, json!({"branches": ["v1"], "into": "m"}))
        .await
        .unwrap_err();
    assert!(matches!(error, MergeError::NoBranch(_)), "{error}");
    for name in ["a~1", "a.lock", "a:b", "HEAD"] {
        let error = merge(&spec, json!({"branches": [name], "into": "m"}))
            .await
            .unwrap_err();
        assert!(matches!(error, MergeError::BadName(_)), "{name}: {error}");
    }
    let error = merge(
        &spec,
        json!({"branches": ["a"], "into": "swarmd/t-c3d4e5f6/1"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, MergeError::BadInput(_)), "{error}");
    let error = merge(
        &spec,
        json!({"branches": ["a"], "base": "nope", "into": "m"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, MergeError::UnknownBase(_)), "{error}");
    assert_eq!(git(&repo, &["branch", "--list", "m"]), "");
}

#[tokio::test]
async fn an_existing_branch_is_refused_unless_a_retry_made_it_at_the_same_head() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "a", "a", "a");
    branch(&repo, "b", "b", "b");
    let spec = MergeSpec::new(&repo);
    let input = json!({"branches": ["a", "b"], "into": "merged"});
    let first = merge(&spec, input.clone()).await.unwrap();
    // The same task again (a retry) makes the same commits.
    let again = merge(&spec, input).await.unwrap();
    assert_eq!(again.head, first.head);
    // Anything else finds the branch taken, and leaves it.
    let error = merge(&spec, json!({"branches": ["b", "a"], "into": "merged"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MergeError::Exists { into, .. } if into == "merged"),
        "{error}"
    );
    assert_eq!(git(&repo, &["rev-parse", "merged"]), first.head);
}

#[tokio::test]
async fn the_spawner_passes_with_the_record_or_fails_with_the_reason() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    branch(&repo, "a", "notes.txt", "a\n");
    branch(&repo, "b", "notes.txt", "b\n");
    let spawner = MergeSpawner::new(MergeSpec::new(&repo), &host());
    let engine = engine_running("merge", Arc::new(spawner));
    let run = |input: Value| {
        let engine = engine.clone();
        async move {
            let spec = TaskSpec {
                agent: "merge".to_owned(),
                prompt: "merge".to_owned(),
                input: Some(input),
                ..TaskSpec::default()
            };
            let task = engine.create_task(spec).await.unwrap();
            engine
                .wait_task(task.id, Duration::from_secs(60))
                .await
                .unwrap()
        }
    };
    // A conflict passes, naming it.
    let task = run(json!({"branches": ["a", "b"], "into": "m"})).await;
    assert_eq!(task.status(), TaskStatus::Pass, "{:?}", task.reason);
    let value = task.result.unwrap().value;
    assert_eq!(value["branch"], "m");
    assert_eq!(value["applied"][0]["branch"], "a");
    assert_eq!(value["conflict"]["branch"], "b");
    assert_eq!(value["conflict"]["files"], json!(["notes.txt"]));
    assert_eq!(value["fast_forwarded"], Value::Null);

    let task = run(json!({"branches": ["a", "-b"]})).await;
    assert_eq!(task.status(), TaskStatus::Failed);
    let reason = task.reason.unwrap_or_default();
    assert!(
        reason.contains("merge: `-b` is not a branch name"),
        "{reason}"
    );
}

#[test]
fn a_summary_says_how_many_branches_were_given_and_where_it_stopped() {
    use super::apply::summary;
    assert_eq!(summary(Strategy::Pick, 5, 1, None), "pick 1 of 5 branches");
    assert_eq!(
        summary(Strategy::Pick, 1, 0, Some("a")),
        "pick 1 of 1 branch, stopped at a conflict with a"
    );
    assert_eq!(
        summary(Strategy::Sequence, 3, 1, Some("b")),
        "sequence merge of 3 branches, stopped at a conflict with b after 1"
    );
    assert_eq!(
        summary(Strategy::Sequence, 1, 1, None),
        "sequence merge of 1 branch"
    );
}
