//! What a continuation's child is told (docs/tasks.md, Continuations): its
//! arguments with `{resume_session}` filled in, and the
//! `SWARM_CONTINUED_FROM` and `SWARM_RESUME_SESSION` variables.

use super::{ProcessSpec, RunVars};

/// The placeholder an argument names the resumed session with.
pub const RESUME_SESSION: &str = "{resume_session}";

/// The child's arguments: `args` with the placeholder replaced by the
/// session, then `resume_args` likewise; without a session, every argument
/// of `args` holding the placeholder is left out and `resume_args` are not
/// added.
pub(super) fn args_of(spec: &ProcessSpec, vars: &RunVars) -> Vec<String> {
    match &vars.resume_session {
        Some(session) => spec
            .args
            .iter()
            .chain(&spec.resume_args)
            .map(|arg| arg.replace(RESUME_SESSION, session))
            .collect(),
        None => spec
            .args
            .iter()
            .filter(|arg| !arg.contains(RESUME_SESSION))
            .cloned()
            .collect(),
    }
}

/// The continuation's variables; none for a task that continues nothing.
pub(super) fn resume_env(vars: &RunVars) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if let Some(task) = &vars.continued_from {
        env.push(("SWARM_CONTINUED_FROM", task.clone()));
    }
    if let Some(session) = &vars.resume_session {
        env.push(("SWARM_RESUME_SESSION", session.clone()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(session: Option<&str>) -> RunVars {
        RunVars {
            base_url: String::new(),
            task_id: "T-2".into(),
            attempt: 1,
            agent: "a".into(),
            worker_handle: String::new(),
            prompt: String::new(),
            continued_from: session.map(|_| "T-1".into()),
            resume_session: session.map(str::to_owned),
        }
    }

    fn spec() -> ProcessSpec {
        let mut spec = ProcessSpec::new("claude");
        spec.args = vec!["-p".into(), "--resume={resume_session}".into()];
        spec.resume_args = vec!["--resume".into(), "{resume_session}".into()];
        spec
    }

    #[test]
    fn a_session_fills_the_placeholder_and_adds_resume_args() {
        assert_eq!(
            args_of(&spec(), &vars(Some("S-1"))),
            ["-p", "--resume=S-1", "--resume", "S-1"]
        );
        assert_eq!(
            resume_env(&vars(Some("S-1"))),
            [
                ("SWARM_CONTINUED_FROM", "T-1".to_owned()),
                ("SWARM_RESUME_SESSION", "S-1".to_owned())
            ]
        );
    }

    #[test]
    fn without_a_session_the_placeholder_arguments_are_left_out() {
        assert_eq!(args_of(&spec(), &vars(None)), ["-p"]);
        assert!(resume_env(&vars(None)).is_empty());
        let mut continued = vars(None);
        continued.continued_from = Some("T-1".into());
        assert_eq!(
            resume_env(&continued),
            [("SWARM_CONTINUED_FROM", "T-1".to_owned())]
        );
    }
}
