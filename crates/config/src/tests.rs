//! Tests of `Config::load`: sources and precedence, error text, defaults,
//! agents_dir merging, validation and the printed form.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::*;
use crate::environment::Environment;

/// A temporary directory holding `swarmd.toml` with `text`.
pub(super) struct Fixture {
    pub(super) dir: tempfile::TempDir,
}

impl Fixture {
    pub(super) fn new(text: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("swarmd.toml"), text).unwrap();
        Fixture { dir }
    }

    pub(super) fn path(&self) -> PathBuf {
        self.dir.path().join("swarmd.toml")
    }

    pub(super) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    pub(super) fn load(
        &self,
        env: &[(&str, &str)],
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let env = Environment::from_pairs(env.iter().copied());
        Config::load(&ConfigPath::Explicit(self.path()), &env, overrides)
    }
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn empty_sources_give_the_spec_defaults() {
    let config = Config::load(
        &ConfigPath::None,
        &Environment::default(),
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(config.server.bind, addr("127.0.0.1:7700"));
    assert_eq!(config.server.shutdown_grace_secs, 30);
    assert_eq!(config.store.backend, StoreBackend::Sqlite);
    assert_eq!(config.store.synchronous, Synchronous::Full);
    assert_eq!(config.store.state_dir, Path::new(DEFAULT_STATE_DIR));
    assert_eq!(config.auth.worker_token_ttl_secs, 1800);
    assert_eq!(config.auth.max_token_ttl_secs, 86_400);
    assert_eq!(config.auth.session_idle_secs, 86_400);
    assert!(!config.auth.loopback_login);
    assert_eq!(config.limits.max_running, 1024);
    assert_eq!(config.limits.max_body_bytes, 8 * 1024 * 1024);
    assert_eq!(config.limits.inline_max_bytes, 256 * 1024);
    assert_eq!(config.limits.max_spawn_depth, 4);
    assert_eq!(config.defaults.max_attempts, 1);
    assert_eq!(config.defaults.retry_on, [RetryOn::Failed]);
    assert_eq!(config.defaults.attempt_timeout_secs, 1800);
    assert_eq!(config.defaults.long_hold_warn_secs, 600);
    assert_eq!((config.ws.ping_secs, config.ws.park_max), (20, 10_000));
    assert_eq!(config.senior.timeout_secs, 600);
    assert_eq!(config.lua.memory_limit_mb, 32);
    assert_eq!(config.lua.instruction_limit, 100_000_000);
    assert_eq!(config.lua.timeout_secs, 30);
    assert_eq!(config.retention.days, 30);
    assert_eq!(config.spawner.kill_grace_secs, 5);
    assert!(config.agents.is_empty() && config.agents_dir.is_none());
}

#[test]
fn file_then_env_then_flags_later_wins() {
    let fixture = Fixture::new(
        "[server]\nbind = \"127.0.0.1:1000\"\nshutdown_grace_secs = 7\n\
         [store]\nstate_dir = \"/from/file\"\n",
    );
    let env = [
        ("SWARMD_SERVER__BIND", "127.0.0.1:2000"),
        ("SWARMD_AUTH__WORKER_TOKEN_TTL_SECS", "600"),
        ("SWARMD_DEFAULTS__RETRY_ON", "[\"failed\", \"blocked\"]"),
        ("STATE_DIRECTORY", "/from/systemd"),
        ("SWARMD_URL", "http://ignored"),
    ];
    let config = fixture.load(&env, &Overrides::default()).unwrap();
    assert_eq!(config.server.bind, addr("127.0.0.1:2000"), "env beats file");
    assert_eq!(config.server.shutdown_grace_secs, 7, "file beats default");
    assert_eq!(config.auth.worker_token_ttl_secs, 600);
    assert_eq!(
        config.defaults.retry_on,
        [RetryOn::Failed, RetryOn::Blocked]
    );
    assert_eq!(
        config.store.state_dir,
        Path::new("/from/file"),
        "file beats $STATE_DIRECTORY"
    );
    assert_eq!(config.source.as_deref(), Some(fixture.path().as_path()));

    let flags = Overrides {
        bind: Some(addr("127.0.0.1:3000")),
        state_dir: Some("/from/flag".into()),
        ephemeral: true,
    };
    let config = fixture.load(&env, &flags).unwrap();
    assert_eq!(config.server.bind, addr("127.0.0.1:3000"), "flag beats env");
    assert_eq!(config.store.state_dir, Path::new("/from/flag"));
    assert_eq!(config.store.backend, StoreBackend::Memory);
}

#[test]
fn state_directory_is_the_default_state_dir_first_path_only() {
    let env = Environment::from_pairs([("STATE_DIRECTORY", "/var/lib/swarmd:/var/lib/other")]);
    let config = Config::load(&ConfigPath::None, &env, &Overrides::default()).unwrap();
    assert_eq!(config.store.state_dir, Path::new("/var/lib/swarmd"));
}

#[test]
fn unknown_key_names_key_file_and_line() {
    let fixture = Fixture::new("[server]\nbind = \"127.0.0.1:1\"\n\n[auth]\nworker_ttl = 5\n");
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "unknown key `worker_ttl` in {} at line 5",
            fixture.path().display()
        )
    );
}

#[test]
fn unknown_key_inside_an_agent_and_section_are_located() {
    let fixture =
        Fixture::new("[agents.echo]\nkind = \"process\"\nprogram = \"cat\"\nprogramm = \"x\"\n");
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    assert!(
        matches!(&error, ConfigError::UnknownKey { key, line: Some(4), .. } if key == "programm"),
        "{error}"
    );

    let fixture = Fixture::new("[srever]\n");
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    assert!(
        matches!(&error, ConfigError::UnknownKey { key, line: Some(1), .. } if key == "srever"),
        "{error}"
    );
}

#[test]
fn type_errors_name_file_and_line() {
    let fixture = Fixture::new("[server]\n\nbind = \"not an address\"\n");
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("{} at line 3:", fixture.path().display())),
        "{text}"
    );
    assert!(!text.contains('\n'));
}

#[test]
fn environment_errors_name_the_variable() {
    let fixture = Fixture::new("");
    let error = fixture
        .load(&[("SWARMD_SERVER__BIMD", "x")], &Overrides::default())
        .unwrap_err();
    assert!(
        matches!(&error, ConfigError::Env { var, message } if var == "SWARMD_SERVER__BIMD" && message.contains("bimd")),
        "{error}"
    );
    let error = fixture
        .load(&[("SWARMD_SERVER_BIND", "x")], &Overrides::default())
        .unwrap_err();
    assert!(
        matches!(error, ConfigError::UnknownEnvVar { .. }),
        "{error}"
    );
    // Names that start with no section are a tool's own, not configuration.
    fixture
        .load(
            &[("SWARMD_ADMIN_TOKEN", "x"), ("SWARMD_TOOLS_DIR", "/tmp")],
            &Overrides::default(),
        )
        .unwrap();
    let error = fixture
        .load(
            &[("SWARMD_LIMITS__MAX_RUNNING", "many")],
            &Overrides::default(),
        )
        .unwrap_err();
    assert!(matches!(error, ConfigError::Env { .. }), "{error}");
}

#[test]
fn missing_explicit_file_is_an_error_but_missing_default_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let env = Environment::default();
    let error = Config::load(
        &ConfigPath::Explicit(missing.clone()),
        &env,
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(matches!(error, ConfigError::Read { .. }));
    let config =
        Config::load(&ConfigPath::IfPresent(missing), &env, &Overrides::default()).unwrap();
    assert!(config.source.is_none());
}

#[test]
fn invalid_values_are_refused_with_the_key() {
    let cases = [
        (
            "[auth]\nworker_token_ttl_secs = 100000\n",
            "auth.worker_token_ttl_secs",
        ),
        (
            "[auth]\nmax_token_ttl_secs = 10\n",
            "auth.max_token_ttl_secs",
        ),
        ("[limits]\nmax_running = 0\n", "limits.max_running"),
        (
            "[store]\nmemory_keep_finished = 0\n",
            "store.memory_keep_finished",
        ),
        ("[store]\nbackend = \"postgres\"\n", "store.url"),
        (
            "[store]\nbackend = \"postgres\"\nurl = \" \"\n",
            "store.url",
        ),
        ("[store]\npg_pool = 0\n", "store.pg_pool"),
        (
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\n\
             password_file = \"/nonexistent/pg-password\"\n",
            "store.password_file",
        ),
        ("[cluster]\n", "cluster"),
        (
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\n\
             [cluster]\nnode_lease_secs = 0\n",
            "cluster.node_lease_secs",
        ),
        (
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\n\
             [cluster]\nnode_id = \"node-1\"\n",
            "cluster.node_id",
        ),
        (
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://h/d\"\n\
             [cluster]\nadvertise_url = \"node-a:7070\"\n",
            "cluster.advertise_url",
        ),
        ("[defaults]\nmax_attempts = 0\n", "defaults.max_attempts"),
        ("[defaults]\nmax_tokens = 0\n", "defaults.max_tokens"),
        ("[defaults]\nmax_cost_usd = 0.0\n", "defaults.max_cost_usd"),
        ("[defaults]\nmax_cost_usd = -2.5\n", "defaults.max_cost_usd"),
        ("[defaults]\nmax_cost_usd = nan\n", "defaults.max_cost_usd"),
        ("[server]\nbase_url = \"ftp://x\"\n", "server.base_url"),
        ("[senior]\nagent = \"ghost\"\n", "senior.agent"),
        (
            "[lua.middleware.\"bad name\"]\nscript = \"x.lua\"\n",
            "lua.middleware.bad name",
        ),
        (
            "[lua.middleware.audit]\nscript = \"/nonexistent/a.lua\"\n",
            "lua.middleware.audit.script",
        ),
        (
            "[agents.l]\nkind = \"lua\"\nscript = \"/nonexistent/l.lua\"\n",
            "agents.l.script",
        ),
        (
            "[agents.p]\nkind = \"process\"\nprogram = \"/nonexistent/bin\"\n",
            "agents.p.program",
        ),
        (
            "[agents.o]\nkind = \"operator\"\noperator_role = \"\"\n",
            "agents.o.operator_role",
        ),
    ];
    for (text, key) in cases {
        let error = Fixture::new(text)
            .load(&[], &Overrides::default())
            .unwrap_err();
        assert!(
            error.to_string().contains(&format!("`{key}`")),
            "{key}: {error}"
        );
    }
}

#[test]
fn layers_must_be_known_hints_or_configured_lua_middleware() {
    let fixture = Fixture::new("");
    let script = fixture.write("mw.lua", "return {}");
    let text = format!(
        "[lua.middleware.guard]\nscript = \"{}\"\n\
         [agents.a]\nkind = \"process\"\nprogram = \"cat\"\nlayers = [\"senior_escalation\", \"lua:guard\"]\n",
        script.display()
    );
    std::fs::write(fixture.path(), &text).unwrap();
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    assert_eq!(
        config.agents["a"].layers,
        ["senior_escalation", "lua:guard"]
    );

    std::fs::write(fixture.path(), text.replace("lua:guard", "lua:other")).unwrap();
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    assert!(
        matches!(error.root(), ConfigError::UnknownLayer { layer, .. } if layer == "lua:other")
    );
}

#[test]
fn agents_dir_adds_operator_agents_and_refuses_duplicates() {
    let fixture = Fixture::new("");
    fixture.write("agents/reviewer.md", "---\nname: reviewer\n---\nReview.\n");
    let agents = fixture.dir.path().join("agents");
    let text = format!("[agents_dir]\npath = \"{}\"\n", agents.display());
    std::fs::write(fixture.path(), &text).unwrap();
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    let reviewer = &config.agents["reviewer"];
    assert!(
        matches!(&reviewer.kind, AgentKind::Operator(op) if op.system_prompt.as_deref() == Some("Review."))
    );

    let duplicate =
        format!("{text}[agents.reviewer]\nkind = \"operator\"\noperator_role = \"x\"\n");
    std::fs::write(fixture.path(), duplicate).unwrap();
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    assert!(matches!(error, ConfigError::DuplicateAgent { name, .. } if name == "reviewer"));

    fixture.write("agents/broken.md", "no front matter");
    std::fs::write(fixture.path(), &text).unwrap();
    let error = fixture.load(&[], &Overrides::default()).unwrap_err();
    assert!(error.to_string().contains("broken.md"), "{error}");
}

#[test]
fn system_prompt_file_and_inherited_env_are_resolved_once() {
    let fixture = Fixture::new("");
    let prompt = fixture.write("prompt.md", "Be careful.");
    let text = format!(
        "[agents.o]\nkind = \"operator\"\noperator_role = \"main-ai\"\nsystem_prompt_file = \"{}\"\n\
         [agents.p]\nkind = \"process\"\nprogram = \"cat\"\nenv = [\"API_KEY\", \"UNSET\"]\n",
        prompt.display()
    );
    std::fs::write(fixture.path(), text).unwrap();
    let config = fixture
        .load(&[("API_KEY", "sk-1")], &Overrides::default())
        .unwrap();
    let AgentKind::Operator(operator) = &config.agents["o"].kind else {
        panic!("operator expected");
    };
    assert_eq!(operator.system_prompt.as_deref(), Some("Be careful."));
    let AgentKind::Process(process) = &config.agents["p"].kind else {
        panic!("process expected");
    };
    let vars: Vec<_> = process.resolved_env.iter().collect();
    assert_eq!(vars, [("API_KEY", "sk-1")]);
}

#[test]
fn a_cluster_section_is_read_on_postgres() {
    let fixture = Fixture::new(
        "[store]\nbackend = \"postgres\"\nurl = \"postgres://db.internal/swarmd\"\n\
         [cluster]\nnode_lease_secs = 4\n\
         node_id = \"0b6c6c8e-4f5c-4b8e-9d43-2f1f2d6f8a11\"\n",
    );
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    let cluster = config.cluster.clone().unwrap();
    assert_eq!(cluster.node_lease_secs, 4);
    assert_eq!(cluster.advertise_url, None);
    assert!(config.to_toml_redacted().unwrap().contains("[cluster]"));
    let defaults = Fixture::new("").load(&[], &Overrides::default()).unwrap();
    assert_eq!(defaults.cluster, None);
    assert_eq!(ClusterConfig::default().node_lease_secs, 10);
}

#[test]
fn a_postgres_store_is_read_and_its_url_printed_without_a_password() {
    let secrets = tempfile::tempdir().unwrap();
    let password = secrets.path().join("pg-password");
    std::fs::write(&password, "pw\n").unwrap();
    let fixture = Fixture::new(&format!(
        "[store]\nbackend = \"postgres\"\n\
         url = \"postgres://swarmd:inline-pw@db.internal:5432/swarmd\"\n\
         password_file = \"{}\"\npg_pool = 3\n",
        password.display()
    ));
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    assert_eq!(config.store.backend, StoreBackend::Postgres);
    assert_eq!(config.store.pg_pool, 3);
    assert_eq!(
        config.store.password_file.as_deref(),
        Some(password.as_path())
    );
    let printed = config.to_toml_redacted().unwrap();
    assert!(!printed.contains("inline-pw"), "{printed}");
    assert!(
        printed.contains("postgres://swarmd:<redacted>@db.internal:5432/swarmd"),
        "{printed}"
    );
    assert!(!format!("{config:?}").contains("inline-pw"));
}

#[test]
fn printed_config_redacts_secrets_and_loads_back() {
    let fixture = Fixture::new(
        "[server]\nbase_url = \"http://swarm.example:7700/\"\n\
         [agents.p]\nkind = \"process\"\nprogram = \"cat\"\nenv = { TOKEN = \"sk-secret\" }\n",
    );
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    assert_eq!(
        config.server.base_url.as_deref(),
        Some("http://swarm.example:7700")
    );
    let printed = config.to_toml_redacted().unwrap();
    assert!(!printed.contains("sk-secret"), "{printed}");
    assert!(printed.contains(REDACTED), "{printed}");
    assert!(!format!("{config:?}").contains("sk-secret"));

    let reloaded = Fixture::new(&printed)
        .load(&[], &Overrides::default())
        .unwrap();
    assert_eq!(reloaded.server, config.server);
    assert_eq!(reloaded.limits, config.limits);
    assert_eq!(reloaded.agents.keys().collect::<Vec<_>>(), ["p"]);
}

#[test]
fn base_url_is_derived_from_the_bound_address() {
    let mut config = Config::default();
    assert_eq!(
        config.base_url(addr("0.0.0.0:7700")),
        "http://127.0.0.1:7700"
    );
    assert_eq!(config.base_url(addr("[::]:80")), "http://[::1]:80");
    assert_eq!(config.base_url(addr("10.0.0.1:1")), "http://10.0.0.1:1");
    config.server.base_url = Some("https://swarm.example".into());
    assert_eq!(config.base_url(addr("0.0.0.0:1")), "https://swarm.example");
}

#[test]
fn agents_exposed_as_tools_need_an_object_schema() {
    let process = "kind = \"process\"\nprogram = \"cat\"\n";
    let cases = [
        (
            "t",
            "expose_as_tool = true\ninput_schema = { type = \"string\" }\n",
            "agents.t.input_schema",
            "type = \"object\"",
        ),
        (
            "t",
            "tool_timeout_secs = 5\n",
            "agents.t.tool_timeout_secs",
            "only",
        ),
        (
            "t",
            "expose_as_tool = true\ntool_timeout_secs = 601\n",
            "agents.t.tool_timeout_secs",
            "601",
        ),
    ];
    for (name, keys, key, says) in cases {
        let text = format!("[agents.\"{name}\"]\n{process}{keys}");
        let error = Fixture::new(&text)
            .load(&[], &Overrides::default())
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains(key), "{name}: {message}");
        assert!(message.contains(says), "{name}: {message}");
    }
    // `wait` stays a fine name for an agent that is not a tool.
    let text = format!("[agents.wait]\n{process}");
    Fixture::new(&text)
        .load(&[], &Overrides::default())
        .unwrap();

    // The keys read the same from an agent file's front matter.
    let fixture = Fixture::new("");
    fixture.write(
        "agents/reviewer.md",
        "---\nname: reviewer\nexpose_as_tool: true\ntool_timeout_secs: 90\n\
         input_schema: {type: object}\n---\nReview.\n",
    );
    let agents = fixture.dir.path().join("agents");
    let text = format!("[agents_dir]\npath = \"{}\"\n", agents.display());
    std::fs::write(fixture.path(), &text).unwrap();
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    let reviewer = &config.agents["reviewer"];
    assert!(reviewer.expose_as_tool);
    assert_eq!(reviewer.tool_timeout_secs, Some(90));

    // The printed form keeps the keys of an `[agents.NAME]` tool.
    let text = format!("[agents.t]\n{process}expose_as_tool = true\ntool_timeout_secs = 7\n");
    let config = Fixture::new(&text)
        .load(&[], &Overrides::default())
        .unwrap();
    let printed = config.to_toml_redacted().unwrap();
    let reloaded = Fixture::new(&printed)
        .load(&[], &Overrides::default())
        .unwrap();
    assert_eq!(reloaded.agents["t"], config.agents["t"], "{printed}");
    assert!(reloaded.agents["t"].expose_as_tool, "{printed}");
}

#[test]
fn a_worktree_loads_prints_back_and_belongs_to_process_and_operator_agents() {
    let fixture = Fixture::new(
        "[agents.p]\nkind = \"process\"\nprogram = \"cat\"\n\
         worktree = { repo = \"/srv/app\", keep = \"on_failure\" }\n",
    );
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    let AgentKind::Process(process) = &config.agents["p"].kind else {
        panic!("{config:?}");
    };
    let worktree = process.worktree.as_ref().unwrap();
    assert_eq!(worktree.repo, PathBuf::from("/srv/app"));
    assert_eq!(worktree.base, "HEAD");
    assert_eq!(worktree.keep, KeepWorktree::OnFailure);
    let printed = config.to_toml_redacted().unwrap();
    let reloaded = Fixture::new(&printed)
        .load(&[], &Overrides::default())
        .unwrap();
    assert_eq!(reloaded.agents["p"], config.agents["p"]);

    let operator = Fixture::new(
        "[agents.o]\nkind = \"operator\"\n\
         worktree = { repo = \"/srv/app\", base = \"main\", keep = \"always\" }\n",
    );
    let config = operator.load(&[], &Overrides::default()).unwrap();
    let AgentKind::Operator(agent) = &config.agents["o"].kind else {
        panic!("{config:?}");
    };
    let worktree = agent.worktree.as_ref().unwrap();
    assert_eq!(worktree.base, "main");
    assert_eq!(worktree.keep, KeepWorktree::Always);
    let printed = config.to_toml_redacted().unwrap();
    let reloaded = Fixture::new(&printed)
        .load(&[], &Overrides::default())
        .unwrap();
    assert_eq!(reloaded.agents["o"], config.agents["o"]);

    let lua = Fixture::new(
        "[agents.l]\nkind = \"lua\"\nscript = \"a.lua\"\nworktree = { repo = \"/srv/app\" }\n",
    );
    let error = lua
        .load(&[], &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("key `worktree` is not valid for an agent of kind lua"),
        "{error}"
    );
}

#[test]
fn resume_args_load_print_back_and_belong_to_process_agents_only() {
    let fixture = Fixture::new(
        "[agents.c]\nkind = \"process\"\nprogram = \"cat\"\nargs = [\"-p\"]\n\
         resume_args = [\"--resume\", \"{resume_session}\"]\n",
    );
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    let AgentKind::Process(process) = &config.agents["c"].kind else {
        panic!("{config:?}");
    };
    assert_eq!(process.resume_args, ["--resume", "{resume_session}"]);
    let printed = config.to_toml_redacted().unwrap();
    assert!(printed.contains("resume_args"), "{printed}");
    let reloaded = Fixture::new(&printed)
        .load(&[], &Overrides::default())
        .unwrap();
    assert_eq!(reloaded.agents["c"], config.agents["c"]);

    let lua =
        Fixture::new("[agents.l]\nkind = \"lua\"\nscript = \"a.lua\"\nresume_args = [\"-r\"]\n");
    let error = lua
        .load(&[], &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("key `resume_args` is not valid for an agent of kind lua"),
        "{error}"
    );
}

#[test]
fn a_disabled_agent_is_parsed_then_dropped_before_its_checks() {
    let text = "[agents.off]\nenabled = false\nkind = \"process\"\n\
                program = \"/nonexistent/cli\"\n\n\
                [agents.on]\nkind = \"process\"\nprogram = \"/bin/sh\"\n";
    let fixture = Fixture::new(text);
    let config = fixture.load(&[], &Overrides::default()).unwrap();
    assert!(!config.agents.contains_key("off"));
    assert!(config.agents["on"].enabled);

    // Switched on from the environment, its program is checked again.
    let err = fixture
        .load(
            &[("SWARMD_AGENTS__OFF__ENABLED", "true")],
            &Overrides::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/cli"), "{err}");

    // A mistyped key is refused even in a disabled agent.
    let typo = Fixture::new(
        "[agents.off]\nenabled = false\nkind = \"process\"\nprogram = \"x\"\nprogam = \"y\"\n",
    );
    let err = typo.load(&[], &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("progam"), "{err}");
}
