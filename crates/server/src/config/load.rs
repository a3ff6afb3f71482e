//! Loading: defaults < file < `SWARMD_*` environment < CLI flags, then
//! resolution of the parts that read files, then validation.
//!
//! Environment scheme: `SWARMD_` + the key path in upper case, sections
//! joined by a double underscore: `SWARMD_SERVER__BIND=0.0.0.0:7700`,
//! `SWARMD_AUTH__WORKER_TOKEN_TTL_SECS=600`,
//! `SWARMD_LUA__MIDDLEWARE__AUDIT__SCRIPT=/etc/swarmd/audit.lua`. Path
//! segments are lower-cased. A value is read as a TOML value when it parses as
//! one (`600`, `true`, `["failed", "blocked"]`, `"quoted"`), else as a plain
//! string. The variables in `CLI_ENV_VARS` are flag fallbacks, not keys; any
//! other `SWARMD_*` variable without `__` is refused as a likely typo.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::agent::{AgentKind, EnvSpec, EnvVars};
use super::agents_dir::load_agents_dir;
use super::error::ConfigError;
use super::locations::default_state_dir;
use super::sections::StoreBackend;
use super::{Config, validate};
use crate::environment::Environment;

/// The system-wide configuration file, read when `--config` is not given, it
/// exists and no per-user file does (`locations::config_candidates`).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/swarmd/swarmd.toml";

/// Prefix of configuration environment variables.
pub const ENV_PREFIX: &str = "SWARMD_";

/// `SWARMD_*` variables that stand in for CLI flags rather than config keys.
pub const CLI_ENV_VARS: [&str; 4] = [
    "SWARMD_CONFIG",
    "SWARMD_URL",
    "SWARMD_TOKEN",
    "SWARMD_LOG_FORMAT",
];

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

/// CLI flags that override configuration keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--bind`: `server.bind`.
    pub bind: Option<SocketAddr>,
    /// `--state-dir`: `store.state_dir`.
    pub state_dir: Option<PathBuf>,
    /// `--ephemeral`: `store.backend = "memory"`.
    pub ephemeral: bool,
}

impl Config {
    /// Builds the effective configuration from all sources and validates it.
    ///
    /// # Errors
    /// A `ConfigError` naming the key and its source: the file and line for
    /// file errors, the variable for environment errors.
    pub fn load(
        path: &ConfigPath,
        env: &Environment,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut table = defaults_from_env(env);
        let source = match read_file(path)? {
            Some((path, text)) => {
                merge(&mut table, parse_file(&path, &text)?);
                Some(path)
            }
            None => None,
        };
        apply_env(&mut table, env)?;
        let mut config = Config::deserialize(toml::Value::Table(table)).map_err(|error| {
            ConfigError::Invalid {
                key: "configuration".to_owned(),
                reason: error.message().to_owned(),
            }
        })?;
        config.source = source;
        overrides.apply(&mut config);
        resolve(&mut config, env)?;
        validate::validate(&config)?;
        Ok(config)
    }
}

impl Overrides {
    fn apply(&self, config: &mut Config) {
        if let Some(bind) = self.bind {
            config.server.bind = bind;
        }
        if let Some(state_dir) = &self.state_dir {
            config.store.state_dir = state_dir.clone();
        }
        if self.ephemeral {
            config.store.backend = StoreBackend::Memory;
        }
    }
}

/// The defaults that come from the environment: `store.state_dir` (see
/// `locations::default_state_dir`).
fn defaults_from_env(env: &Environment) -> toml::Table {
    let mut table = toml::Table::new();
    if let Some(dir) = default_state_dir(env).and_then(|dir| dir.to_str().map(str::to_owned)) {
        let mut store = toml::Table::new();
        store.insert("state_dir".into(), toml::Value::String(dir));
        table.insert("store".into(), toml::Value::Table(store));
    }
    table
}

fn read_file(path: &ConfigPath) -> Result<Option<(PathBuf, String)>, ConfigError> {
    let (path, required) = match path {
        ConfigPath::Explicit(path) => (path, true),
        ConfigPath::IfPresent(path) => (path, false),
        ConfigPath::None => return Ok(None),
    };
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some((path.clone(), text))),
        Err(error) if !required && error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read {
            path: path.clone(),
            source,
        }),
    }
}

/// Parses the file twice: typed, so errors carry the line of the offending
/// key, then as a table to merge with the other sources.
fn parse_file(path: &Path, text: &str) -> Result<toml::Table, ConfigError> {
    let file_error = |error: toml::de::Error| {
        let line = error
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        match unknown_key(error.message()) {
            Some(key) => ConfigError::UnknownKey {
                key,
                path: path.to_owned(),
                line,
            },
            None => ConfigError::Parse {
                path: path.to_owned(),
                line,
                message: error.message().replace('\n', " "),
            },
        }
    };
    toml::from_str::<Config>(text).map_err(file_error)?;
    toml::from_str::<toml::Table>(text).map_err(file_error)
}

/// The key of serde's "unknown field `x`, expected ..." message.
fn unknown_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// Deep merge: tables merge key by key, anything else in `top` replaces.
fn merge(base: &mut toml::Table, top: toml::Table) {
    for (key, value) in top {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base)), toml::Value::Table(top)) => merge(base, top),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Applies every configuration variable in name order, checking after each
/// one so an error names the variable that caused it.
fn apply_env(table: &mut toml::Table, env: &Environment) -> Result<(), ConfigError> {
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
            return Err(ConfigError::UnknownEnvVar {
                var: var.to_owned(),
            });
        }
        let path: Vec<String> = key.split("__").map(str::to_lowercase).collect();
        if path.iter().any(String::is_empty) {
            return Err(env_error("empty key segment".to_owned()));
        }
        insert_path(table, &path, env_value(raw)).map_err(env_error)?;
        Config::deserialize(toml::Value::Table(table.clone()))
            .map_err(|error| env_error(error.message().replace('\n', " ")))?;
    }
    Ok(())
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

/// Reads what the configuration points at, once: agents_dir files, system
/// prompt files, and inherited child environment variables.
fn resolve(config: &mut Config, env: &Environment) -> Result<(), ConfigError> {
    if let Some(url) = &mut config.server.base_url {
        let trimmed = url.trim_end_matches('/').len();
        url.truncate(trimmed);
    }
    if let Some(dir) = &config.agents_dir {
        for (name, agent) in load_agents_dir(&dir.path)? {
            if let Some(existing) = config.agents.get(&name) {
                return Err(ConfigError::DuplicateAgent {
                    name,
                    path: agent.origin.unwrap_or_default(),
                    other: existing.origin.clone(),
                });
            }
            config.agents.insert(name, agent);
        }
    }
    config.agents.retain(|_, agent| agent.enabled);
    for (name, agent) in &mut config.agents {
        match &mut agent.kind {
            AgentKind::Process(process) => {
                process.resolved_env = match &process.env {
                    EnvSpec::Set(vars) => vars.clone(),
                    EnvSpec::Inherit(names) => inherit(names, env),
                };
            }
            AgentKind::Operator(operator) => {
                if let Some(file) = &operator.system_prompt_file {
                    let text = std::fs::read_to_string(file).map_err(|source| {
                        ConfigError::Unreadable {
                            key: format!("agents.{name}.system_prompt_file"),
                            path: file.clone(),
                            source,
                        }
                    })?;
                    operator.system_prompt = Some(text);
                }
            }
            AgentKind::Lua(_) | AgentKind::Remote(_) => {}
        }
    }
    Ok(())
}

/// The named variables that are set in swarmd's environment; unset ones are omitted.
fn inherit(names: &[String], env: &Environment) -> EnvVars {
    names
        .iter()
        .filter_map(|name| Some((name.clone(), env.get(name)?.to_owned())))
        .collect()
}
