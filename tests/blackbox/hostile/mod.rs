//! The hostile-client suite: the real binary against the clients an outside
//! audit played (issue 27). Each module plays one class of attacker and
//! asserts the daemon stays healthy and nothing crosses a boundary:
//!
//! - `connections`: idle, trickling and flooding sockets (timeouts, caps);
//! - `mcp_sessions`: MCP session floods, per-credential shares, session
//!   binding, JSON depth at the MCP intake;
//! - `output_disk`: refused output leaves nothing on disk;
//! - `rates`: per-credential write rates and loopback login floods;
//! - `origins`: foreign `Host` and `Origin` headers, cross-site logins;
//! - `tenants`: one session reading or routing into another's work;
//! - `git_planting`: a worker that plants git configuration in its worktree;
//! - `escapes`: terminal escapes and bidi overrides from workers;
//! - `forwarding`: cluster forwarding of non-normalised paths;
//! - `bodies`: stalled bodies, deep or oversized logins, JSONPaths that
//!   descend twice;
//! - `bounds`: sizes and shapes past their bounds (artifact names, loop
//!   counts, JSONPath nesting, cancel reasons);
//! - `listings`: listings over huge tasks, paged by bytes.
//!
//! Each runs in CI in its short mode; the figures it records are in
//! docs/benchmarks.md.

mod bodies;
mod bounds;
mod connections;
mod escapes;
mod forwarding;
mod git_planting;
mod listings;
mod mcp_sessions;
mod origins;
mod output_disk;
mod rates;
mod tenants;
