//! `[flows_dir]`: where the flows the daemon offers by name are read from
//! (docs/flows.md, Declaring): `*.json` and `*.toml` files, one flow IR
//! each, and `*.lua` scripts that produce one (docs/flows.md, Flows in
//! Lua), read and linted once at start.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `[flows_dir]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowsDirConfig {
    /// Directory of flow files; relative paths resolve against the working
    /// directory. A directory that does not exist offers no flows.
    pub path: PathBuf,
}

impl Default for FlowsDirConfig {
    fn default() -> Self {
        FlowsDirConfig {
            path: PathBuf::from("flows/"),
        }
    }
}

impl FlowsDirConfig {
    /// Every flow of the directory that could be read (JSON and TOML IR,
    /// and the IR each Lua script returns when run once in the Lua sandbox
    /// under [`swarmd_spawner::lua::FLOW_SCRIPT_LIMITS`]), beside the
    /// problems of the files that could not, each naming its file.
    pub fn read(&self) -> (swarmd_flow_run::Catalog, Vec<String>) {
        swarmd_flow_run::Catalog::read_dir_with(&self.path, &lua_flow)
    }
}

fn lua_flow(path: &Path, source: &str) -> Result<serde_json::Value, String> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    swarmd_spawner::lua::flow_ir(&name, source, &swarmd_spawner::lua::FLOW_SCRIPT_LIMITS)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lua_script_is_a_flow_and_its_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("shout.lua"),
            "return {name = 'shout', body = step('echo', '{{ input.text }}', '$.out')}",
        )
        .unwrap();
        let config = FlowsDirConfig {
            path: dir.path().to_owned(),
        };
        let (catalog, problems) = config.read();
        assert!(problems.is_empty(), "{problems:?}");
        let entry = catalog.get("shout").unwrap();
        assert!(entry.source.ends_with("shout.lua"), "{}", entry.source);

        std::fs::write(dir.path().join("spin.lua"), "while true do end").unwrap();
        let (_, problems) = config.read();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("spin.lua: instruction budget"),
            "{problems:?}"
        );
    }
}
