//! Branches against real `git`: a told prompt names the branch and
//! swarmd's commit; listing, applying (create, fast-forward, merge,
//! conflict, checked out) and deleting.

use std::sync::Arc;

use super::*;
use crate::testing::git::{git, repo};
use crate::worktree::{KeepRule, WorktreeSpec};

fn host() -> HostEnv {
    HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")])
}

const TASK: &str = "T-0190f2a81b2c7d3e8f90a1b2c3d4e5f6";

/// A passed attempt of `TASK` that changed `notes.txt` to `text`, left
/// uncommitted; its branch.
async fn attempt_branch(trees: &Worktrees, repo: &Path, text: &str) -> String {
    trees.name_task(TASK, "Fix the login bug\nin detail");
    let spec = WorktreeSpec {
        repo: repo.to_owned(),
        base: "main".into(),
        keep: KeepRule::Never,
        bootstrap: Default::default(),
    };
    let checkout = trees.create(&spec, TASK, 1).await.unwrap();
    std::fs::write(checkout.dir.join("notes.txt"), text).unwrap();
    let report = trees.conclude(&checkout).await.unwrap();
    assert!(report.committed_leftovers);
    trees.release(&checkout, true).await.unwrap();
    checkout.branch
}

fn request(branch: &str, into: &str) -> ApplyRequest {
    ApplyRequest {
        branch: branch.into(),
        into: into.into(),
        mode: ApplyMode::Auto,
        checked_out: false,
        message: "merge it".into(),
    }
}

#[tokio::test]
async fn a_told_prompt_names_the_branch_and_the_commit() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let branch = attempt_branch(&trees, &repo, "first\nmore\n").await;
    assert_eq!(branch, "swarmd/t-c3d4e5f6-fix-the-login-bug/1");
    let message = git(&repo, &["log", "-1", "--format=%B", &branch]);
    assert!(message.starts_with("Fix the login bug\n"), "{message}");
    assert!(
        message.contains(&format!("Swarmd-Task: {TASK}")),
        "{message}"
    );
    assert!(message.contains("Swarmd-Attempt: 1"), "{message}");
    // A continuation handed the id-only name finds the readable branch.
    let legacy = format!("refs/heads/swarmd/{TASK}-1");
    let start = trees.resolve_start(&repo, &legacy).await;
    assert_eq!(start, Some(git(&repo, &["rev-parse", &branch])));
    assert_eq!(
        trees.resolve_start(&repo, "refs/heads/swarmd/T-1-1").await,
        None
    );
}

#[tokio::test]
async fn branches_are_listed_applied_and_deleted() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host()));
    let branch = attempt_branch(&trees, &repo, "first\nmore\n").await;
    let branches = Branches::new(&host());

    let listed = branches.list(&repo, "main").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].ahead, listed[0].merged), (1, false));
    assert!(listed[0].task.is(TASK));
    // Only the branches of the tasks asked for are listed (and counted).
    let others = branches
        .list_where(&repo, "main", |task| !task.is(TASK))
        .await
        .unwrap();
    assert!(others.is_empty());

    // Into a new branch: made at the head; main and its files untouched.
    let main = git(&repo, &["rev-parse", "main"]);
    let applied = branches
        .apply(&repo, &request(&branch, "feature"))
        .await
        .unwrap();
    assert_eq!(applied.outcome, AppliedHow::Created);
    assert_eq!(git(&repo, &["rev-parse", "feature"]), listed[0].head);
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "first\n"
    );
    let again = branches
        .apply(&repo, &request(&branch, "feature"))
        .await
        .unwrap();
    assert_eq!(again.outcome, AppliedHow::UpToDate);

    // Into the checked-out `main`: refused unless asked, then fast-forwarded.
    let refused = branches
        .apply(&repo, &request(&branch, "main"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, BranchError::CheckedOut { .. }),
        "{refused}"
    );
    std::fs::write(repo.join("notes.txt"), "dirty\n").unwrap();
    let mut asked = request(&branch, "main");
    asked.checked_out = true;
    let dirty = branches.apply(&repo, &asked).await.unwrap_err();
    assert!(matches!(dirty, BranchError::Dirty { .. }), "{dirty}");
    git(&repo, &["checkout", "-q", "--", "notes.txt"]);
    let applied = branches.apply(&repo, &asked).await.unwrap();
    assert_eq!(applied.outcome, AppliedHow::FastForward);
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "first\nmore\n"
    );

    // A diverged target gets a merge commit, or a conflict that changes nothing.
    git(&repo, &["checkout", "-q", "-b", "other", &main]);
    std::fs::write(repo.join("other.txt"), "x\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "other"]);
    git(&repo, &["checkout", "-q", "main"]);
    let merged = branches
        .apply(&repo, &request(&branch, "other"))
        .await
        .unwrap();
    assert_eq!(merged.outcome, AppliedHow::Merge);
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", "other"]),
        "merge it"
    );
    git(&repo, &["branch", "clash", &main]);
    git(&repo, &["checkout", "-q", "clash"]);
    std::fs::write(repo.join("notes.txt"), "first\nclash\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "clash"]);
    git(&repo, &["checkout", "-q", "main"]);
    let clash = git(&repo, &["rev-parse", "clash"]);
    let conflict = branches
        .apply(&repo, &request(&branch, "clash"))
        .await
        .unwrap_err();
    match conflict {
        BranchError::Conflict { files, .. } => assert_eq!(files, ["notes.txt"]),
        other => panic!("{other}"),
    }
    assert_eq!(git(&repo, &["rev-parse", "clash"]), clash);
    let mut ff = request(&branch, "clash");
    ff.mode = ApplyMode::FastForward;
    assert!(matches!(
        branches.apply(&repo, &ff).await.unwrap_err(),
        BranchError::NotFastForward { .. }
    ));
    for bad in ["-x", "a..b", "swarmd/t-1/1"] {
        assert!(
            branches.apply(&repo, &request(&branch, bad)).await.is_err(),
            "{bad}"
        );
    }
    // `swarmd` itself would keep every `swarmd/…` attempt branch from
    // being made.
    assert!(matches!(
        branches
            .apply(&repo, &request(&branch, "swarmd"))
            .await
            .unwrap_err(),
        BranchError::SwarmdTarget(_)
    ));
    // Names git would expand, or too long for an argument, are refused as
    // names before any git command sees them.
    let long = "b".repeat(200_000);
    // git's own refusals (exit 128) are a bad name too, never a fault.
    for bad in [
        "@{-1}",
        "x@{upstream}",
        "tab\tname",
        long.as_str(),
        "x~1",
        "a.lock",
        "a:b",
        "a*",
        "a/",
        "a.",
    ] {
        assert!(
            matches!(
                branches
                    .apply(&repo, &request(&branch, bad))
                    .await
                    .unwrap_err(),
                BranchError::BadName(_)
            ),
            "{}",
            &bad[..bad.len().min(20)]
        );
    }

    // Deleted only at the head it was read at.
    let listed = branches.list(&repo, "main").await.unwrap();
    assert!(listed[0].merged);
    assert!(matches!(
        branches.delete(&repo, &branch, &main).await.unwrap_err(),
        BranchError::Raced(_)
    ));
    branches
        .delete(&repo, &branch, &listed[0].head)
        .await
        .unwrap();
    assert!(branches.list(&repo, "main").await.unwrap().is_empty());
}

#[tokio::test]
async fn a_branch_checked_out_in_an_attempts_checkout_is_never_updated_there() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let root = temp.path().join("worktrees");
    let trees = Arc::new(Worktrees::new(root.clone(), &host()));
    let branch = attempt_branch(&trees, &repo, "first\nmore\n").await;
    let branches = Branches::new(&host()).with_attempts_root(root.clone());

    // A worker switched its checkout to `develop`, behind the attempt's
    // branch: git run there would read the `.git` and attributes it wrote.
    let main = git(&repo, &["rev-parse", "main"]);
    git(&repo, &["branch", "develop", &main]);
    let checkout = root.join("planted-1");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            checkout.to_str().unwrap(),
            "develop",
        ],
    );
    let mut asked = request(&branch, "develop");
    asked.checked_out = true;
    let refused = branches.apply(&repo, &asked).await.unwrap_err();
    assert!(
        matches!(refused, BranchError::AttemptCheckout { .. }),
        "{refused}"
    );
    assert_eq!(git(&repo, &["rev-parse", "develop"]), main, "not moved");

    // The same checkout outside the attempts' root is the person's own.
    let own = Branches::new(&host());
    let applied = own.apply(&repo, &asked).await.unwrap();
    assert_eq!(applied.outcome, AppliedHow::FastForward);
}

#[tokio::test]
async fn named_branches_are_listed_by_their_exact_names_and_diffed() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let attempt = attempt_branch(&trees, &repo, "named\n").await;
    let head = git(&repo, &["rev-parse", &attempt]);
    let base = git(&repo, &["rev-parse", "main"]);
    // `release` is asked for; `release-next` and `other` are not.
    git(&repo, &["branch", "release", &attempt]);
    git(&repo, &["branch", "release-next", &attempt]);
    git(&repo, &["branch", "other", &attempt]);
    let branches = Branches::new(&host());
    let task = BranchTask::Full(TASK.to_owned());
    let named = [
        ("release".to_owned(), task.clone(), 2),
        ("gone".to_owned(), task.clone(), 2),
        ("-bad".to_owned(), task.clone(), 2),
    ];
    let listed = branches.list_named(&repo, "main", &named).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].name.as_str(), listed[0].head.as_str()),
        ("release", head.as_str())
    );
    assert_eq!((listed[0].attempt, listed[0].ahead), (2, 1));
    assert!(!listed[0].merged);
    assert!(
        branches
            .list_named(&repo, "main", &[])
            .await
            .unwrap()
            .is_empty()
    );

    let changes = branches.changes(&repo, &base, &head).await.unwrap();
    assert_eq!(changes.files, ["notes.txt"]);
    assert!(changes.diff.contains("+named"), "{}", changes.diff);
    assert!(!changes.diff_truncated && !changes.files_truncated);
    // Only full commit ids reach git: never an option or an expression.
    for bad in ["--output=/tmp/x", "main", "HEAD~1"] {
        assert!(matches!(
            branches.changes(&repo, bad, &head).await,
            Err(BranchError::BadName(_))
        ));
    }
}

#[tokio::test]
async fn a_git_without_ahead_behind_lists_the_same() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let ahead = attempt_branch(&trees, &repo, "ahead\n").await;
    let held = "swarmd/t-c3d4e5f6-held/2";
    git(&repo, &["branch", held, "main"]);
    // The host's PATH finds /usr/local's git (2.41 or later counts in the
    // listing); Debian's own (2.39 on this image) has no `ahead-behind`,
    // so each branch is counted on its own. Both answer alike.
    let counted = Branches::new(&host()).list(&repo, "main").await.unwrap();
    let debian = HostEnv::from_pairs([("PATH", "/usr/bin:/bin")]);
    let each = Branches::new(&debian).list(&repo, "main").await.unwrap();
    assert_eq!(counted, each);
    let state = |name: &str| {
        let found = counted.iter().find(|b| b.name == name).unwrap();
        (found.ahead, found.merged, found.attempt)
    };
    assert_eq!(state(&ahead), (1, false, 1));
    assert_eq!(state(held), (0, true, 2));
}

#[tokio::test]
async fn conflict_markers_are_read_from_a_commit_of_the_named_files() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    std::fs::write(
        repo.join("a.txt"),
        "<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n",
    )
    .unwrap();
    std::fs::write(repo.join(":odd.txt"), "ok\n>>>>>>> left\n").unwrap();
    std::fs::write(repo.join("b.txt"), "clean\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "m",
        ],
    );
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let branches = Branches::new(&host());
    let marked = |paths: &'static [&'static str]| {
        let (branches, repo, head) = (branches.clone(), repo.clone(), head.clone());
        async move { branches.conflict_markers(&repo, &head, paths).await }
    };
    assert_eq!(
        marked(&["a.txt", "b.txt"]).await,
        Some(vec!["a.txt".to_owned()])
    );
    assert_eq!(marked(&["b.txt"]).await, Some(Vec::new()));
    // A path is a path, never pathspec magic.
    assert_eq!(
        marked(&[":odd.txt"]).await,
        Some(vec![":odd.txt".to_owned()])
    );
    assert_eq!(marked(&[]).await, Some(Vec::new()));
    // Only a full commit id is read.
    assert_eq!(
        branches.conflict_markers(&repo, "HEAD", &["a.txt"]).await,
        None
    );
}
