//! Tests of the merged sources: agents made of environment variables, TOML
//! agent files of every kind, names defined twice, and errors naming the
//! file, variable or agent file a refused value came from.

use std::path::{Path, PathBuf};

use super::tests::Fixture;
use super::*;

fn no_flags() -> Overrides {
    Overrides::default()
}

/// A fixture whose config reads `agents/` of its directory.
fn with_agents_dir(extra: &str) -> Fixture {
    let fixture = Fixture::new("");
    std::fs::create_dir_all(fixture.dir.path().join("agents")).unwrap();
    let text = format!(
        "[agents_dir]\npath = \"{}\"\n{extra}",
        fixture.dir.path().join("agents").display()
    );
    std::fs::write(fixture.path(), text).unwrap();
    fixture
}

#[test]
fn an_agent_may_be_made_of_environment_variables_alone() {
    let fixture = Fixture::new("");
    let config = fixture
        .load(
            &[
                ("SWARMD_AGENTS__CODER__KIND", "process"),
                ("SWARMD_AGENTS__CODER__PROGRAM", "claude"),
                ("SWARMD_AGENTS__CODER__ARGS", "[\"-p\"]"),
                ("SWARMD_AGENTS__CODER__STREAM", "claude"),
                ("SWARMD_AGENTS__CODER__WORKTREE__REPO", "/srv/app"),
                ("SWARMD_AGENTS__CODER__WORKTREE__KEEP", "always"),
            ],
            &no_flags(),
        )
        .unwrap();
    let coder = &config.agents["coder"];
    assert_eq!(coder.origin, AgentOrigin::Env);
    let AgentKind::Process(process) = &coder.kind else {
        panic!("{coder:?}");
    };
    assert_eq!(process.program, PathBuf::from("claude"));
    assert_eq!(process.args, ["-p"]);
    assert_eq!(process.stream, StreamMode::Claude);
    let worktree = process.worktree.as_ref().unwrap();
    assert_eq!(worktree.keep, KeepWorktree::Always);
    // Printed, it is an `[agents.NAME]` table that loads back.
    let printed = config.to_toml_redacted().unwrap();
    assert!(printed.contains("[agents.coder]"), "{printed}");
    assert!(
        printed.contains("# agent `coder` from environment variables SWARMD_AGENTS__CODER__*"),
        "{printed}"
    );
}

#[test]
fn variables_may_complete_an_agent_of_the_file() {
    let fixture = Fixture::new("[agents.cat]\nkind = \"process\"\n");
    let config = fixture
        .load(&[("SWARMD_AGENTS__CAT__PROGRAM", "/bin/cat")], &no_flags())
        .unwrap();
    assert_eq!(config.agents["cat"].origin, AgentOrigin::ConfigFile);

    // Left incomplete, the file's own error is reported, with its line.
    let error = fixture.load(&[], &no_flags()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("{} at line", fixture.path().display())),
        "{text}"
    );
    assert!(text.contains("needs `program`"), "{text}");
}

#[test]
fn a_refused_merge_blames_the_variable_of_the_broken_agent() {
    let fixture = Fixture::new("");
    let error = fixture
        .load(
            &[
                ("SWARMD_AGENTS__A__KIND", "process"),
                ("SWARMD_AGENTS__A__PROGRAM", "/bin/cat"),
                ("SWARMD_AGENTS__B__KIND", "lua"),
                ("SWARMD_SERVER__SHUTDOWN_GRACE_SECS", "3"),
            ],
            &no_flags(),
        )
        .unwrap_err();
    assert!(
        matches!(&error, ConfigError::Env { var, message }
            if var == "SWARMD_AGENTS__B__KIND" && message.contains("needs `script`")),
        "{error}"
    );
}

#[test]
fn validation_errors_name_where_the_value_came_from() {
    let fixture = Fixture::new("[limits]\nmax_running = 0\n");
    let error = fixture.load(&[], &no_flags()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.ends_with(&format!("(from {})", fixture.path().display())),
        "{text}"
    );
    assert!(matches!(error.root(), ConfigError::OutOfRange { .. }));

    let fixture = Fixture::new("");
    let error = fixture
        .load(&[("SWARMD_LIMITS__MAX_RUNNING", "0")], &no_flags())
        .unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("(from environment variable SWARMD_LIMITS__MAX_RUNNING)"),
        "{error}"
    );

    // An agent's key set by a variable names that variable.
    let error = fixture
        .load(
            &[
                ("SWARMD_AGENTS__X__KIND", "operator"),
                ("SWARMD_AGENTS__X__LAYERS", "[\"nope\"]"),
            ],
            &no_flags(),
        )
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("(from environment variable SWARMD_AGENTS__X__LAYERS)"),
        "{error}"
    );

    let fixture = with_agents_dir("");
    let file = fixture.write(
        "agents/slow.toml",
        "kind = \"process\"\nprogram = \"x\"\ntimeout_secs = 0\n",
    );
    let error = fixture.load(&[], &no_flags()).unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with(&format!("(from agent file {})", file.display())),
        "{error}"
    );
}

#[test]
fn a_toml_agent_file_makes_an_agent_of_any_kind_named_by_the_file() {
    let fixture = with_agents_dir("");
    let script = fixture.write("up.lua", "return { value = prompt, ok = true }\n");
    fixture.write(
        "agents/cat.toml",
        "kind = \"process\"\nprogram = \"/bin/cat\"\n",
    );
    fixture.write(
        "agents/up.toml",
        &format!("kind = \"lua\"\nscript = \"{}\"\n", script.display()),
    );
    fixture.write("agents/helper.toml", "kind = \"operator\"\n");
    fixture.write(
        "agents/builder.toml",
        "kind = \"remote\"\nstream = \"codex\"\n",
    );
    fixture.write("agents/reviewer.md", "---\nname: reviewer\n---\nReview.\n");
    fixture.write("agents/notes.txt", "ignored");
    let config = fixture.load(&[], &no_flags()).unwrap();
    let kinds: Vec<(&str, &str)> = config
        .agents
        .iter()
        .map(|(name, agent)| (name.as_str(), agent.kind.name()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("builder", "remote"),
            ("cat", "process"),
            ("helper", "operator"),
            ("reviewer", "operator"),
            ("up", "lua"),
        ]
    );
    let dir = fixture.dir.path().join("agents");
    assert_eq!(
        config.agents["cat"].origin,
        AgentOrigin::AgentFile(dir.join("cat.toml"))
    );
    let AgentKind::Process(cat) = &config.agents["cat"].kind else {
        panic!("process expected");
    };
    // The defaults of `[agents.NAME]`.
    assert_eq!(cat.stdin, StdinMode::Prompt);
    assert_eq!(cat.stream, StreamMode::None);
    assert_eq!(cat.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
    assert_eq!((cat.timeout_secs, &cat.worktree), (None, &None));
    assert_eq!(cat.env, EnvSpec::default());
    // Printed, the file agents stay in their files and are named.
    let printed = config.to_toml_redacted().unwrap();
    assert!(!printed.contains("[agents.cat]"), "{printed}");
    let named = format!("# agent `cat` from {}", dir.join("cat.toml").display());
    assert!(printed.contains(&named), "{printed}");
}

#[test]
fn a_malformed_toml_agent_file_is_refused_with_its_name_and_line() {
    for (text, expected) in [
        (
            "kind = \"process\"\nprogram = \"x\"\ncolour = 1\n",
            "line 3: unknown field `colour`",
        ),
        (
            "kind = \"process\"\nprogram = \"x\"\nscript = \"a.lua\"\n",
            "key `script` is not valid",
        ),
        ("kind = \"process\"\n", "needs `program`"),
        ("kind = \"process\"\nprogram = [\n", "line"),
    ] {
        let fixture = with_agents_dir("");
        let file = fixture.write("agents/bad.toml", text);
        let error = fixture.load(&[], &no_flags()).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("invalid agent file {}", file.display())),
            "{message}"
        );
        assert!(message.contains(expected), "{expected}: {message}");
    }
}

#[test]
fn a_name_defined_twice_names_both_sources() {
    let fixture = with_agents_dir("[agents.dup]\nkind = \"operator\"\n");
    let file = fixture.write("agents/dup.toml", "kind = \"operator\"\n");
    let error = fixture.load(&[], &no_flags()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "agent `dup` is defined twice: by [agents.dup] in {} and by agent file {}",
            fixture.path().display(),
            file.display()
        )
    );

    let fixture = with_agents_dir("");
    let toml = fixture.write("agents/dup.toml", "kind = \"operator\"\n");
    let md = fixture.write("agents/dup.md", "---\nname: dup\n---\n");
    let error = fixture.load(&[], &no_flags()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "agent `dup` is defined twice: by agent file {} and by agent file {}",
            md.display(),
            toml.display()
        )
    );

    std::fs::remove_file(md).unwrap();
    let error = fixture
        .load(&[("SWARMD_AGENTS__DUP__KIND", "operator")], &no_flags())
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("by environment variables SWARMD_AGENTS__DUP__* and by agent file"),
        "{error}"
    );
}

#[test]
fn the_shipped_cli_agent_files_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/agents/cli");
    let agents = load_agents_dir(&dir).unwrap();
    let names: Vec<&str> = agents.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["claude", "codex"]);
    for (name, agent) in &agents {
        let AgentKind::Process(process) = &agent.kind else {
            panic!("{name}: a process agent expected");
        };
        assert!(process.worktree.is_some(), "{name}");
        assert!(!process.resume_args.is_empty(), "{name}");
    }
    let AgentKind::Process(claude) = &agents[0].1.kind else {
        unreachable!()
    };
    assert_eq!(claude.stream, StreamMode::Claude);
    // Continuing a passed task resumes its session: the worktree stays.
    assert_eq!(
        claude.worktree.as_ref().map(|worktree| worktree.keep),
        Some(KeepWorktree::Always)
    );
}
