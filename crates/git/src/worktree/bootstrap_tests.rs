//! Copy and link rules: relative paths inside the repository only, globs
//! within one component, missing entries skipped, nothing followed out of
//! the repository or the worktree.

use std::path::{Path, PathBuf};

use super::*;

#[test]
fn entries_must_be_relative_and_stay_in_the_repository() {
    for good in [
        ".env",
        "config/local.toml",
        "config/*.toml",
        "./.venv",
        "a?b",
    ] {
        assert_eq!(check_entry(good, true), Ok(()), "{good}");
    }
    for (bad, problem) in [
        ("/etc/passwd", "absolute"),
        ("../secrets", "leaves the repository"),
        ("config/../../x", "leaves the repository"),
        (".git/config", "`.git`"),
        ("", "empty"),
        ("src/**/x", "`**`"),
    ] {
        let error = check_entry(bad, true).unwrap_err();
        assert!(error.contains(problem), "{bad}: {error}");
    }
    let error = check_entry("node_*", false).unwrap_err();
    assert!(error.contains("no wildcard"), "{error}");
    let refused = Bootstrap {
        link: vec!["../node_modules".into()],
        ..Bootstrap::default()
    };
    assert!(refused.check().unwrap_err().starts_with("link: "));
    let refused = Bootstrap {
        setup: Some(SetupSpec {
            command: vec![],
            timeout: DEFAULT_SETUP_TIMEOUT,
        }),
        ..Bootstrap::default()
    };
    assert!(refused.check().unwrap_err().contains("setup.command"));
}

#[test]
fn wildcards_match_within_a_component_and_skip_hidden_names() {
    assert!(wildcard_match("*.toml", "local.toml"));
    assert!(wildcard_match("a?c", "abc"));
    assert!(wildcard_match("*", "x"));
    assert!(!wildcard_match("*.toml", "local.json"));
    assert!(!wildcard_match("*", ".env"));
    assert!(wildcard_match(".env*", ".env.local"));
    assert!(wildcard_match("*a*b", "xxaybb"));
    assert!(!wildcard_match("a*b", "ac"));
}

/// A "repository" and a "worktree" side by side.
fn trees() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let repo = temp.path().join("repo");
    let dir = temp.path().join("wt");
    std::fs::create_dir_all(repo.join("config")).unwrap();
    std::fs::create_dir_all(repo.join("node_modules/left-pad")).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(repo.join(".env"), "SECRET=1\n").unwrap();
    std::fs::write(repo.join("config/local.toml"), "a = 1\n").unwrap();
    std::fs::write(repo.join("config/dev.toml"), "b = 2\n").unwrap();
    std::fs::write(repo.join("config/notes.txt"), "n\n").unwrap();
    std::fs::write(repo.join("node_modules/left-pad/index.js"), "x\n").unwrap();
    (temp, repo, dir)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn listed_files_and_globs_are_copied_and_links_point_into_the_repository() {
    let (_temp, repo, dir) = trees();
    let bootstrap = Bootstrap {
        copy: vec![".env".into(), "config/*.toml".into(), "absent.txt".into()],
        link: vec!["node_modules".into(), ".venv".into()],
        ..Bootstrap::default()
    };
    let placed = place_files(&repo, &dir, &bootstrap).unwrap();
    assert_eq!(
        placed.copied,
        [".env", "config/dev.toml", "config/local.toml"].map(PathBuf::from)
    );
    assert_eq!(placed.linked, [PathBuf::from("node_modules")]);
    assert_eq!(placed.missing, ["absent.txt", ".venv"]);
    assert_eq!(read(&dir.join(".env")), "SECRET=1\n");
    assert_eq!(read(&dir.join("config/local.toml")), "a = 1\n");
    assert!(!dir.join("config/notes.txt").exists());
    // A copy, not a link: the worktree's edits stay its own.
    assert!(
        !std::fs::symlink_metadata(dir.join(".env"))
            .unwrap()
            .is_symlink()
    );
    let link = std::fs::symlink_metadata(dir.join("node_modules")).unwrap();
    assert!(link.is_symlink());
    assert_eq!(
        std::fs::read_link(dir.join("node_modules")).unwrap(),
        std::fs::canonicalize(repo.join("node_modules")).unwrap()
    );
    assert_eq!(read(&dir.join("node_modules/left-pad/index.js")), "x\n");
}

#[test]
fn a_tracked_file_already_in_the_worktree_is_left_as_it_is() {
    let (_temp, repo, dir) = trees();
    std::fs::write(dir.join(".env"), "TRACKED\n").unwrap();
    let bootstrap = Bootstrap {
        copy: vec![".env".into()],
        ..Bootstrap::default()
    };
    let placed = place_files(&repo, &dir, &bootstrap).unwrap();
    assert!(placed.copied.is_empty());
    assert_eq!(read(&dir.join(".env")), "TRACKED\n");
}

#[test]
fn nothing_is_followed_out_of_the_repository_or_the_worktree() {
    let (temp, repo, dir) = trees();
    let outside = temp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "s\n").unwrap();
    // In the repository, a symlink out of it: neither copied nor linked.
    std::os::unix::fs::symlink(&outside, repo.join("escape")).unwrap();
    std::fs::write(repo.join("config.local"), "c\n").unwrap();
    // In the worktree, a (tracked) symlink out of it on a copy's way.
    std::os::unix::fs::symlink(&outside, dir.join("config")).unwrap();
    let bootstrap = Bootstrap {
        copy: vec!["escape".into(), "config/local.toml".into()],
        link: vec!["escape".into()],
        ..Bootstrap::default()
    };
    let placed = place_files(&repo, &dir, &bootstrap).unwrap();
    assert!(placed.copied.is_empty(), "{placed:?}");
    assert!(placed.linked.is_empty(), "{placed:?}");
    assert!(!dir.join("escape").exists());
    assert!(!outside.join("local.toml").exists());
    // Entries the configuration would refuse are never acted on.
    let refused = Bootstrap {
        copy: vec!["../outside/secret".into(), "/etc/hostname".into()],
        link: vec!["../outside".into()],
        ..Bootstrap::default()
    };
    let placed = place_files(&repo, &dir, &refused).unwrap();
    assert_eq!(placed, Placed::default());
}

#[test]
fn a_copied_folder_keeps_its_symlinks_as_symlinks() {
    let (_temp, repo, dir) = trees();
    std::os::unix::fs::symlink("/etc/hostname", repo.join("config/host")).unwrap();
    let bootstrap = Bootstrap {
        copy: vec!["config".into()],
        ..Bootstrap::default()
    };
    place_files(&repo, &dir, &bootstrap).unwrap();
    let copied = dir.join("config/host");
    assert!(std::fs::symlink_metadata(&copied).unwrap().is_symlink());
    assert_eq!(
        std::fs::read_link(&copied).unwrap(),
        PathBuf::from("/etc/hostname")
    );
    assert_eq!(read(&dir.join("config/dev.toml")), "b = 2\n");
}
