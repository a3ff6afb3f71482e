//! The `mcp` command: the daemon's MCP tools on `/mcp` measured with an
//! rmcp client session — the round trip of one task through `spawn` +
//! `wait` against the same task over WebSocket and HTTP (the tool-call
//! overhead), then a fan-out of N tasks through that one session. The
//! session calls with the admin token, or with an operator session's `sws-`
//! token (`--session-token`), which it logs in and out around the run.

mod client;
mod fanout;
mod overhead;
pub(crate) mod report;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::cli::McpArgs;
use crate::daemon::Target;
use crate::measure::Sampler;
use client::McpClient;
use report::{FanoutRow, PathRow};

/// What one `mcp` run measured.
#[derive(Debug)]
pub(crate) struct McpReport {
    /// The protocol revision the daemon agreed to.
    pub revision: String,
    /// `admin` or `session`.
    pub credential: &'static str,
    pub store: String,
    pub round_trips: Vec<PathRow>,
    pub fanouts: Vec<FanoutRow>,
}

impl McpReport {
    /// Every error of every measurement.
    pub(crate) fn error_count(&self) -> u64 {
        let paths = self.round_trips.iter().flat_map(|r| r.errors.values());
        let fanouts = self.fanouts.iter().flat_map(|r| r.errors.values());
        paths.chain(fanouts).sum()
    }

    /// Whether every path made all its round trips and every fan-out
    /// passed all its tasks.
    pub(crate) fn finished_all(&self, args: &McpArgs) -> bool {
        let paths = self
            .round_trips
            .iter()
            .all(|row| row.spread.map_or(0, |s| s.count) == args.round_trips);
        paths && self.fanouts.iter().all(|row| row.passed == row.tasks)
    }

    /// Both tables, with what they ran against.
    pub(crate) fn markdown(&self) -> String {
        let mut out = format!(
            "MCP revision {}, {} token, store {}.\n\n",
            self.revision, self.credential, self.store
        );
        if !self.round_trips.is_empty() {
            out.push_str(&report::round_trips(&self.round_trips));
            out.push('\n');
        }
        if !self.fanouts.is_empty() {
            out.push_str(&report::fanouts(&self.fanouts));
        }
        out
    }
}

/// Runs both measurements on one MCP session.
pub(crate) async fn run(
    target: &Target,
    http: &reqwest::Client,
    args: &McpArgs,
) -> anyhow::Result<McpReport> {
    let login = match args.session_token {
        true => Some(login(http, target).await?),
        false => None,
    };
    let bearer = login
        .as_ref()
        .map_or(target.admin_token.as_str(), |l| l.1.as_str());
    let mcp = McpClient::connect(&target.base, bearer, args.revision).await?;
    let revision = mcp.revision();
    eprintln!("swarmd-bench: MCP session open, revision {revision}");
    let round_trips = match args.round_trips {
        0 => Vec::new(),
        _ => overhead::run(target, http, &mcp, args).await?,
    };
    let mut fanouts = Vec::new();
    if args.fanout > 0 {
        let batch = usize::from(args.batch);
        let sampler = Sampler::begin(target.pid);
        let mut row = fanout::sequential(&mcp, &args.agent, args.fanout, batch).await;
        row.server_cpu = sampler.end().server_cpu;
        fanouts.push(row);
        if args.concurrent > 0 {
            let sampler = Sampler::begin(target.pid);
            let run = fanout::concurrent(&mcp, &args.agent, args.fanout, args.concurrent);
            let mut row = run.await;
            row.server_cpu = sampler.end().server_cpu;
            fanouts.push(row);
        }
    }
    mcp.close().await;
    if let Some((sid, token)) = login {
        logout(http, target, &sid, &token).await?;
    }
    Ok(McpReport {
        revision,
        credential: if args.session_token {
            "session"
        } else {
            "admin"
        },
        store: target.store_label.clone(),
        round_trips,
        fanouts,
    })
}

/// Logs an operator session in (no WebSocket): its sid and `sws-` token.
async fn login(http: &reqwest::Client, target: &Target) -> anyhow::Result<(String, String)> {
    let response = http
        .post(target.url("/v1/operators"))
        .bearer_auth(&target.admin_token)
        .json(&json!({"kind": "main_ai", "description": "swarmd-bench mcp"}))
        .send()
        .await
        .context("login request")?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    match (
        status.as_u16(),
        body["sid"].as_str(),
        body["token"].as_str(),
    ) {
        (201, Some(sid), Some(token)) => Ok((sid.to_owned(), token.to_owned())),
        _ => bail!("login answered {status}: {body}"),
    }
}

async fn logout(
    http: &reqwest::Client,
    target: &Target,
    sid: &str,
    token: &str,
) -> anyhow::Result<()> {
    let response = http
        .delete(target.url(&format!("/v1/operators/{sid}")))
        .bearer_auth(token)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("logout answered {}", response.status());
    }
    Ok(())
}
