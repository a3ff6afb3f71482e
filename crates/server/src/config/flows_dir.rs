//! `[flows_dir]`: where the flows the daemon offers by name are read from
//! (docs/flows.md, Declaring): `*.json` and `*.toml` files, one flow IR
//! each, read and linted once at start.

use std::path::PathBuf;

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
