//! A worker that plants git configuration in its checkout: a `.git`
//! naming a git directory it made, whose filter its `.gitattributes`
//! selects. swarmd's git never runs the filter, refuses the checkout at its
//! end and at recovery, and removes it without git; attributes a worker
//! wrote select no filter even one the repository defines (with a git that
//! has `--attr-source`), while the repository's own committed attributes do.

use super::*;

/// Plants, in `dir`, a git directory `.planted` whose filter `x` makes
/// `marker`, selects it for every file, changes `notes.txt` and points
/// `.git` at `.planted`.
fn plant(dir: &Path, marker: &Path) {
    let source = dir.join(".planted-src");
    git(dir, &["init", "-q", source.to_str().unwrap()]);
    std::fs::rename(source.join(".git"), dir.join(".planted")).unwrap();
    std::fs::remove_dir(&source).unwrap();
    let filter = format!("touch {} && cat", marker.display());
    let config = dir.join(".planted/config");
    git(
        dir,
        &[
            "config",
            "-f",
            config.to_str().unwrap(),
            "filter.x.clean",
            &filter,
        ],
    );
    std::fs::write(dir.join(".gitattributes"), "* filter=x\n").unwrap();
    std::fs::write(dir.join("notes.txt"), "first\nplanted\n").unwrap();
    let pointer = format!("gitdir: {}\n", dir.join(".planted").display());
    std::fs::write(dir.join(".git"), pointer).unwrap();
}

#[tokio::test]
async fn a_replaced_git_pointer_is_refused_and_removed_without_git() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let marker = temp.path().join("MARKER");
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-plant", 1)
        .await
        .unwrap();
    assert!(
        checkout
            .git_dir
            .as_ref()
            .unwrap()
            .ends_with("worktrees/T-plant-1")
    );
    plant(&checkout.dir, &marker);

    let refused = trees.conclude(&checkout).await.unwrap_err();
    assert!(
        matches!(refused, WorktreeError::Tampered { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("no longer names"), "{refused}");
    assert!(!marker.exists(), "the planted filter ran");
    assert!(!trees.release(&checkout, false).await.unwrap());
    assert!(!checkout.dir.exists());
    assert!(!marker.exists(), "the planted filter ran");
    assert_eq!(git(&repo, &["branch", "--list", "swarmd/T-plant-1"]), "");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}

#[tokio::test]
async fn recovery_refuses_a_tampered_checkout_and_runs_nothing_in_it() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let marker = temp.path().join("MARKER");
    let root = temp.path().join("worktrees");
    let checkout = Worktrees::new(&root, &host())
        .create(&spec(&repo, KeepRule::Never), "T-dead", 1)
        .await
        .unwrap();
    // A `.git` directory in place of the pointer.
    plant(&checkout.dir, &marker);
    std::fs::remove_file(checkout.dir.join(".git")).unwrap();
    std::fs::rename(checkout.dir.join(".planted"), checkout.dir.join(".git")).unwrap();

    let found = Worktrees::new(&root, &host()).recover().await;
    assert_eq!(found.len(), 1);
    assert!(
        matches!(found[0].report, Err(WorktreeError::Tampered { .. })),
        "{:?}",
        found[0].report
    );
    assert!(!marker.exists(), "the planted filter ran");
    assert!(!checkout.dir.exists());
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}

#[tokio::test]
async fn attributes_come_from_the_base_not_from_the_worker() {
    let temp = tempfile::tempdir().unwrap();
    let repo = repo(temp.path());
    let marker = temp.path().join("MARKER");
    // The repository's owner defines filter `y`.
    let filter = format!("touch {} && cat", marker.display());
    git(&repo, &["config", "filter.y.clean", &filter]);
    let trees = Worktrees::new(temp.path().join("worktrees"), &host());
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-attr", 1)
        .await
        .unwrap();
    std::fs::write(checkout.dir.join(".gitattributes"), "* filter=y\n").unwrap();
    std::fs::write(checkout.dir.join("notes.txt"), "first\nworker\n").unwrap();
    let report = trees.conclude(&checkout).await.unwrap();
    assert!(report.committed_leftovers);
    assert_eq!(report.files, [".gitattributes", "notes.txt"]);
    if trees.git.has_attr_source().await {
        assert!(
            !marker.exists(),
            "the worker's attributes selected a filter"
        );
    }
    trees.release(&checkout, true).await.unwrap();

    // Attributes the base commits select the repository's filter.
    std::fs::write(repo.join(".gitattributes"), "notes.txt filter=y\n").unwrap();
    git(&repo, &["add", ".gitattributes"]);
    git(&repo, &["commit", "-q", "-m", "attributes"]);
    std::fs::remove_file(&marker).ok();
    let checkout = trees
        .create(&spec(&repo, KeepRule::Never), "T-attr", 2)
        .await
        .unwrap();
    std::fs::write(checkout.dir.join("notes.txt"), "first\nagain\n").unwrap();
    trees.conclude(&checkout).await.unwrap();
    assert!(marker.exists(), "the repository's own filter did not run");
    trees.release(&checkout, true).await.unwrap();
}
