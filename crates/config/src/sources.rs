//! The `SWARMD_*` environment source, and the source an error names: the
//! configuration file, an environment variable, or an agent file.
//!
//! Every variable is applied before the merged table is checked once, so
//! keys that only make sense together (an agent's `kind` and `program`) may
//! come from separate variables. When the merged table is refused, the
//! variable blamed is the first one whose key, together with the variables
//! for the same table (`agents.NAME`, or the section), is refused.

use serde::Deserialize;

use super::error::ConfigError;
use super::{Agent, AgentOrigin, Config};
use crate::environment::{CLI_ENV_VARS, CONFIG_SECTIONS, ENV_PREFIX, Environment};

/// One configuration variable: the key path it sets and its name.
#[derive(Debug, Clone)]
pub(super) struct EnvKey {
    /// Lower-cased key path, `["agents", "claude", "program"]`.
    pub path: Vec<String>,
    /// The variable, `SWARMD_AGENTS__CLAUDE__PROGRAM`.
    pub var: String,
    value: toml::Value,
}

impl EnvKey {
    fn dotted(&self) -> String {
        self.path.join(".")
    }

    /// The table this key is checked with: `agents.NAME` for an agent's
    /// keys, else the section.
    fn group(&self) -> &[String] {
        let depth = if self.path.first().is_some_and(|first| first == "agents") {
            2
        } else {
            1
        };
        &self.path[..depth.min(self.path.len().saturating_sub(1)).max(1)]
    }
}

/// Applies every configuration variable in name order to `table`, then
/// checks the merged table once. `file_error` is the configuration file's
/// own refusal, if any: reported when the merged table is refused too.
///
/// # Errors
/// `UnknownEnvVar` for a `SWARMD_*` name without `__` that starts with a
/// section (`CONFIG_SECTIONS`); `Env` naming the
/// variable for an empty key segment, a key under a non-table, or a value
/// the merged configuration refuses; else `file_error`.
pub(super) fn apply_env(
    table: &mut toml::Table,
    env: &Environment,
    file_error: Option<ConfigError>,
) -> Result<Vec<EnvKey>, ConfigError> {
    let base = table.clone();
    let mut keys = Vec::new();
    for (var, raw) in env.with_prefix(ENV_PREFIX) {
        if CLI_ENV_VARS.contains(&var) {
            continue;
        }
        let env_error = |message: String| ConfigError::Env {
            var: var.to_owned(),
            message,
        };
        let key = &var[ENV_PREFIX.len()..];
        if !key.contains("__") {
            let first = key.split('_').next().unwrap_or_default().to_lowercase();
            if CONFIG_SECTIONS.contains(&first.as_str()) {
                return Err(ConfigError::UnknownEnvVar {
                    var: var.to_owned(),
                });
            }
            continue;
        }
        let path: Vec<String> = key.split("__").map(str::to_lowercase).collect();
        if path.iter().any(String::is_empty) {
            return Err(env_error("empty key segment".to_owned()));
        }
        let value = env_value(raw);
        insert_path(table, &path, value.clone()).map_err(env_error)?;
        keys.push(EnvKey {
            path,
            var: var.to_owned(),
            value,
        });
    }
    let Err(message) = check(table) else {
        return Ok(keys);
    };
    if let Some(error) = file_error {
        return Err(error);
    }
    Err(blame(&base, &keys).unwrap_or_else(|| ConfigError::Env {
        var: keys.last().map(|key| key.var.clone()).unwrap_or_default(),
        message,
    }))
}

/// Whether `table` deserializes as a `Config`; the refusal on one line.
fn check(table: &toml::Table) -> Result<(), String> {
    Config::deserialize(toml::Value::Table(table.clone()))
        .map(drop)
        .map_err(|error| error.message().replace('\n', " "))
}

/// The first variable refused with the earlier ones and those for its table.
fn blame(base: &toml::Table, keys: &[EnvKey]) -> Option<ConfigError> {
    keys.iter().enumerate().find_map(|(index, key)| {
        let mut table = base.clone();
        let group = key.group();
        for (other_index, other) in keys.iter().enumerate() {
            if other_index <= index || other.path.starts_with(group) {
                insert_path(&mut table, &other.path, other.value.clone()).ok()?;
            }
        }
        check(&table).err().map(|message| ConfigError::Env {
            var: key.var.clone(),
            message,
        })
    })
}

/// A TOML value when `raw` is one, else `raw` as a string.
fn env_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("value = {raw}"))
        .ok()
        .and_then(|mut parsed| parsed.remove("value"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn insert_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Err("empty key".to_owned());
    };
    let mut current = table;
    for (depth, segment) in parents.iter().enumerate() {
        current = current
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| format!("`{}` is not a table", path[..=depth].join(".")))?;
    }
    current.insert(last.clone(), value);
    Ok(())
}

/// Marks the agents no `[agents.NAME]` table of the file defines as defined
/// by environment variables.
pub(super) fn mark_env_agents(config: &mut Config, file: &toml::Table) {
    let in_file = |name: &str| {
        file.get("agents")
            .and_then(toml::Value::as_table)
            .is_some_and(|agents| agents.contains_key(name))
    };
    for (name, agent) in &mut config.agents {
        if !in_file(name) {
            agent.origin = AgentOrigin::Env;
        }
    }
}

/// `error` with the source of the value it is about, when that is known: a
/// variable setting the key (or a table above it), the agent's own source,
/// or the configuration file when the file sets the key.
pub(super) fn attribute(
    error: ConfigError,
    config: &Config,
    file: &toml::Table,
    env: &[EnvKey],
) -> ConfigError {
    let Some(key) = error_key(&error) else {
        return error;
    };
    match origin_of(&key, config, file, env) {
        Some(origin) => ConfigError::Sourced {
            origin,
            error: Box::new(error),
        },
        None => error,
    }
}

/// The dotted key an error is about.
fn error_key(error: &ConfigError) -> Option<String> {
    match error {
        ConfigError::OutOfRange { key, .. }
        | ConfigError::Invalid { key, .. }
        | ConfigError::Unreadable { key, .. }
        | ConfigError::UnknownAgent { key, .. } => Some(key.clone()),
        ConfigError::KeyNotForKind { agent, .. } | ConfigError::MissingKey { agent, .. } => {
            Some(format!("agents.{agent}"))
        }
        ConfigError::UnknownLayer { agent, .. } => Some(format!("agents.{agent}.layers")),
        _ => None,
    }
}

/// `key` is `prefix` or a key under it.
fn under(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

fn origin_of(key: &str, config: &Config, file: &toml::Table, env: &[EnvKey]) -> Option<String> {
    if let Some(var) = env.iter().rev().find(|var| under(&var.dotted(), key)) {
        return Some(format!("environment variable {}", var.var));
    }
    if let Some(rest) = key.strip_prefix("agents.") {
        let agent: Option<(&String, &Agent)> = config
            .agents
            .iter()
            .filter(|(name, _)| under(name, rest))
            .max_by_key(|(name, _)| name.len());
        if let Some((name, agent)) = agent {
            return Some(agent.origin.describe(name, config.source.as_deref()));
        }
    }
    let path = config.source.as_ref()?;
    let segments: Vec<&str> = key.split('.').collect();
    let (last, parents) = segments.split_last()?;
    let mut table = file;
    for segment in parents {
        table = table.get(*segment)?.as_table()?;
    }
    table
        .contains_key(*last)
        .then(|| path.display().to_string())
}
