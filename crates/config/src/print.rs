//! The effective configuration as TOML, for `swarmd check-config`.
//!
//! Secrets are redacted by the types themselves (`EnvVars` serializes values
//! as `<redacted>`), so any serialization of `Config` is safe to show.

use std::fmt::Write as _;

use super::{AgentOrigin, Config};

impl Config {
    /// The effective configuration as TOML, preceded by comment lines naming
    /// the source file and where each agent came from.
    ///
    /// # Errors
    /// Only if TOML serialization fails, which the types here do not cause.
    pub fn to_toml_redacted(&self) -> Result<String, toml::ser::Error> {
        let mut out = String::from("# swarmd effective configuration (secrets redacted)\n");
        match &self.source {
            Some(path) => writeln!(out, "# file: {}", path.display()),
            None => writeln!(out, "# file: none (defaults, environment and flags)"),
        }
        .ok();
        for (name, agent) in &self.agents {
            let from = match &agent.origin {
                AgentOrigin::AgentFile(path) => path.display().to_string(),
                origin => origin.describe(name, self.source.as_deref()),
            };
            writeln!(out, "# agent `{name}` from {from}").ok();
        }
        out.push('\n');
        out.push_str(&toml::to_string(self)?);
        Ok(out)
    }
}
