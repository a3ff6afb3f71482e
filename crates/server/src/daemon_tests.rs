//! Tests of the daemon's assembly from its configuration: the engine's
//! policy and the MCP tool names of agents exposed as tools.

use std::path::Path;

use swarmd_config::environment::Environment;
use swarmd_config::{ConfigPath, Overrides};

use super::*;

/// `text` loaded as `swarmd.toml` from a temporary directory under `env`.
fn load(dir: &Path, text: &str, env: &[(&str, &str)]) -> Config {
    let path = dir.join("swarmd.toml");
    std::fs::write(&path, text).unwrap();
    let env = Environment::from_pairs(env.iter().copied());
    Config::load(&ConfigPath::Explicit(path), &env, &Overrides::default()).unwrap()
}

/// Budgets in `[defaults]` (or the environment) become the engine's
/// default policy; unset, tasks have none.
#[test]
fn budget_defaults_reach_the_engine_policy() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("SWARMD_DEFAULTS__MAX_COST_USD", "2.5")];
    let config = load(dir.path(), "[defaults]\nmax_tokens = 5000\n", &env);
    let policy = engine_config(&config).defaults;
    assert_eq!(
        (policy.max_tokens, policy.max_cost_usd),
        (Some(5000), Some(2.5))
    );
    let unset = engine_config(&Config::default()).defaults;
    assert_eq!((unset.max_tokens, unset.max_cost_usd), (None, None));
}

/// An agent exposed as a tool needs a name model APIs take that hides no
/// other MCP tool; linking the agents (`serve` and `check-config`) refuses
/// one that does, naming its key.
#[test]
fn agents_exposed_as_tools_need_a_tool_name() {
    let process = "kind = \"process\"\nprogram = \"cat\"\n";
    let cases = [
        ("a.b", "agents.a.b.expose_as_tool", "no dots"),
        ("wait", "agents.wait.expose_as_tool", "built-in"),
        ("mse_ack", "agents.mse_ack.expose_as_tool", "mse_"),
        ("flow_x", "agents.flow_x.expose_as_tool", "flow_"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let env = Environment::default();
    for (name, key, says) in cases {
        let text = format!("[agents.\"{name}\"]\n{process}expose_as_tool = true\n");
        let config = load(dir.path(), &text, &[]);
        let message = link_agents(&config, &env).unwrap_err().to_string();
        assert!(message.contains(key), "{name}: {message}");
        assert!(message.contains(says), "{name}: {message}");
    }
    // `wait` stays a fine name for an agent that is not a tool.
    let config = load(dir.path(), &format!("[agents.wait]\n{process}"), &[]);
    link_agents(&config, &env).unwrap();

    // An agent file's name is checked the same way.
    std::fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/spawn.md"),
        "---\nname: spawn\nexpose_as_tool: true\n---\nX\n",
    )
    .unwrap();
    let text = format!(
        "[agents_dir]\npath = \"{}\"\n",
        dir.path().join("agents").display()
    );
    let config = load(dir.path(), &text, &[]);
    let error = link_agents(&config, &env).unwrap_err();
    assert!(error.to_string().contains("built-in"), "{error}");
}
