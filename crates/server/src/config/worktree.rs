//! `worktree = { repo, base, keep }` of a process agent: each attempt runs
//! in a fresh git worktree of `repo` (docs/tasks.md, Worktrees).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where and how an agent's attempts get their worktrees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeConfig {
    /// The git repository worktrees are added to; an absolute path.
    pub repo: PathBuf,
    /// What each attempt's branch starts from: a commit, branch or tag.
    #[serde(default = "head")]
    pub base: String,
    /// When the worktree directory stays after the attempt.
    #[serde(default)]
    pub keep: KeepWorktree,
}

/// `keep`: when an attempt's worktree directory is left in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepWorktree {
    /// Always removed (the branch keeps the work).
    #[default]
    Never,
    /// Kept when the attempt did not pass.
    OnFailure,
    /// Always kept.
    Always,
}

fn head() -> String {
    "HEAD".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Holder {
        worktree: WorktreeConfig,
    }

    #[test]
    fn base_and_keep_have_defaults_and_unknown_keys_are_refused() {
        let holder: Holder = toml::from_str("worktree = { repo = \"/r\" }").unwrap();
        assert_eq!(holder.worktree.base, "HEAD");
        assert_eq!(holder.worktree.keep, KeepWorktree::Never);
        let holder: Holder =
            toml::from_str("worktree = { repo = \"/r\", base = \"main\", keep = \"on_failure\" }")
                .unwrap();
        assert_eq!(holder.worktree.keep, KeepWorktree::OnFailure);
        let error =
            toml::from_str::<Holder>("worktree = { repo = \"/r\", kep = \"always\" }").unwrap_err();
        assert!(error.message().contains("unknown field `kep`"), "{error}");
        let error = toml::from_str::<Holder>("worktree = { repo = \"/r\", keep = \"sometimes\" }")
            .unwrap_err();
        assert!(
            error.message().contains("unknown variant `sometimes`"),
            "{error}"
        );
    }
}
