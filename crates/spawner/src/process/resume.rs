//! What a continuation's child is told (docs/tasks.md, Continuations): its
//! arguments with `{resume_session}` filled in and `resume_args` added, and the
//! `SWARM_CONTINUED_FROM` and `SWARM_RESUME_SESSION` variables.

use super::{ProcessSpec, RunVars};

/// The placeholder an argument names the resumed session with.
pub const RESUME_SESSION: &str = "{resume_session}";
/// An argument that is exactly this stands for `resume_args`.
pub const RESUME_ARGS: &str = "{resume_args}";

/// The child's arguments. With a session: `args` with the placeholder
/// replaced by it, `resume_args` (likewise) spliced in where an argument
/// `{resume_args}` stands, else appended. Without one: `args` less every
/// argument holding the placeholder and the `{resume_args}` one.
pub(super) fn args_of(spec: &ProcessSpec, vars: &RunVars) -> Vec<String> {
    let Some(session) = &vars.resume_session else {
        return spec
            .args
            .iter()
            .filter(|arg| !arg.contains(RESUME_SESSION) && *arg != RESUME_ARGS)
            .cloned()
            .collect();
    };
    let fill = |arg: &String| arg.replace(RESUME_SESSION, session);
    let resume = spec.resume_args.iter().map(fill);
    if spec.args.iter().any(|arg| arg == RESUME_ARGS) {
        let mut args = Vec::with_capacity(spec.args.len() + spec.resume_args.len());
        for arg in &spec.args {
            if arg == RESUME_ARGS {
                args.extend(resume.clone());
            } else {
                args.push(fill(arg));
            }
        }
        args
    } else {
        spec.args.iter().map(fill).chain(resume).collect()
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
    fn resume_args_go_where_their_placeholder_stands() {
        let mut codex = ProcessSpec::new("codex");
        codex.args = vec!["exec".into(), RESUME_ARGS.into(), "--json".into()];
        codex.resume_args = vec!["resume".into(), RESUME_SESSION.into(), "-".into()];
        assert_eq!(
            args_of(&codex, &vars(Some("th-1"))),
            ["exec", "resume", "th-1", "-", "--json"]
        );
        assert_eq!(args_of(&codex, &vars(None)), ["exec", "--json"]);
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
