//! Validation of a merged configuration: ranges, names, references between
//! sections, URLs parsed by what uses them (`store.url` by the PostgreSQL
//! driver, `cluster.advertise_url` as the URL the peers' client requests),
//! and the file checks that are cheap (scripts readable, program paths
//! executable). The first problem found is returned. The files only the
//! daemon reads at start (the PostgreSQL password) are checked by
//! `Config::check_start_files`, which `check-config` calls and client
//! commands do not.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::str::FromStr;

use swarmd_engine::task::{MAX_ATTEMPTS, MAX_COST_USD, MAX_POLICY_SECS};

use super::agent::{Agent, AgentKind, MAX_TOOL_TIMEOUT_SECS};
use super::error::ConfigError;
use super::{Config, StoreBackend};

/// Hint layers an agent may name, besides `lua:<name>`. The base layers
/// (`audit`, `long_hold`) always apply and are not named.
pub const HINT_LAYERS: [&str; 3] = ["main_ai", "senior_escalation", "operator_delegate"];

const MINUTE: u64 = 60;
const DAY: u64 = 86_400;
const GIB: u64 = 1024 * 1024 * 1024;

pub(super) fn validate(config: &Config) -> Result<(), ConfigError> {
    validate_server(config)?;
    validate_auth(config)?;
    let limits = &config.limits;
    range(
        "limits.max_running",
        limits.max_running.into(),
        1,
        1_000_000,
    )?;
    range("limits.max_body_bytes", limits.max_body_bytes, 1024, GIB)?;
    range("limits.inline_max_bytes", limits.inline_max_bytes, 1, GIB)?;
    range(
        "limits.max_output_bytes_per_attempt",
        limits.max_output_bytes_per_attempt,
        1024,
        1024 * GIB,
    )?;
    range(
        "limits.write_rate_per_sec",
        limits.write_rate_per_sec.into(),
        0,
        1_000_000,
    )?;
    range(
        "limits.write_burst",
        limits.write_burst.into(),
        1,
        10_000_000,
    )?;
    range(
        "limits.login_rate_per_min",
        limits.login_rate_per_min.into(),
        0,
        1_000_000,
    )?;
    range(
        "limits.streams_per_caller",
        limits.streams_per_caller.into(),
        1,
        100_000,
    )?;
    range(
        "limits.max_operator_sessions",
        limits.max_operator_sessions.into(),
        1,
        10_000_000,
    )?;
    range(
        "limits.max_streams",
        limits.max_streams.into(),
        1,
        1_000_000,
    )?;
    range(
        "limits.max_spawn_depth",
        limits.max_spawn_depth.into(),
        0,
        64,
    )?;
    let defaults = &config.defaults;
    range(
        "defaults.max_attempts",
        defaults.max_attempts.into(),
        1,
        MAX_ATTEMPTS.into(),
    )?;
    range(
        "defaults.attempt_timeout_secs",
        defaults.attempt_timeout_secs,
        1,
        MAX_POLICY_SECS,
    )?;
    range(
        "defaults.long_hold_warn_secs",
        defaults.long_hold_warn_secs,
        1,
        MAX_POLICY_SECS,
    )?;
    if let Some(tokens) = defaults.max_tokens {
        range("defaults.max_tokens", tokens, 1, u64::MAX)?;
    }
    if let Some(cost) = defaults.max_cost_usd
        && !(cost > 0.0 && cost <= MAX_COST_USD)
    {
        return Err(invalid(
            "defaults.max_cost_usd",
            format!("must be more than 0 and at most {MAX_COST_USD}, not {cost}"),
        ));
    }
    range("ws.ping_secs", config.ws.ping_secs, 1, 3600)?;
    range("ws.park_max", config.ws.park_max.into(), 1, 1_000_000)?;
    // Clients drop a call silent for long: progress comes at least every 10 s.
    range("mcp.progress_ms", config.mcp.progress_ms, 100, 10_000)?;
    range("mcp.presence_secs", config.mcp.presence_secs, 5, 3600)?;
    range("mcp.max_sessions", config.mcp.max_sessions, 1, 100_000)?;
    range(
        "mcp.max_sessions_per_credential",
        config.mcp.max_sessions_per_credential,
        1,
        100_000,
    )?;
    range("senior.timeout_secs", config.senior.timeout_secs, 1, DAY)?;
    if let Some(agent) = config
        .senior
        .agent
        .as_ref()
        .filter(|agent| !config.agents.contains_key(*agent))
    {
        return Err(ConfigError::UnknownAgent {
            key: "senior.agent".to_owned(),
            agent: agent.clone(),
        });
    }
    validate_lua(config)?;
    range("retention.days", config.retention.days.into(), 1, 36_500)?;
    range(
        "spawner.kill_grace_secs",
        config.spawner.kill_grace_secs,
        0,
        300,
    )?;
    range(
        "spawner.session_wait_secs",
        config.spawner.session_wait_secs,
        0,
        7 * 86_400,
    )?;
    for (name, agent) in &config.agents {
        validate_agent(config, name, agent)?;
    }
    Ok(())
}

fn validate_server(config: &Config) -> Result<(), ConfigError> {
    range(
        "server.shutdown_grace_secs",
        config.server.shutdown_grace_secs,
        0,
        3600,
    )?;
    let server = &config.server;
    range(
        "server.max_connections",
        server.max_connections,
        16,
        1_000_000,
    )?;
    range(
        "server.max_connections_per_peer",
        server.max_connections_per_peer,
        1,
        1_000_000,
    )?;
    range(
        "server.header_timeout_secs",
        server.header_timeout_secs,
        1,
        3600,
    )?;
    range(
        "server.body_timeout_secs",
        server.body_timeout_secs,
        1,
        86_400,
    )?;
    for host in &server.allowed_hosts {
        if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(invalid(
                "server.allowed_hosts",
                format!("`{host}` is not a host name"),
            ));
        }
    }
    for origin in &server.allowed_origins {
        if super::hosts::parse_origin(origin).is_none() {
            return Err(invalid(
                "server.allowed_origins",
                format!("`{origin}` is not an origin (scheme://host[:port])"),
            ));
        }
    }
    if let Some(url) = &config.server.base_url {
        let host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if host.is_none_or(|host| host.is_empty() || host.contains(char::is_whitespace)) {
            return Err(invalid(
                "server.base_url",
                format!("`{url}` is not an http:// or https:// URL"),
            ));
        }
    }
    if config.store.state_dir.as_os_str().is_empty() {
        return Err(invalid("store.state_dir", "must not be empty"));
    }
    range(
        "store.memory_keep_finished",
        config.store.memory_keep_finished,
        1,
        100_000_000,
    )?;
    range("store.pg_pool", u64::from(config.store.pg_pool), 1, 256)?;
    if config.store.backend == StoreBackend::Postgres
        && config
            .store
            .url
            .as_ref()
            .is_none_or(|url| url.0.trim().is_empty())
    {
        return Err(invalid(
            "store.url",
            "must name the database when store.backend = \"postgres\"",
        ));
    }
    if config.store.backend == StoreBackend::Postgres
        && let Some(url) = &config.store.url
    {
        store_url(&url.0)?;
    }
    // The password file is read at start: one that does not exist is a
    // configuration error. One this user may not read is found by
    // `check_start_files` (check-config), not here: a client reading the
    // same file for the daemon's URL never reads the password.
    if config.store.backend == StoreBackend::Postgres
        && let Some(path) = &config.store.password_file
        && let Err(source) = std::fs::metadata(path)
        && source.kind() == std::io::ErrorKind::NotFound
    {
        return Err(ConfigError::Unreadable {
            key: "store.password_file".to_owned(),
            path: path.clone(),
            source,
        });
    }
    if let Some(cluster) = &config.cluster {
        if config.store.backend != StoreBackend::Postgres {
            return Err(invalid(
                "cluster",
                "several nodes share one PostgreSQL database: [cluster] needs \
                 store.backend = \"postgres\"",
            ));
        }
        range("cluster.node_lease_secs", cluster.node_lease_secs, 1, 300)?;
        if let Some(id) = &cluster.node_id
            && uuid::Uuid::parse_str(id).is_err()
        {
            return Err(invalid("cluster.node_id", "must be a UUID"));
        }
        if let Some(url) = &cluster.advertise_url {
            advertise_url(url)?;
        }
    }
    Ok(())
}

/// `store.url` as the PostgreSQL store reads it: parsed by the driver
/// (`tokio_postgres::Config`, as `swarmd_postgres::PgOptions` does), naming
/// a host to connect to. The value is shown with its passwords redacted,
/// never the parser's message, which may quote it.
fn store_url(url: &str) -> Result<(), ConfigError> {
    let shown = swarmd_postgres::redact_url(url);
    let parsed = tokio_postgres::Config::from_str(url).map_err(|_| {
        invalid(
            "store.url",
            format!(
                "`{shown}` is not a PostgreSQL URL (postgres://USER@HOST:PORT/DATABASE) or \
                 key=value connection string (host=HOST user=USER dbname=DATABASE)"
            ),
        )
    })?;
    if parsed.get_hosts().is_empty() && parsed.get_hostaddrs().is_empty() {
        return Err(invalid(
            "store.url",
            format!("`{shown}` names no host to connect to (postgres://HOST/… or host=HOST)"),
        ));
    }
    Ok(())
}

/// `cluster.advertise_url`: an absolute `http://` or `https://` URL with a
/// host, as the peers' HTTP client parses it (the `url` crate), the
/// request's path appended to it: no user or password (the nodes table
/// and the logs show it), no query or fragment.
fn advertise_url(text: &str) -> Result<(), ConfigError> {
    const KEY: &str = "cluster.advertise_url";
    let shown = swarmd_postgres::redact_url(text);
    let url = url::Url::parse(text).map_err(|error| {
        invalid(
            KEY,
            format!("`{shown}` is not an absolute http:// or https:// URL: {error}"),
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(
            KEY,
            format!("`{shown}` must be an http:// or https:// URL"),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid(KEY, format!("`{shown}` names no host")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            KEY,
            format!("`{shown}` must not carry a user or password"),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            KEY,
            format!(
                "`{shown}` must not have a query or fragment: request paths are appended to it"
            ),
        ));
    }
    Ok(())
}

impl Config {
    /// The checks of files only the daemon reads, at start: the PostgreSQL
    /// password file can be opened for reading by this user (its contents
    /// are not read). `check-config` makes them, so a configuration it
    /// accepts also starts; client commands, which read the configuration
    /// for the daemon's URL alone, do not.
    ///
    /// # Errors
    /// `Unreadable` naming `store.password_file` and the path.
    pub fn check_start_files(&self) -> Result<(), ConfigError> {
        if self.store.backend == StoreBackend::Postgres
            && let Some(path) = &self.store.password_file
        {
            let unreadable = |source| ConfigError::Unreadable {
                key: "store.password_file".to_owned(),
                path: path.clone(),
                source,
            };
            let file = File::open(path).map_err(unreadable)?;
            if file.metadata().map_err(unreadable)?.is_dir() {
                return Err(unreadable(std::io::Error::from(
                    std::io::ErrorKind::IsADirectory,
                )));
            }
        }
        Ok(())
    }
}

fn validate_auth(config: &Config) -> Result<(), ConfigError> {
    let auth = &config.auth;
    range(
        "auth.max_token_ttl_secs",
        auth.max_token_ttl_secs,
        MINUTE,
        30 * DAY,
    )?;
    range(
        "auth.worker_token_ttl_secs",
        auth.worker_token_ttl_secs,
        MINUTE,
        auth.max_token_ttl_secs,
    )?;
    range(
        "auth.session_idle_secs",
        auth.session_idle_secs,
        MINUTE,
        365 * DAY,
    )?;
    range(
        "auth.role_takeover_secs",
        auth.role_takeover_secs,
        1,
        auth.session_idle_secs,
    )
}

fn validate_lua(config: &Config) -> Result<(), ConfigError> {
    let lua = &config.lua;
    range("lua.memory_limit_mb", lua.memory_limit_mb, 1, 4096)?;
    range(
        "lua.instruction_limit",
        lua.instruction_limit,
        1000,
        u64::MAX,
    )?;
    range("lua.timeout_secs", lua.timeout_secs, 1, 3600)?;
    for (name, middleware) in &lua.middleware {
        name_rule(&format!("lua.middleware.{name}"), name)?;
        readable(&format!("lua.middleware.{name}.script"), &middleware.script)?;
    }
    Ok(())
}

fn validate_agent(config: &Config, name: &str, agent: &Agent) -> Result<(), ConfigError> {
    let key = |field: &str| format!("agents.{name}.{field}");
    name_rule(&format!("agents.{name}"), name)?;
    if let Some(concurrency) = agent.concurrency {
        range(&key("concurrency"), concurrency.into(), 1, 1_000_000)?;
    }
    for layer in &agent.layers {
        let known = match layer.strip_prefix("lua:") {
            Some(middleware) => config.lua.middleware.contains_key(middleware),
            None => HINT_LAYERS.contains(&layer.as_str()),
        };
        if !known {
            return Err(ConfigError::UnknownLayer {
                agent: name.to_owned(),
                layer: layer.clone(),
            });
        }
    }
    validate_tool(name, agent)?;
    let worktree = match &agent.kind {
        AgentKind::Process(process) => process.worktree.as_ref(),
        AgentKind::Operator(operator) => operator.worktree.as_ref(),
        AgentKind::Lua(_) | AgentKind::Remote(_) | AgentKind::Merge(_) => None,
    };
    if let Some(worktree) = worktree {
        worktree
            .check_bootstrap()
            .map_err(|(field, reason)| invalid(&key(&format!("worktree.{field}")), reason))?;
    }
    // An operator's SubAgent is not started by swarmd: nothing could run its
    // setup before it or hand it ports.
    if let AgentKind::Operator(operator) = &agent.kind
        && let Some(worktree) = &operator.worktree
    {
        for (field, set) in [
            ("setup", worktree.setup.is_some()),
            ("ports", worktree.ports.is_some()),
        ] {
            if set {
                return Err(invalid(
                    &key(&format!("worktree.{field}")),
                    "applies to process agents only",
                ));
            }
        }
    }
    match &agent.kind {
        AgentKind::Process(process) => {
            // A bare name is looked up in PATH when spawned; a path is checked now.
            if process.program.components().count() > 1 {
                executable(&key("program"), &process.program)?;
            }
            if let Some(cwd) = process.cwd.as_ref().filter(|cwd| !cwd.is_dir()) {
                return Err(invalid(
                    &key("cwd"),
                    format!("{} is not a directory", cwd.display()),
                ));
            }
            if let Some(timeout) = process.timeout_secs {
                range(&key("timeout_secs"), timeout, 1, 7 * DAY)?;
            }
            range(
                &key("max_output_bytes"),
                process.max_output_bytes,
                1,
                4 * GIB,
            )?;
        }
        AgentKind::Lua(lua) => readable(&key("script"), &lua.script)?,
        AgentKind::Remote(remote) => {
            if let Some(timeout) = remote.timeout_secs {
                range(&key("timeout_secs"), timeout, 1, 7 * DAY)?;
            }
            range(
                &key("max_output_bytes"),
                remote.max_output_bytes,
                1,
                4 * GIB,
            )?;
        }
        AgentKind::Merge(merge) => {
            // The repository and names are checked with git when the
            // spawner is linked (swarmd_git::merge::check).
            if !merge.repo.is_absolute() {
                return Err(invalid(&key("repo"), "must be an absolute path"));
            }
            range(&key("max_branches"), merge.max_branches.into(), 1, 1_000)?;
        }
        AgentKind::Operator(operator) => {
            if let Some(role) = &operator.operator_role {
                name_rule(&key("operator_role"), role)?;
            }
            let binding = operator.worker_binding.as_ref();
            if binding.is_some_and(|binding| binding.subagent_type.trim().is_empty()) {
                return Err(invalid(
                    &key("worker_binding.subagent_type"),
                    "must not be empty",
                ));
            }
        }
    }
    Ok(())
}

/// `expose_as_tool` and `tool_timeout_secs` (docs/mcp.md, Agents as tools):
/// the name must be a tool name every client takes and no built-in tool's,
/// and the schema must describe the object a tool call's arguments are.
fn validate_tool(name: &str, agent: &Agent) -> Result<(), ConfigError> {
    let key = |field: &str| format!("agents.{name}.{field}");
    if let Some(secs) = agent.tool_timeout_secs {
        if !agent.expose_as_tool {
            return Err(invalid(
                &key("tool_timeout_secs"),
                "applies only to an agent with expose_as_tool = true",
            ));
        }
        range(&key("tool_timeout_secs"), secs, 1, MAX_TOOL_TIMEOUT_SECS)?;
    }
    if !agent.expose_as_tool {
        return Ok(());
    }
    let object = Some(&serde_json::Value::from("object"));
    if let Some(schema) = &agent.input_schema
        && schema.get("type") != object
    {
        return Err(invalid(
            &key("input_schema"),
            "an agent exposed as a tool needs `type = \"object\"` at the top of its \
             input_schema: MCP tool arguments are an object",
        ));
    }
    Ok(())
}

fn range(key: &str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key: key.to_owned(),
            value,
            min,
            max,
        })
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Names (agents, middleware, roles): 1 to 64 of `[A-Za-z0-9._-]`, starting
/// with a letter or digit, so they are safe in URLs, layer keys and logs.
fn name_rule(key: &str, name: &str) -> Result<(), ConfigError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if first_ok && rest_ok && name.len() <= 64 {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!(
                "`{name}` is not a valid name (1-64 of A-Z a-z 0-9 . _ -, starting alphanumeric)"
            ),
        ))
    }
}

fn readable(key: &str, path: &Path) -> Result<(), ConfigError> {
    File::open(path)
        .map(drop)
        .map_err(|source| ConfigError::Unreadable {
            key: key.to_owned(),
            path: path.to_owned(),
            source,
        })
}

fn executable(key: &str, path: &Path) -> Result<(), ConfigError> {
    let metadata = std::fs::metadata(path).map_err(|source| ConfigError::Unreadable {
        key: key.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("{} is not an executable file", path.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::ClusterConfig;
    use crate::sections::PgUrl;

    fn on_postgres(url: &str) -> Config {
        let mut config = Config::default();
        config.store.backend = StoreBackend::Postgres;
        config.store.url = Some(PgUrl(url.to_owned()));
        config
    }

    #[test]
    fn a_store_url_is_what_the_postgres_driver_connects_with() {
        for url in [
            "postgres://swarmd@db.internal:5432/swarmd",
            "postgresql://swarmd:pw@10.0.0.1/swarmd?application_name=x",
            "host=db.internal user=swarmd dbname=swarmd",
            "host=/var/run/postgresql dbname=swarmd",
        ] {
            validate(&on_postgres(url)).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        for (url, said) in [
            ("http://127.0.0.1:54719/audit1", "is not a PostgreSQL URL"),
            ("postgres://u:pw@[bad", "is not a PostgreSQL URL"),
            ("postgres:///swarmd", "names no host"),
            ("dbname=swarmd password=pw", "names no host"),
        ] {
            let error = validate(&on_postgres(url)).unwrap_err().to_string();
            assert!(error.contains("`store.url`"), "{url}: {error}");
            assert!(error.contains(said), "{url}: {error}");
            assert!(!error.contains("pw"), "a password is in: {error}");
        }
        // Another backend never reads it.
        let mut sqlite = on_postgres("http://x");
        sqlite.store.backend = StoreBackend::Sqlite;
        validate(&sqlite).unwrap();
    }

    #[test]
    fn an_advertise_url_is_an_absolute_http_url_with_a_host() {
        let with = |url: &str| {
            let mut config = on_postgres("postgres://h/d");
            config.cluster = Some(ClusterConfig {
                advertise_url: Some(url.to_owned()),
                ..ClusterConfig::default()
            });
            validate(&config)
        };
        for url in [
            "http://node-a.internal:7070",
            "https://10.0.0.1/swarmd/",
            "http://[::1]:7070",
        ] {
            with(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        for url in [
            "http://node a:7841",
            "node-a:7070",
            "ftp://node-a",
            "http://",
            "http://u:secret@node-a:7070",
            "http://node-a:7070/?x=1",
            "http://node-a:7070/#top",
            "http://node-a:99999",
        ] {
            let error = with(url)
                .expect_err(&format!("{url} was accepted"))
                .to_string();
            assert!(error.contains("`cluster.advertise_url`"), "{url}: {error}");
            assert!(!error.contains("secret"), "a password is in: {error}");
        }
    }

    #[test]
    fn a_password_file_check_config_cannot_read_is_refused_there_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = on_postgres("postgres://h/d");
        let readable = dir.path().join("pg-password");
        std::fs::write(&readable, "hunter2\n").unwrap();
        config.store.password_file = Some(readable.clone());
        validate(&config).unwrap();
        config.check_start_files().unwrap();

        // A directory opens but does not read.
        config.store.password_file = Some(dir.path().to_owned());
        validate(&config).unwrap();
        let error = config.check_start_files().unwrap_err().to_string();
        assert!(error.contains("`store.password_file`"), "{error}");

        // A file without the read bit, unless this runs as root (which reads it).
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o000)).unwrap();
        config.store.password_file = Some(readable.clone());
        validate(&config).unwrap();
        if File::open(&readable).is_err() {
            let error = config.check_start_files().unwrap_err().to_string();
            assert!(error.contains("`store.password_file`"), "{error}");
            assert!(error.contains(&readable.display().to_string()), "{error}");
            assert!(!error.contains("hunter2"), "{error}");
        }

        // Not read on another backend.
        config.store.backend = StoreBackend::Sqlite;
        config.store.password_file = Some(dir.path().to_owned());
        config.check_start_files().unwrap();
    }
}
