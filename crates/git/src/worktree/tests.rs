//! The worktree lifecycle against real `git` on temporary repositories.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;

#[path = "measure.rs"]
mod measure;
#[path = "planted.rs"]
mod planted;

use crate::testing::git::{git, repo};

fn host() -> HostEnv {
    HostEnv::from_pairs([("PATH", "/usr/local/bin:/usr/bin:/bin")])
}

fn spec(repo: &Path, keep: KeepRule) -> WorktreeSpec {
    WorktreeSpec {
        repo: repo.to_owned(),
        base: "HEAD".to_owned(),
        keep,
        bootstrap: Default::default(),
    }
}

#[tokio::test]
async fn an_attempt_gets_its_own_branch_at_the_base() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-abc", 2)
        .await
        .unwrap();
    assert_eq!(checkout.branch, "swarmd/T-abc-2");
    assert_eq!(checkout.dir, temp.path().join("worktrees/T-abc-2"));
    assert_eq!(checkout.base, git(&repo, &["rev-parse", "HEAD"]));
    assert_eq!(
        git(&checkout.dir, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "swarmd/T-abc-2"
    );
    assert_eq!(
        std::fs::read_to_string(checkout.dir.join("notes.txt")).unwrap(),
        "first\n"
    );
    let env = checkout.env();
    assert_eq!(
        env[0],
        ("SWARM_WORKTREE", checkout.dir.display().to_string())
    );
    assert_eq!(env[1], ("SWARM_BRANCH", "swarmd/T-abc-2".to_owned()));
    assert_eq!(env[2], ("SWARM_BASE", checkout.base.clone()));
    // A retry starts from the base again, on a branch of its own.
    let retry = trees
        .create(&spec(&repo, KeepRule::Never), "T-abc", 3)
        .await
        .unwrap();
    assert_eq!(retry.base, checkout.base);
    assert_ne!(retry.branch, checkout.branch);
}

#[tokio::test]
async fn the_end_commits_leftovers_reports_the_diff_and_removes_the_directory() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-end", 1)
        .await
        .unwrap();
    std::fs::write(checkout.dir.join("notes.txt"), "first\nsecond\n").unwrap();
    std::fs::write(checkout.dir.join("new.txt"), "hello\n").unwrap();

    let report = trees.conclude(&checkout).await.unwrap();
    assert!(report.committed_leftovers);
    assert_eq!(report.base, checkout.base);
    assert_ne!(report.head, report.base);
    assert_eq!(report.files, ["new.txt", "notes.txt"]);
    assert!(report.diff.contains("+second"), "{}", report.diff);
    assert!(report.diff.contains("+hello"), "{}", report.diff);
    assert!(!report.diff_truncated);
    let author = git(&repo, &["log", "-1", "--format=%an <%ae>", &report.head]);
    assert_eq!(author, "swarmd <swarmd@localhost>");

    assert!(!trees.release(&checkout, true).await.unwrap());
    assert!(!checkout.dir.exists());
    assert!(!temp.path().join("worktrees/T-end-1.json").exists());
    // The branch keeps the work; the user's checkout is untouched.
    assert_eq!(git(&repo, &["rev-parse", "swarmd/T-end-1"]), report.head);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), checkout.base);
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}

#[tokio::test]
async fn work_the_worker_committed_itself_is_reported_without_a_second_commit() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-own", 1)
        .await
        .unwrap();
    std::fs::write(checkout.dir.join("notes.txt"), "mine\n").unwrap();
    git(&checkout.dir, &["commit", "-q", "-am", "by the worker"]);
    let report = trees.conclude(&checkout).await.unwrap();
    assert!(!report.committed_leftovers);
    assert_eq!(report.files, ["notes.txt"]);
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", &report.head]),
        "by the worker"
    );
}

#[tokio::test]
async fn an_attempt_without_changes_leaves_no_branch() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-idle", 1)
        .await
        .unwrap();
    let report = trees.conclude(&checkout).await.unwrap();
    assert_eq!(report.head, report.base);
    assert!(report.files.is_empty() && report.diff.is_empty());
    trees.release(&checkout, true).await.unwrap();
    assert_eq!(git(&repo, &["branch", "--list", "swarmd/*"]), "");
}

#[tokio::test]
async fn keep_rules_decide_whether_the_directory_stays() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let cases = [
        (KeepRule::Never, false, false),
        (KeepRule::OnFailure, true, false),
        (KeepRule::OnFailure, false, true),
        (KeepRule::Always, true, true),
    ];
    for (n, (keep, passed, kept)) in (1..).zip(cases) {
        let checkout = trees.create(&spec(&repo, keep), "T-keep", n).await.unwrap();
        std::fs::write(checkout.dir.join("notes.txt"), format!("{n}\n")).unwrap();
        trees.conclude(&checkout).await.unwrap();
        assert_eq!(
            trees.release(&checkout, passed).await.unwrap(),
            kept,
            "{keep:?}"
        );
        assert_eq!(checkout.dir.exists(), kept, "{keep:?} passed={passed}");
        // Every branch has a commit, so every branch stays.
        git(&repo, &["rev-parse", "--verify", &checkout.branch]);
    }
}

#[tokio::test]
async fn a_large_diff_is_cut_at_the_cap_and_says_so() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host()).with_diff_max_bytes(200);
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-big", 1)
        .await
        .unwrap();
    let big: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(checkout.dir.join("big.txt"), big).unwrap();
    let report = trees.conclude(&checkout).await.unwrap();
    assert!(report.diff_truncated);
    assert_eq!(report.diff.len(), 200);
    assert_eq!(report.files, ["big.txt"]);
    assert!(!report.files_truncated);
    trees.release(&checkout, true).await.unwrap();
}

#[tokio::test]
async fn a_long_list_of_changed_paths_is_cut_at_the_cap_and_says_so() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Worktrees::new(temp.path().join("worktrees"), &host()).with_diff_max_bytes(100);
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-many", 1)
        .await
        .unwrap();
    for i in 0..50 {
        std::fs::write(checkout.dir.join(format!("file-{i:02}.txt")), "x\n").unwrap();
    }
    let report = trees.conclude(&checkout).await.unwrap();
    assert!(report.files_truncated);
    // Eight names of 11 bytes, each with its NUL, fit in 100 bytes; the
    // ninth is cut and left out.
    let names: Vec<String> = (0..8).map(|i| format!("file-{i:02}.txt")).collect();
    assert_eq!(report.files, names);
    assert_eq!(
        git(&repo, &["diff", "--name-only", &report.base, &report.head])
            .lines()
            .count(),
        50,
        "the branch has them all"
    );
    trees.release(&checkout, true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_attempts_on_one_repository_all_succeed() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host()));
    let runs = (1..=8).map(|n| {
        let trees = Arc::clone(&trees);
        let spec = spec(&repo, KeepRule::Never);
        tokio::spawn(async move {
            let checkout = trees.create(&spec, "T-par", n).await?;
            let file = checkout.dir.join("notes.txt");
            std::fs::write(&file, format!("first\nattempt {n}\n")).unwrap();
            let report = trees.conclude(&checkout).await?;
            trees.release(&checkout, true).await?;
            Ok::<_, WorktreeError>(report)
        })
    });
    let reports: Vec<WorktreeReport> = futures_all(runs).await;
    assert_eq!(reports.len(), 8);
    for (n, report) in (1..).zip(&reports) {
        assert!(report.diff.contains(&format!("+attempt {n}")), "{report:?}");
        assert_eq!(git(&repo, &["rev-parse", &report.branch]), report.head);
    }
    assert_eq!(
        git(&repo, &["branch", "--list", "swarmd/*"])
            .lines()
            .count(),
        8
    );
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}

async fn futures_all<I>(handles: I) -> Vec<WorktreeReport>
where
    I: IntoIterator<Item = tokio::task::JoinHandle<Result<WorktreeReport, WorktreeError>>>,
{
    let mut reports = Vec::new();
    for handle in handles.into_iter().collect::<Vec<_>>() {
        reports.push(handle.await.unwrap().unwrap());
    }
    reports
}

#[tokio::test]
async fn a_missing_repository_or_base_is_refused_with_its_reason() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let plain = temp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());

    let error = trees
        .create(&spec(&plain, KeepRule::Never), "T-x", 1)
        .await
        .unwrap_err();
    assert!(matches!(error, WorktreeError::NotARepository(_)), "{error}");
    assert!(error.to_string().contains("is not a git repository"));
    let gone = temp.path().join("gone");
    assert!(matches!(
        trees.create(&spec(&gone, KeepRule::Never), "T-x", 1).await,
        Err(WorktreeError::NotARepository(_))
    ));
    let mut no_base = spec(&repo, KeepRule::Never);
    no_base.base = "no-such-branch".to_owned();
    let error = trees.create(&no_base, "T-x", 1).await.unwrap_err();
    assert!(
        matches!(error, WorktreeError::UnknownBase { .. }),
        "{error}"
    );
    assert!(!temp.path().join("worktrees/T-x-1.json").exists());

    let reason = check(&spec(&plain, KeepRule::Never), &host()).unwrap_err();
    assert!(reason.contains("is not a git repository"), "{reason}");
    let reason = check(&no_base, &host()).unwrap_err();
    assert!(
        reason.contains("`no-such-branch` names no commit"),
        "{reason}"
    );
    let mut relative = spec(&repo, KeepRule::Never);
    relative.repo = PathBuf::from("repo");
    assert!(check(&relative, &host()).unwrap_err().contains("absolute"));
    assert_eq!(check(&spec(&repo, KeepRule::Never), &host()), Ok(()));
}

#[tokio::test]
async fn recovery_commits_and_removes_what_a_dead_process_left() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let root = temp.path().join("worktrees");
    let checkout = Worktrees::new(&root, &host())
        .create(&spec(&repo, KeepRule::Never), "T-dead", 1)
        .await
        .unwrap();
    let idle = Worktrees::new(&root, &host())
        .create(&spec(&repo, KeepRule::Never), "T-idle", 1)
        .await
        .unwrap();
    std::fs::write(checkout.dir.join("notes.txt"), "first\nunsaved\n").unwrap();

    // A new process with the same root finds both.
    let mut found = Worktrees::new(&root, &host()).recover().await;
    found.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].name, "T-dead-1");
    let report = found[0].report.as_ref().unwrap();
    assert!(report.committed_leftovers);
    assert_eq!(report.files, ["notes.txt"]);
    assert!(report.diff.contains("+unsaved"));
    assert!(!checkout.dir.exists() && !idle.dir.exists());
    assert_eq!(git(&repo, &["rev-parse", "swarmd/T-dead-1"]), report.head);
    assert_eq!(git(&repo, &["branch", "--list", "swarmd/T-idle-1"]), "");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    assert!(Worktrees::new(&root, &host()).recover().await.is_empty());
}

#[tokio::test]
async fn an_attempt_worktree_dropped_unended_is_committed_and_released() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let trees = Arc::new(Worktrees::new(temp.path().join("worktrees"), &host()));
    let worktree = AttemptWorktree::open(trees, &spec(&repo, KeepRule::Never), "T-drop", 1)
        .await
        .unwrap();
    let dir = worktree.checkout().dir.clone();
    std::fs::write(dir.join("notes.txt"), "first\nabandoned\n").unwrap();
    drop(worktree);
    for _ in 0..200 {
        if !dir.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!dir.exists());
    let diff = git(&repo, &["diff", "HEAD", "swarmd/T-drop-1"]);
    assert!(diff.contains("+abandoned"), "{diff}");
}

#[tokio::test]
async fn a_resumed_attempt_gets_its_branch_back_at_the_base_it_forked_from() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let forked = git(&repo, &["rev-parse", "HEAD"]);
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let first = trees
        .create(&spec(&repo, KeepRule::Never), "T-res", 1)
        .await
        .unwrap();
    std::fs::write(first.dir.join("notes.txt"), "first\nbefore the restart\n").unwrap();
    let report = trees.conclude(&first).await.unwrap();
    trees.release(&first, false).await.unwrap();
    assert!(!first.dir.exists());
    // The base moves on while the daemon is down.
    std::fs::write(repo.join("other.txt"), "x\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "later"]);

    let again = trees
        .create(&spec(&repo, KeepRule::Never), "T-res", 1)
        .await
        .unwrap();
    assert_eq!((&again.dir, &again.branch), (&first.dir, &first.branch));
    assert_eq!(again.base, forked, "the base it forked from");
    assert_eq!(git(&again.dir, &["rev-parse", "HEAD"]), report.head);
    assert_eq!(
        std::fs::read_to_string(again.dir.join("notes.txt")).unwrap(),
        "first\nbefore the restart\n"
    );
    assert!(!again.dir.join("other.txt").exists());
}

#[test]
fn a_recovered_checkout_names_its_attempt() {
    let task = swarmd_engine::ids::TaskId::new();
    let named = |name: String| RecoveredCheckout {
        name,
        report: Err(WorktreeError::NotARepository(PathBuf::new())),
    };
    assert_eq!(
        named(format!("{task}-3")).attempt(),
        Some(swarmd_engine::ids::AttemptId::new(task, 3))
    );
    for name in [
        "T-dead-1".to_owned(),
        format!("{task}"),
        format!("{task}-x"),
    ] {
        assert_eq!(named(name.clone()).attempt(), None, "{name}");
    }
}

#[tokio::test]
async fn a_new_checkout_gets_its_copies_links_and_ports_and_release_frees_the_ports() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    std::fs::write(repo.join(".gitignore"), ".env\nnode_modules/\n").unwrap();
    std::fs::write(repo.join(".env"), "KEY=1\n").unwrap();
    std::fs::create_dir(repo.join("node_modules")).unwrap();
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let mut first = None;
    for candidate in (42000u16..60000).step_by(89) {
        if (candidate..candidate + 4).all(|p| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok()) {
            first = Some(candidate);
            break;
        }
    }
    let first = first.expect("a free range");
    let range = format!("{first}-{}", first + 3);
    let spec = WorktreeSpec {
        bootstrap: Bootstrap {
            copy: vec![".env".into()],
            link: vec!["node_modules".into()],
            setup: None,
            ports: Some(PortsSpec::new(&range, 2).unwrap()),
        },
        ..spec(&repo, KeepRule::Never)
    };
    let a = trees.create(&spec, "T-boot", 1).await.unwrap();
    let b = trees.create(&spec, "T-boot", 2).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(a.dir.join(".env")).unwrap(),
        "KEY=1\n"
    );
    assert!(
        std::fs::symlink_metadata(a.dir.join("node_modules"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(a.ports.len(), 2);
    assert!(a.ports.iter().all(|p| !b.ports.contains(p)), "{a:?} {b:?}");
    let env = a.port_env();
    assert_eq!(env[0], ("SWARM_PORT".to_owned(), a.ports[0].to_string()));
    assert_eq!(a.placed, [".env", "node_modules"].map(PathBuf::from));
    // `node_modules/` ignores directories only, not the symlink: still the
    // copies and links are never the worker's leftovers.
    let report = trees.conclude(&a).await.unwrap();
    assert!(!report.committed_leftovers, "{report:?}");
    assert!(report.files.is_empty(), "{report:?}");
    // The range is used up: a third live attempt cannot start.
    let refused = trees.create(&spec, "T-boot", 3).await.unwrap_err();
    assert!(matches!(refused, WorktreeError::Ports(_)), "{refused}");
    assert!(!trees.root().join("T-boot-3").exists());
    // Ended (here: failed), an attempt's ports go to the next one.
    trees.release(&a, false).await.unwrap();
    let c = trees.create(&spec, "T-boot", 4).await.unwrap();
    let mut freed = a.ports.clone();
    freed.sort_unstable();
    let mut got = c.ports.clone();
    got.sort_unstable();
    assert_eq!(got, freed);
    // The linked directory is the repository's: releasing the checkout
    // leaves it in place.
    assert!(repo.join("node_modules").is_dir());
}
