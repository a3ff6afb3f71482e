//! What a coding task changed, for the `task` tool (docs/mcp.md, Tools):
//! the branch, base and head, the files, a count of added and removed
//! lines, and the diff of its latest attempt that recorded a worktree.
//!
//! The facts are read from the `worktree` artifact the worktree module
//! records when an attempt ends (docs/tasks.md, Worktrees), from the last
//! `SCAN` records of each of the task's last `ATTEMPTS` attempts,
//! newest first, so the read is bounded whatever the attempts wrote. The
//! diff is cut at `MAX_DIFF_BYTES` (on a character boundary); `truncated`
//! says whether it or the recorded one was cut.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::Engine;
use swarmd_engine::continuation::{WORKTREE_ARTIFACT, WORKTREE_PRODUCER};
use swarmd_engine::ids::TaskId;
use swarmd_output_store::{ContentRef, OutputEvent, OutputRecord};

use swarmd_api::app::AppState;

/// A flow step's git changes (docs/flows.md, a step's `changes`): those of
/// the `task` tool without the diff, which stays in the attempt's output
/// (the journal keeps the stat: files, insertions, deletions).
#[derive(Debug, Clone)]
pub struct StepChanges {
    pub engine: Engine,
    /// Each worktree agent's repository and `base`, for a fan-out's pin.
    pub bases: std::collections::BTreeMap<String, (std::path::PathBuf, String)>,
    /// Git as the branches code runs it.
    pub git: swarmd_git::worktree::branches::Branches,
}

impl swarmd_flow_run::StepFacts for StepChanges {
    fn changes(
        &self,
        id: TaskId,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Value>> + Send + '_>> {
        Box::pin(async move {
            let task = self.engine.get_task(id).await.ok()??;
            let found = of_engine(&self.engine, id, task.attempt).await?;
            // The files its head still holds git's conflict markers in: a
            // merge node's resolver has resolved only when there are none.
            let markers = match self.bases.get(&task.agent) {
                Some((repo, _)) => {
                    let files: Vec<&str> = found.files.iter().map(String::as_str).collect();
                    self.git.conflict_markers(repo, &found.head, &files).await
                }
                None => None,
            };
            let mut value = serde_json::to_value(found).ok()?;
            if let Value::Object(map) = &mut value {
                map.remove("diff");
                if let Some(markers) = markers {
                    map.insert("markers".into(), Value::from(markers));
                }
            }
            Some(value)
        })
    }

    fn base_commit<'a>(
        &'a self,
        agent: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + 'a>> {
        Box::pin(async move {
            let (repo, base) = self.bases.get(agent)?;
            self.git.commit_of(repo, base).await
        })
    }
}

/// Records read from the end of each attempt's output.
const SCAN: usize = 64;
/// Attempts searched, newest first.
const ATTEMPTS: u32 = 8;
/// The longest diff a `task` answer carries.
pub(super) const MAX_DIFF_BYTES: usize = 64 * 1024;
/// The largest spilled artifact read back.
const MAX_SPILLED_BYTES: u64 = 4 * 1024 * 1024;

/// A coding task's changes: where its latest recorded attempt left them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub(super) struct Changes {
    /// The attempt that recorded them.
    attempt: u32,
    /// The branch the attempt committed on.
    branch: String,
    /// The commit the branch started from.
    base: String,
    /// The commit the branch ended at.
    head: String,
    /// Paths changed between `base` and `head`.
    files: Vec<String>,
    /// Whether more paths changed than `files` lists.
    files_truncated: bool,
    /// Lines added in `diff` (of the recorded diff, whole or cut).
    insertions: u64,
    /// Lines removed in `diff` (of the recorded diff, whole or cut).
    deletions: u64,
    /// `git diff base head`, at most 64 KiB.
    diff: String,
    /// Whether the diff is cut (here or when it was recorded).
    truncated: bool,
}

/// The value of a `worktree` artifact (the worktree module's report).
#[derive(Debug, Deserialize)]
struct Report {
    branch: String,
    base: String,
    head: String,
    #[serde(default)]
    files: Vec<String>,
    #[serde(default)]
    files_truncated: bool,
    #[serde(default)]
    diff: String,
    #[serde(default)]
    diff_truncated: bool,
}

/// The changes of task `id`, whose latest attempt is `latest`; `None` when
/// none of its last attempts recorded a worktree (or the store cannot say).
pub(super) async fn of(state: &AppState, id: TaskId, latest: u32) -> Option<Changes> {
    of_engine(&state.engine, id, latest).await
}

/// `of`, given the engine.
async fn of_engine(engine: &Engine, id: TaskId, latest: u32) -> Option<Changes> {
    let outputs = engine.outputs();
    let task = id.as_uuid();
    let oldest = latest.saturating_sub(ATTEMPTS - 1).max(1);
    for attempt in (oldest..=latest).rev() {
        let last = outputs.last_seq(task, attempt).await.ok()?;
        let tail = outputs
            .tail(task, attempt, last.saturating_sub(SCAN as u64), SCAN)
            .await
            .ok()?;
        let Some(content) = tail.iter().rev().find_map(worktree_artifact) else {
            continue;
        };
        let value = match content {
            ContentRef::Inline { value } => value.clone(),
            ContentRef::FileRef { size, sha256, .. } if *size <= MAX_SPILLED_BYTES => {
                let bytes = outputs.read_blob(sha256).await.ok()??;
                serde_json::from_slice(&bytes).ok()?
            }
            ContentRef::FileRef { .. } => return None,
        };
        let report: Report = serde_json::from_value::<Report>(value).ok()?;
        return Some(changes(attempt, report));
    }
    None
}

/// The content of `record` when it is the worktree module's artifact.
fn worktree_artifact(record: &OutputRecord) -> Option<&ContentRef> {
    match &record.event {
        OutputEvent::Artifact { name, content }
            if name == WORKTREE_ARTIFACT && record.producer == WORKTREE_PRODUCER =>
        {
            Some(content)
        }
        _ => None,
    }
}

fn changes(attempt: u32, report: Report) -> Changes {
    let (insertions, deletions) = count_lines(&report.diff);
    let (diff, cut) = bounded(report.diff, MAX_DIFF_BYTES);
    Changes {
        attempt,
        branch: report.branch,
        base: report.base,
        head: report.head,
        files: report.files,
        files_truncated: report.files_truncated,
        insertions,
        deletions,
        diff,
        truncated: cut || report.diff_truncated,
    }
}

/// Lines added and removed in the hunks of a unified diff (file headers
/// such as `+++ b/path` are not counted).
fn count_lines(diff: &str) -> (u64, u64) {
    let (mut added, mut removed, mut in_hunk) = (0, 0, false);
    for line in diff.lines() {
        if line.starts_with("diff ") {
            in_hunk = false;
        } else if line.starts_with("@@") {
            in_hunk = true;
        } else if in_hunk && line.starts_with('+') {
            added += 1;
        } else if in_hunk && line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

/// `text` cut to at most `max` bytes on a character boundary, and whether
/// it was cut.
fn bounded(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// Adds `changes` to a task's JSON when the task has any.
pub(super) fn attach(task: &mut Value, changes: Option<Changes>) {
    if let (Some(changes), Value::Object(map)) = (changes, task)
        && let Ok(value) = serde_json::to_value(changes)
    {
        map.insert("changes".into(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "diff --git a/notes.txt b/notes.txt\n\
                        index 1..2 100644\n\
                        --- a/notes.txt\n\
                        +++ b/notes.txt\n\
                        @@ -1,2 +1,2 @@\n first\n-old\n+new\n+++ added, starting with pluses\n\
                        diff --git a/x b/x\n\
                        --- a/x\n\
                        +++ b/x\n\
                        @@ -0,0 +1 @@\n+x\n";

    #[test]
    fn lines_are_counted_in_hunks_only() {
        assert_eq!(count_lines(DIFF), (3, 1));
        assert_eq!(count_lines(""), (0, 0));
    }

    #[test]
    fn the_diff_is_cut_on_a_character_boundary() {
        let (text, cut) = bounded("aé".repeat(10), 4);
        assert_eq!((text.as_str(), cut), ("aéa", true));
        let (text, cut) = bounded("short".into(), 64);
        assert_eq!((text.as_str(), cut), ("short", false));
    }

    #[test]
    fn a_report_becomes_changes_with_its_truncation() {
        let report = Report {
            branch: "swarmd/T-1-2".into(),
            base: "a".into(),
            head: "b".into(),
            files: vec!["notes.txt".into(), "x".into()],
            files_truncated: false,
            diff: DIFF.into(),
            diff_truncated: true,
        };
        let changes = changes(2, report);
        assert_eq!(changes.attempt, 2);
        assert_eq!((changes.insertions, changes.deletions), (3, 1));
        assert!(changes.truncated, "the recorded diff was cut");
        assert_eq!(changes.diff, DIFF);
        let mut task = serde_json::json!({"id": "T-1"});
        attach(&mut task, Some(changes));
        assert_eq!(task["changes"]["branch"], "swarmd/T-1-2");
    }
}
