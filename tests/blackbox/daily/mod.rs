//! The daily-driver suite (issue 28): the real binary as a person with a
//! repository and a coding agent meets it. Each module covers one concern:
//!
//! - `cli_tables`: the human CLI (`task list`, tables, `-o json`, `agents`,
//!   `sessions`, the discoverable connection);
//! - `agent_files`: agents of every kind as small files, the merged
//!   configuration validated;
//! - `mcp_surface`: the MCP tool surface and an HTTP MCP client across a
//!   restart;
//! - `interrupted`: a coding attempt interrupted by a stop or a crash
//!   continues after the restart;
//! - `branches`: readable branch names and the commands that act on them.

mod agent_files;
pub(crate) mod branches;
mod cli_tables;
mod interrupted;
mod mcp_surface;
