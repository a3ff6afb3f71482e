//! The configuration the generator writes for a daemon it starts: loopback
//! on a free port, the chosen store, room for the idle-capacity workload
//! (`limits.max_running`, `ws.park_max`; see `Capacity`), and the agents of the http
//! workload — `true` (/bin/true), `cat` (/bin/cat, the prompt on stdin) and
//! `lua` (a script returning its prompt) — and the flows of the `flows`
//! workload, read from `dir/flows` (`flow_defs`).

use std::path::Path;

use crate::cli::StoreKind;
use crate::flow_defs::FLOWS_DIR;

/// The Lua agent's script.
pub(crate) const LUA_SCRIPT: &str = "return { value = prompt, ok = true }\n";

/// The file name of the Lua script inside the daemon's directory.
pub(crate) const LUA_SCRIPT_FILE: &str = "echo.lua";

/// How much a spawned daemon holds at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// `limits.max_running`: attempts running at once; the rest queue.
    pub max_running: u32,
    /// `ws.park_max`: frames a session's outbox holds.
    pub park_max: u32,
}

/// The database a `postgres` daemon uses.
#[derive(Debug, Clone)]
pub(crate) struct PgTarget {
    pub url: String,
    pub password_file: std::path::PathBuf,
}

/// The TOML for a daemon whose files live under `dir` (its state in
/// `dir/state`, its Lua script in `dir/echo.lua`, its flows in
/// `dir/flows`).
pub(crate) fn daemon_config(
    dir: &Path,
    store: StoreKind,
    capacity: Capacity,
    worktree_repo: Option<&Path>,
    postgres: Option<&PgTarget>,
) -> String {
    let Capacity {
        max_running,
        park_max,
    } = capacity;
    let (backend, synchronous) = match store {
        StoreKind::Sqlite => ("sqlite", "full"),
        StoreKind::SqliteNormal => ("sqlite", "normal"),
        StoreKind::Memory => ("memory", "full"),
        StoreKind::Postgres => ("postgres", "full"),
    };
    let postgres = match postgres {
        Some(pg) => format!(
            "url = {}\npassword_file = {}\n",
            toml_string(&pg.url),
            toml_string(&pg.password_file.display().to_string())
        ),
        None => String::new(),
    };
    let state = toml_string(&dir.join("state").display().to_string());
    let script = toml_string(&dir.join(LUA_SCRIPT_FILE).display().to_string());
    let flows = toml_string(&dir.join(FLOWS_DIR).display().to_string());
    let worktree = match worktree_repo {
        Some(repo) => format!(
            r#"
[agents.worktree]
kind = "process"
program = "/bin/sh"
args = ["-c", "echo \"$SWARM_TASK_ID\" > bench.txt"]
stdin = "none"
worktree = {{ repo = {}, base = "HEAD", keep = "never" }}
"#,
            toml_string(&repo.display().to_string())
        ),
        None => String::new(),
    };
    format!(
        r#"# Written by swarmd-bench.
[server]
bind = "127.0.0.1:0"
shutdown_grace_secs = 2

[store]
backend = "{backend}"
state_dir = {state}
synchronous = "{synchronous}"
{postgres}
[limits]
max_running = {max_running}

[ws]
park_max = {park_max}

[spawner]
kill_grace_secs = 1

[flows_dir]
path = {flows}

[agents.true]
kind = "process"
program = "/bin/true"
stdin = "none"

[agents.cat]
kind = "process"
program = "/bin/cat"

[agents.lua]
kind = "lua"
script = {script}

[agents.stamp]
kind = "process"
program = "/bin/date"
args = ["+%s%N"]
stdin = "none"

[agents.remote]
kind = "remote"
stdin = "none"
{worktree}"#
    )
}

/// A TOML basic string (JSON string escapes are valid TOML escapes).
fn toml_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_and_the_capacity_are_written() {
        let dir = Path::new("/tmp/bench \"x\"");
        let text = daemon_config(
            dir,
            StoreKind::SqliteNormal,
            Capacity {
                max_running: 123_456,
                park_max: 654_321,
            },
            Some(Path::new("/tmp/repo")),
            None,
        );
        assert!(text.contains("backend = \"sqlite\""), "{text}");
        assert!(text.contains("synchronous = \"normal\""), "{text}");
        assert!(text.contains("max_running = 123456"), "{text}");
        assert!(text.contains("park_max = 654321"), "{text}");
        assert!(
            text.contains(
                r#"[flows_dir]
path = "/tmp/bench \"x\"/flows""#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"state_dir = "/tmp/bench \"x\"/state""#),
            "{text}"
        );
        let memory = daemon_config(
            dir,
            StoreKind::Memory,
            Capacity {
                max_running: 1,
                park_max: 1,
            },
            None,
            None,
        );
        assert!(memory.contains("backend = \"memory\""), "{memory}");
        assert!(!memory.contains("[agents.worktree]"), "{memory}");
        // The worktree agent's table parses, with the repository given.
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        let agent = &parsed["agents"]["worktree"];
        assert_eq!(
            agent["worktree"]["repo"].as_str(),
            Some("/tmp/repo"),
            "{text}"
        );
        assert_eq!(agent["program"].as_str(), Some("/bin/sh"), "{text}");
    }
}
