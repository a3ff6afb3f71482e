//! `swarmd branch …`: the branch routes (docs/branches.md), and the table
//! `branch list` prints.

use comfy_table::{Cell, Table, presets};
use serde_json::Value;
use swarmd_types::ids::TaskId;

use super::render::{ago, clean, short_id};
use super::{ApiClient, ClientError, REQUEST_TIMEOUT};

impl ApiClient {
    /// `GET /v1/branches`: the swarmd branches of `agent` (else of every
    /// agent with a local worktree).
    ///
    /// # Errors
    /// `Request` on transport failure, `Status` for a refusal.
    pub async fn list_branches(&self, agent: Option<&str>) -> Result<Value, ClientError> {
        let path = "/v1/branches";
        let url = self.url(path);
        let mut request = self.get(path).timeout(REQUEST_TIMEOUT);
        if let Some(agent) = agent {
            request = request.query(&[("agent", agent)]);
        }
        self.send_json(request, &url).await
    }

    /// `GET /v1/tasks/{id}/diff`: the diff the task's latest attempt recorded.
    ///
    /// # Errors
    /// As `list_branches`.
    pub async fn task_diff(&self, id: &TaskId) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{id}/diff");
        let url = self.url(&path);
        self.send_json(self.get(&path).timeout(REQUEST_TIMEOUT), &url)
            .await
    }

    /// `POST /v1/tasks/{id}/apply` with `body` (`into`, `mode`, `checked_out`).
    ///
    /// # Errors
    /// As `list_branches`; a conflict is `Status` 409 naming the files.
    pub async fn apply_task(&self, id: &TaskId, body: &Value) -> Result<Value, ClientError> {
        let path = format!("/v1/tasks/{id}/apply");
        let url = self.url(&path);
        let request = self.post(&path).json(body).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }

    /// `POST /v1/branches/prune` with `body` (`agent`, `older_than_secs`, `dry_run`).
    ///
    /// # Errors
    /// As `list_branches`.
    pub async fn prune_branches(&self, body: &Value) -> Result<Value, ClientError> {
        let path = "/v1/branches/prune";
        let url = self.url(path);
        let request = self.post(path).json(body).timeout(REQUEST_TIMEOUT);
        self.send_json(request, &url).await
    }
}

/// Branches (`GET /v1/branches`'s `branches`, or prune's `pruned`) as a
/// table: branch, task, status, ahead, merged, age of its last commit,
/// prompt; full task ids with `wide`.
pub fn branch_table(branches: &Value, now_ms: u64, wide: bool) -> String {
    let text = |value: &Value, max| match value.as_str() {
        Some(text) if !text.is_empty() => clean(text, max),
        _ => "-".to_owned(),
    };
    let rows = branches
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|branch| {
            vec![
                text(&branch["name"], 80),
                match branch["task_id"].as_str() {
                    Some(id) if wide => clean(id, 40),
                    id => short_id(id.unwrap_or("-")),
                },
                text(&branch["status"], 12),
                branch["ahead"]
                    .as_u64()
                    .map_or("-".to_owned(), |n| n.to_string()),
                match branch["merged"].as_bool() {
                    Some(true) => "yes".to_owned(),
                    Some(false) => "no".to_owned(),
                    None => "-".to_owned(),
                },
                branch["committed_ms"]
                    .as_u64()
                    .map_or("-".to_owned(), |ms| ago(now_ms.saturating_sub(ms))),
                text(&branch["title"], 60),
            ]
        })
        .collect::<Vec<_>>();
    let mut table = Table::new();
    table.load_style(presets::NOTHING);
    table.set_header(
        [
            "BRANCH",
            "TASK",
            "STATUS",
            "AHEAD",
            "MERGED",
            "COMMITTED",
            "PROMPT",
        ]
        .map(Cell::new),
    );
    for row in rows {
        table.add_row(row);
    }
    let last = 6;
    for (index, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if index == last { 0 } else { 2 }));
    }
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}
