//! A child's environment: the host snapshot it may draw from, the allow-list
//! entries of an agent, and the names no worker may ever see.

use std::collections::BTreeMap;
use std::str::FromStr;

use super::{ProcessError, RunVars};

/// Names a worker never receives, whatever its allow-list says: systemd's
/// notification and socket-activation channels, credentials, the daemon's own
/// configuration (`SWARMD_*`, which can carry key paths) and the reserved
/// `SWARM_*` variables that the spawner sets itself.
const FORBIDDEN_NAMES: [&str; 2] = ["NOTIFY_SOCKET", "CREDENTIALS_DIRECTORY"];
const FORBIDDEN_PREFIXES: [&str; 4] = ["LISTEN_", "WATCHDOG_", "SWARMD_", "SWARM_"];

/// Whether `name` may appear in a worker's environment.
pub(super) fn is_forbidden(name: &str) -> bool {
    FORBIDDEN_NAMES.contains(&name) || FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p))
}

pub use swarmd_git::HostEnv;

/// One allow-list entry of a process agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvVar {
    /// Copy this variable from the host environment when it is set there.
    Pass(String),
    /// Set this variable to this value.
    Set(String, String),
}

impl EnvVar {
    pub fn name(&self) -> &str {
        match self {
            EnvVar::Pass(name) | EnvVar::Set(name, _) => name,
        }
    }
}

/// `NAME` passes the host's value through; `NAME=value` sets a value.
impl FromStr for EnvVar {
    type Err = ProcessError;

    fn from_str(entry: &str) -> Result<EnvVar, ProcessError> {
        let var = match entry.split_once('=') {
            Some((name, value)) => EnvVar::Set(name.to_owned(), value.to_owned()),
            None => EnvVar::Pass(entry.to_owned()),
        };
        check(&var)?;
        Ok(var)
    }
}

fn check(var: &EnvVar) -> Result<(), ProcessError> {
    let name = var.name();
    let valid_name = !name.is_empty()
        && name.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
        && !name.as_bytes()[0].is_ascii_digit();
    let valid_value = match var {
        EnvVar::Set(_, value) => !value.contains('\0'),
        EnvVar::Pass(_) => true,
    };
    if !valid_name || !valid_value {
        return Err(ProcessError::InvalidEnv(name.to_owned()));
    }
    if is_forbidden(name) {
        return Err(ProcessError::ForbiddenEnv(name.to_owned()));
    }
    Ok(())
}

/// The fixed part of a child's environment, computed once at link time.
/// Refuses invalid and forbidden names.
pub(super) fn base_env(
    allow: &[EnvVar],
    host: &HostEnv,
) -> Result<Vec<(String, String)>, ProcessError> {
    let mut env = BTreeMap::new();
    for var in allow {
        check(var)?;
        match var {
            EnvVar::Pass(name) => {
                if let Some(value) = host.get(name) {
                    env.insert(name.clone(), value.to_owned());
                }
            }
            EnvVar::Set(name, value) => {
                env.insert(name.clone(), value.clone());
            }
        }
    }
    Ok(env.into_iter().collect())
}

/// The `SWARM_*` variables of one run.
pub(super) fn run_env(vars: &RunVars) -> [(&'static str, String); 5] {
    [
        ("SWARM_BASE_URL", vars.base_url.clone()),
        ("SWARM_TASK_ID", vars.task_id.clone()),
        ("SWARM_ATTEMPT", vars.attempt.to_string()),
        ("SWARM_AGENT", vars.agent.clone()),
        ("SWARM_WORKER_HANDLE", vars.worker_handle.clone()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_forbidden_names_are_refused() {
        assert_eq!(
            "PATH".parse::<EnvVar>().unwrap(),
            EnvVar::Pass("PATH".into())
        );
        assert_eq!(
            "MODE=fast=1".parse::<EnvVar>().unwrap(),
            EnvVar::Set("MODE".into(), "fast=1".into())
        );
        for bad in [
            "NOTIFY_SOCKET",
            "LISTEN_FDS",
            "WATCHDOG_USEC=1",
            "CREDENTIALS_DIRECTORY",
            "SWARMD_AUTH__KEYS_FILE",
            "SWARM_TASK_ID=x",
        ] {
            assert!(
                matches!(bad.parse::<EnvVar>(), Err(ProcessError::ForbiddenEnv(_))),
                "{bad}"
            );
        }
        for bad in ["", "=x", "1A", "A-B", "A B=1"] {
            assert!(
                matches!(bad.parse::<EnvVar>(), Err(ProcessError::InvalidEnv(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn base_env_copies_only_allowed_names_that_are_set() {
        let host = HostEnv::from_pairs([("PATH", "/bin"), ("HOME", "/root"), ("SECRET", "k")]);
        let allow = [
            EnvVar::Pass("PATH".into()),
            EnvVar::Pass("UNSET".into()),
            EnvVar::Set("MODE".into(), "1".into()),
        ];
        let env = base_env(&allow, &host).unwrap();
        assert_eq!(
            env,
            vec![("MODE".into(), "1".into()), ("PATH".into(), "/bin".into())]
        );
        let forged = [EnvVar::Pass("NOTIFY_SOCKET".into())];
        assert!(base_env(&forged, &host).is_err());
        assert_eq!(format!("{host:?}"), r#"{"HOME", "PATH", "SECRET"}"#);
    }
}
