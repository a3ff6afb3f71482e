//! `worktree = { repo, base, keep, copy, link, setup, ports }` of a process
//! or operator agent: each attempt runs in a fresh git worktree of `repo`
//! (docs/tasks.md, Worktrees), made ready to work in by the bootstrap keys
//! (docs/tasks.md, Worktrees, Bootstrap).

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
    /// Ignored files and folders (paths or globs relative to `repo`) copied
    /// from its working tree into each new worktree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy: Vec<String>,
    /// Directories (relative to `repo`) each new worktree shares by symlink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub link: Vec<String>,
    /// A command run in each new worktree before the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupConfig>,
    /// Ports each live attempt gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<PortsConfig>,
}

/// `setup = { command, timeout_secs }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupConfig {
    /// Program and arguments, e.g. `["sh", "-c", "npm ci"]`.
    pub command: Vec<String>,
    #[serde(default = "setup_timeout_secs")]
    pub timeout_secs: u64,
}

/// `ports = { range, count }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortsConfig {
    /// `"first-last"`, both included.
    pub range: String,
    #[serde(default = "one")]
    pub count: u16,
}

impl WorktreeConfig {
    /// Checks the bootstrap keys: `copy` and `link` paths relative and
    /// inside the repository, a setup command naming a program, a port
    /// range neither empty nor inverted.
    ///
    /// # Errors
    /// The key (below `worktree`) and the reason.
    pub fn check_bootstrap(&self) -> Result<(), (&'static str, String)> {
        use swarmd_git::worktree::bootstrap::check_entry;
        for entry in &self.copy {
            check_entry(entry, true).map_err(|reason| ("copy", reason))?;
        }
        for entry in &self.link {
            check_entry(entry, false).map_err(|reason| ("link", reason))?;
        }
        if let Some(setup) = &self.setup {
            if setup.command.first().is_none_or(|p| p.is_empty()) {
                return Err(("setup.command", "names no program".to_owned()));
            }
            if setup.timeout_secs == 0 {
                return Err(("setup.timeout_secs", "must be at least 1".to_owned()));
            }
        }
        if let Some(ports) = &self.ports {
            swarmd_git::worktree::PortsSpec::new(&ports.range, ports.count)
                .map_err(|reason| ("ports", reason))?;
        }
        Ok(())
    }
}

fn setup_timeout_secs() -> u64 {
    300
}

fn one() -> u16 {
    1
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

impl From<&WorktreeConfig> for swarmd_git::worktree::WorktreeSpec {
    fn from(w: &WorktreeConfig) -> Self {
        Self {
            repo: w.repo.clone(),
            base: w.base.clone(),
            keep: w.keep.into(),
            bootstrap: w.into(),
        }
    }
}

/// The bootstrap keys, checked at load (`WorktreeConfig::check_bootstrap`):
/// a port range that still fails to parse here is dropped, never a panic.
impl From<&WorktreeConfig> for swarmd_git::worktree::Bootstrap {
    fn from(w: &WorktreeConfig) -> Self {
        Self {
            copy: w.copy.clone(),
            link: w.link.clone(),
            setup: w.setup.as_ref().map(|s| swarmd_git::worktree::SetupSpec {
                command: s.command.clone(),
                timeout: std::time::Duration::from_secs(s.timeout_secs),
            }),
            ports: w
                .ports
                .as_ref()
                .and_then(|p| swarmd_git::worktree::PortsSpec::new(&p.range, p.count).ok()),
        }
    }
}

impl From<KeepWorktree> for swarmd_git::worktree::KeepRule {
    fn from(keep: KeepWorktree) -> Self {
        match keep {
            KeepWorktree::Never => Self::Never,
            KeepWorktree::OnFailure => Self::OnFailure,
            KeepWorktree::Always => Self::Always,
        }
    }
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

    #[test]
    fn bootstrap_keys_parse_with_defaults() {
        let holder: Holder = toml::from_str(
            r#"worktree = { repo = "/r", copy = [".env", "config/*.toml"], link = ["node_modules"], setup = { command = ["sh", "-c", "npm ci"] }, ports = { range = "20000-20999", count = 2 } }"#,
        )
        .unwrap();
        let w = holder.worktree;
        assert_eq!(w.copy, [".env", "config/*.toml"]);
        assert_eq!(w.link, ["node_modules"]);
        assert_eq!(w.setup.as_ref().unwrap().timeout_secs, 300);
        assert_eq!(w.ports.as_ref().unwrap().count, 2);
        assert_eq!(w.check_bootstrap(), Ok(()));
        let holder: Holder =
            toml::from_str(r#"worktree = { repo = "/r", ports = { range = "20000-20009" } }"#)
                .unwrap();
        assert_eq!(holder.worktree.ports.unwrap().count, 1);
    }

    #[test]
    fn bootstrap_keys_that_leave_the_repository_or_name_no_ports_are_refused() {
        let refused = |text: &str| {
            let holder: Holder = toml::from_str(text).unwrap();
            holder.worktree.check_bootstrap().unwrap_err()
        };
        let (key, reason) = refused(r#"worktree = { repo = "/r", copy = ["../x"] }"#);
        assert_eq!(key, "copy");
        assert!(reason.contains("leaves the repository"), "{reason}");
        let (key, reason) = refused(r#"worktree = { repo = "/r", link = ["/usr/lib"] }"#);
        assert_eq!(key, "link");
        assert!(reason.contains("absolute"), "{reason}");
        let (key, reason) =
            refused(r#"worktree = { repo = "/r", ports = { range = "20999-20000" } }"#);
        assert_eq!(key, "ports");
        assert!(reason.contains("inverted"), "{reason}");
        let (key, _) = refused(r#"worktree = { repo = "/r", setup = { command = [] } }"#);
        assert_eq!(key, "setup.command");
        let (key, _) = refused(
            r#"worktree = { repo = "/r", setup = { command = ["true"], timeout_secs = 0 } }"#,
        );
        assert_eq!(key, "setup.timeout_secs");
    }

    #[test]
    fn config_load_names_the_agent_and_key_of_a_bad_bootstrap() {
        use crate::Overrides;
        use crate::tests::Fixture;
        let load = |worktree: &str, kind: &str| {
            let body = match kind {
                "process" => "kind = \"process\"\nprogram = \"/bin/true\"",
                _ => "kind = \"operator\"",
            };
            let text = format!("[agents.coder]\n{body}\nworktree = {worktree}\n");
            Fixture::new(&text)
                .load(&[], &Overrides::default())
                .unwrap_err()
        };
        let error = load(
            r#"{ repo = "/r", ports = { range = "20999-20000" } }"#,
            "process",
        );
        let text = error.to_string();
        assert!(
            text.contains("invalid `agents.coder.worktree.ports`") && text.contains("inverted"),
            "{text}"
        );
        let error = load(r#"{ repo = "/r", link = ["../deps"] }"#, "process");
        assert!(
            error.to_string().contains("agents.coder.worktree.link"),
            "{error}"
        );
        let error = load(
            r#"{ repo = "/r", setup = { command = ["true"] } }"#,
            "operator",
        );
        let text = error.to_string();
        assert!(
            text.contains("invalid `agents.coder.worktree.setup`")
                && text.contains("process agents only"),
            "{text}"
        );
    }
}
