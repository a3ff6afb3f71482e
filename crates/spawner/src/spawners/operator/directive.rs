//! The `directive` of a `spawn` frame (docs/protocol.md, The spawn directive): plain text telling
//! the MainAI which SubAgent to launch and the exact lines and HTTP calls to give
//! it.

use std::fmt::Write;

use serde_json::Value;
use swarmd_engine::ids::{AttemptId, TaskId};

use crate::operator::SpawnWorktree;

/// Renders the directive. The SubAgent type comes from the binding's
/// `subagent_type`, else the agent's name; `base_url` is the daemon's real
/// one, passed in from configuration.
pub fn render_directive(
    agent: &str,
    binding: Option<&Value>,
    attempt: AttemptId,
    worker_handle: &str,
    base_url: &str,
    worktree: Option<&SpawnWorktree>,
) -> String {
    let AttemptId {
        task: task_id,
        n: attempt,
    } = attempt;
    let base_url = base_url.trim_end_matches('/');
    let subagent = binding
        .and_then(|b| b.get("subagent_type"))
        .and_then(Value::as_str)
        .unwrap_or(agent);
    let tools: Vec<&str> = binding
        .and_then(|b| b.get("tools"))
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();

    let mut text = String::with_capacity(900);
    // Writing to a String cannot fail.
    let _ = writeln!(
        text,
        "Launch one SubAgent of type `{subagent}` for swarmd task {task_id} (attempt {attempt})."
    );
    if !tools.is_empty() {
        let _ = writeln!(text, "Give it these tools: {}.", tools.join(", "));
    }
    let _ = write!(
        text,
        "Pass the SubAgent exactly these lines:\n\
         \n\
         task_id: {task_id}\n\
         worker_handle: {worker_handle}\n\
         base_url: {base_url}\n\
         \n\
         The SubAgent must make two HTTP calls, both with the header \
         `Authorization: Bearer {worker_handle}`:\n\
         1. GET {base_url}/v1/worker/prompt?task_id={task_id} to fetch its instructions \
         (prompt, system, input);\n\
         2. POST {base_url}/v1/worker/submit?task_id={task_id} with its result as the body; \
         add `&ok=false` to the URL if it could not do the task.\n\
         A SubAgent with swarmd's MCP tools may instead call `worker_prompt` and \
         `worker_submit` with the worker_handle.\n\
         When the SubAgent has finished, reply `spawn_ack`; to stop it early, reply `spawn_halt`.\n"
    );
    if let Some(worktree) = worktree {
        let _ = write!(
            text,
            "\n\
             The SubAgent works in its own git worktree and nowhere else: tell it to make \
             {path} its working directory, to change files only there, and to commit its \
             work on the branch {branch} checked out there (it starts at {base}). \
             What it leaves uncommitted is committed for it when the attempt ends.\n",
            path = worktree.path,
            branch = worktree.branch,
            base = worktree.base,
        );
    }
    text
}

/// The directive's last sentence for a continuation: which task it
/// continues and, when known, the SubAgent session to resume.
pub(super) fn continuation_line(from: TaskId, session: Option<&str>) -> String {
    match session {
        Some(session) => format!(
            "This task continues swarmd task {from}: resume the SubAgent session `{session}` \
             (the frame's resume_session) instead of starting a new one.\n"
        ),
        None => format!(
            "This task continues swarmd task {from}; its SubAgent reported no session to resume.\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use swarmd_engine::ids::TaskId;

    use super::*;

    #[test]
    fn names_the_subagent_and_gives_exact_lines_and_calls() {
        let task = TaskId::new();
        let binding = json!({"subagent_type": "code-reviewer", "tools": ["Read", "Grep"]});
        let text = render_directive(
            "review",
            Some(&binding),
            AttemptId::new(task, 2),
            "wh-0f",
            "http://10.0.0.5:7700/",
            None,
        );
        assert!(
            text.starts_with("Launch one SubAgent of type `code-reviewer`"),
            "{text}"
        );
        assert!(text.contains("Give it these tools: Read, Grep."));
        for line in [
            format!("task_id: {task}"),
            "worker_handle: wh-0f".to_owned(),
            "base_url: http://10.0.0.5:7700".to_owned(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing line {line:?} in {text}"
            );
        }
        assert!(text.contains(&format!(
            "GET http://10.0.0.5:7700/v1/worker/prompt?task_id={task}"
        )));
        assert!(text.contains(&format!(
            "POST http://10.0.0.5:7700/v1/worker/submit?task_id={task}"
        )));
        assert!(text.contains("`Authorization: Bearer wh-0f`"));
        assert!(
            text.contains("`worker_prompt` and `worker_submit`"),
            "{text}"
        );
        assert!(
            !text.contains("localhost") && !text.contains("<"),
            "no placeholder: {text}"
        );
    }

    #[test]
    fn without_a_binding_the_agent_name_is_the_type() {
        let text = render_directive(
            "researcher",
            None,
            AttemptId::new(TaskId::new(), 1),
            "wh-1",
            "http://h:1",
            None,
        );
        assert!(text.starts_with("Launch one SubAgent of type `researcher`"));
        assert!(!text.contains("Give it these tools"));
        assert!(!text.contains("worktree"), "{text}");
    }

    #[test]
    fn a_worktree_is_named_as_the_subagent_s_working_directory_and_branch() {
        let worktree = SpawnWorktree {
            path: "/state/worktrees/T-1-1".into(),
            branch: "swarmd/T-1-1".into(),
            base: "0123abc".into(),
        };
        let text = render_directive(
            "coder",
            None,
            AttemptId::new(TaskId::new(), 1),
            "wh-1",
            "http://h:1",
            Some(&worktree),
        );
        assert!(
            text.contains("make /state/worktrees/T-1-1 its working directory"),
            "{text}"
        );
        assert!(text.contains("on the branch swarmd/T-1-1"), "{text}");
        assert!(text.contains("(it starts at 0123abc)"), "{text}");
        assert!(text.ends_with('\n'));
    }
}
