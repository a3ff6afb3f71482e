//! A snapshot of the process environment, taken once in `main` and passed down.
//!
//! Nothing below `main` calls `std::env::var`: configuration, the state
//! directory and systemd integration read this snapshot, so tests can hand them
//! any environment without touching the real one.

use std::collections::BTreeMap;
use std::fmt;

/// Prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "SWARMD_";

/// `SWARMD_*` variables that stand in for CLI flags rather than config keys.
pub const CLI_ENV_VARS: [&str; 5] = [
    "SWARMD_CONFIG",
    "SWARMD_URL",
    "SWARMD_TOKEN",
    "SWARMD_TOKEN_FILE",
    "SWARMD_LOG_FORMAT",
];

/// The first words of the configuration's top-level tables. A `SWARMD_*`
/// name without `__` that starts with one of them (`SWARMD_SERVER_BIND`)
/// is a misspelt key and refused; any other (`SWARMD_ADMIN_TOKEN`, a
/// script's or a client's own) is not configuration and left alone.
pub const CONFIG_SECTIONS: [&str; 14] = [
    "server",
    "store",
    "auth",
    "limits",
    "defaults",
    "ws",
    "senior",
    "mcp",
    "lua",
    "agents",
    "flows",
    "retention",
    "spawner",
    "cluster",
];

/// Environment variables by name. Values may be secrets: `Debug` prints names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

impl Environment {
    /// The current process environment. Variables whose name or value is not
    /// UTF-8 are skipped: no swarmd variable can be spelled that way.
    #[allow(
        clippy::disallowed_methods,
        reason = "the one read of the process environment, called from `main`"
    )]
    pub fn from_process() -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect();
        Environment { vars }
    }

    /// An environment made of exactly these pairs (tests, child processes).
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let vars = pairs
            .into_iter()
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        Environment { vars }
    }

    /// Every variable, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The value of `name`, if set. An empty value counts as unset, as systemd does.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }

    /// Every variable whose name starts with `prefix`, sorted by name.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.vars
            .range(prefix.to_owned()..)
            .take_while(move |(name, _)| name.starts_with(prefix))
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_lists_only_matching_names_in_order() {
        let env = Environment::from_pairs([
            ("SWARMD_B", "2"),
            ("PATH", "/bin"),
            ("SWARMD_A", "1"),
            ("SWARMDX", "no"),
        ]);
        let names: Vec<_> = env.with_prefix("SWARMD_").map(|(name, _)| name).collect();
        assert_eq!(names, ["SWARMD_A", "SWARMD_B"]);
    }

    #[test]
    fn empty_value_counts_as_unset_and_debug_hides_values() {
        let env = Environment::from_pairs([("EMPTY", ""), ("SECRET", "hunter2")]);
        assert_eq!(env.get("EMPTY"), None);
        assert_eq!(env.get("SECRET"), Some("hunter2"));
        assert!(!format!("{env:?}").contains("hunter2"));
    }
}
