//! Loading: defaults < file < `SWARMD_*` environment < CLI flags, merged
//! before anything is checked; then resolution of the parts that read files
//! (agent files join here), then one validation of the whole. An error names
//! the source of the value it is about (`sources`).
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

use super::agent::{Agent, AgentKind, EnvSpec, EnvVars};
use super::agents_dir::load_agents_dir;
use super::error::ConfigError;
use super::locations::{ConfigPath, default_state_dir};
use super::sections::StoreBackend;
use super::{Config, sources, validate};
use crate::environment::Environment;

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
        let (source, file, file_error) = match read_file(path)? {
            Some((path, text)) => {
                let (file, file_error) = parse_file(&path, &text)?;
                merge(&mut table, file.clone());
                (Some(path), file, file_error)
            }
            None => (None, toml::Table::new(), None),
        };
        let env_keys = sources::apply_env(&mut table, env, file_error)?;
        let mut config = Config::deserialize(toml::Value::Table(table)).map_err(|error| {
            ConfigError::Invalid {
                key: "configuration".to_owned(),
                reason: error.message().to_owned(),
            }
        })?;
        config.source = source;
        sources::mark_env_agents(&mut config, &file);
        overrides.apply(&mut config);
        resolve(&mut config, env)
            .and_then(|()| validate::validate(&config))
            .map_err(|error| sources::attribute(error, &config, &file, &env_keys))?;
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

/// Parses the file as a table to merge with the other sources, and typed,
/// so an error carries the line of the offending key. A syntax error
/// refuses the file; the typed refusal is returned beside the table, to be
/// reported only when the merged configuration is refused too (environment
/// variables may complete what the file leaves out).
fn parse_file(path: &Path, text: &str) -> Result<(toml::Table, Option<ConfigError>), ConfigError> {
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
    let table = toml::from_str::<toml::Table>(text).map_err(file_error)?;
    let typed = toml::from_str::<Config>(text).err().map(file_error);
    Ok((table, typed))
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
                let describe =
                    |agent: &Agent| agent.origin.describe(&name, config.source.as_deref());
                return Err(ConfigError::DuplicateAgent {
                    first: describe(existing),
                    second: describe(&agent),
                    name,
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
            AgentKind::Lua(_) | AgentKind::Remote(_) | AgentKind::Merge(_) => {}
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
