//! Where swarmd looks by default: the per-user XDG places, then the system ones.
//!
//! State directory: `$STATE_DIRECTORY` (systemd), else
//! `$XDG_STATE_HOME/swarmd`, else `$HOME/.local/state/swarmd`, else
//! `./swarmd-state`. Configuration file (when `--config`/`SWARMD_CONFIG` is
//! not given): the first that exists of `$XDG_CONFIG_HOME/swarmd/swarmd.toml`
//! (else `$HOME/.config/swarmd/swarmd.toml`) and `/etc/swarmd/swarmd.toml`;
//! none is no error. A relative `XDG_*` value is ignored, as the XDG base
//! directory specification asks.

use std::path::{Path, PathBuf};

use crate::environment::Environment;

/// The system-wide configuration file, read when `--config` is not given, it
/// exists and no per-user file does (`locations::config_candidates`).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/swarmd/swarmd.toml";

/// Which configuration file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigPath {
    /// `--config PATH`: must exist.
    Explicit(PathBuf),
    /// Read when it exists, else run on defaults (`ConfigPath::search`).
    IfPresent(PathBuf),
    /// No file: defaults, environment and flags only.
    None,
}

/// `$<var>` when it is absolute, else `$HOME/<under_home>`.
fn xdg_base(env: &Environment, var: &str, under_home: &str) -> Option<PathBuf> {
    match env.get(var) {
        Some(dir) if Path::new(dir).is_absolute() => Some(PathBuf::from(dir)),
        _ => Some(Path::new(env.get("HOME")?).join(under_home)),
    }
}

/// The default state directory, or `None` when the environment names no
/// place (then `DEFAULT_STATE_DIR` applies).
pub fn default_state_dir(env: &Environment) -> Option<PathBuf> {
    if let Some(first) = env
        .get("STATE_DIRECTORY")
        .and_then(|dirs| dirs.split(':').find(|dir| !dir.is_empty()))
    {
        return Some(PathBuf::from(first));
    }
    Some(xdg_base(env, "XDG_STATE_HOME", ".local/state")?.join("swarmd"))
}

/// The per-user state directory, `$XDG_STATE_HOME/swarmd`, else
/// `~/.local/state/swarmd` (a service's `STATE_DIRECTORY` aside): where
/// `swarmd mcp` keeps its session files.
pub fn user_state_dir(env: &Environment) -> Option<PathBuf> {
    Some(xdg_base(env, "XDG_STATE_HOME", ".local/state")?.join("swarmd"))
}

/// The configuration files tried when none is named, in order.
pub fn config_candidates(env: &Environment) -> Vec<PathBuf> {
    let user = xdg_base(env, "XDG_CONFIG_HOME", ".config")
        .map(|dir| dir.join("swarmd").join("swarmd.toml"));
    user.into_iter()
        .chain([PathBuf::from(DEFAULT_CONFIG_PATH)])
        .collect()
}

impl ConfigPath {
    /// `explicit` when given (it must exist), else the first candidate that
    /// exists, else no file.
    pub fn search(explicit: Option<&Path>, env: &Environment) -> ConfigPath {
        if let Some(path) = explicit {
            return ConfigPath::Explicit(path.to_owned());
        }
        config_candidates(env)
            .into_iter()
            .find(|path| path.is_file())
            .map_or(ConfigPath::None, ConfigPath::IfPresent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        Environment::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn the_state_dir_is_systemd_then_xdg_then_home_then_none() {
        let all = [
            ("STATE_DIRECTORY", ":/var/lib/swarmd:/other"),
            ("XDG_STATE_HOME", "/x/state"),
            ("HOME", "/h"),
        ];
        let path = |pairs: &[(&str, &str)]| default_state_dir(&env(pairs));
        assert_eq!(path(&all), Some(PathBuf::from("/var/lib/swarmd")));
        assert_eq!(path(&all[1..]), Some(PathBuf::from("/x/state/swarmd")));
        assert_eq!(
            path(&all[2..]),
            Some(PathBuf::from("/h/.local/state/swarmd"))
        );
        let relative = [("XDG_STATE_HOME", "state"), ("HOME", "/h")];
        assert_eq!(
            path(&relative),
            Some(PathBuf::from("/h/.local/state/swarmd"))
        );
        assert_eq!(
            path(&[("XDG_STATE_HOME", "/x/state")]),
            Some(PathBuf::from("/x/state/swarmd"))
        );
        assert_eq!(path(&[("XDG_STATE_HOME", "relative")]), None);
        assert_eq!(path(&[]), None);
    }

    #[test]
    fn config_candidates_are_the_user_file_then_etc() {
        let candidates = |pairs: &[(&str, &str)]| config_candidates(&env(pairs));
        let etc = PathBuf::from(DEFAULT_CONFIG_PATH);
        assert_eq!(
            candidates(&[("XDG_CONFIG_HOME", "/x/config"), ("HOME", "/h")]),
            [PathBuf::from("/x/config/swarmd/swarmd.toml"), etc.clone()]
        );
        assert_eq!(
            candidates(&[("HOME", "/h")]),
            [PathBuf::from("/h/.config/swarmd/swarmd.toml"), etc.clone()]
        );
        assert_eq!(candidates(&[]), [etc]);
    }

    #[test]
    fn search_takes_the_explicit_path_then_the_first_file_that_exists() {
        let home = tempfile::tempdir().unwrap();
        let home_env = env(&[("HOME", home.path().to_str().unwrap())]);
        let explicit = home.path().join("elsewhere.toml");
        assert_eq!(
            ConfigPath::search(Some(&explicit), &home_env),
            ConfigPath::Explicit(explicit)
        );
        let user = home.path().join(".config/swarmd/swarmd.toml");
        let without_user = ConfigPath::search(None, &home_env);
        assert_ne!(without_user, ConfigPath::IfPresent(user.clone()));
        std::fs::create_dir_all(user.parent().unwrap()).unwrap();
        std::fs::write(&user, "").unwrap();
        assert_eq!(
            ConfigPath::search(None, &home_env),
            ConfigPath::IfPresent(user)
        );
    }
}
