//! `swarmd task list`, `swarmd agents`, `swarmd sessions` and `swarmd
//! status`: the daemon's lists and state, printed for people or as the
//! daemon's JSON answer (`-o json`) for scripts.

use std::time::Duration;

use super::{CommandError, print, remote};
use crate::cli::{ListArgs, ListingArgs, OutputFormat, exit};
use swarmd_client::render::{self, now_ms};
use swarmd_client::{ApiClient, TaskQuery};
use swarmd_config::environment::Environment;

/// `swarmd task list`: one page of `GET /v1/tasks`. In a table, a further
/// page is named on stderr, so that stdout stays the table.
pub(super) async fn tasks(
    client: &ApiClient,
    args: &ListArgs,
    output: OutputFormat,
) -> Result<u8, CommandError> {
    let now = now_ms();
    let parent = match &args.parent {
        Some(given) => Some(client.resolve_task(given).await?),
        None => None,
    };
    let after = match &args.after {
        Some(given) => Some(client.resolve_task(given).await?),
        None => None,
    };
    let query = TaskQuery {
        status: args.status.map(|status| status.name()),
        agent: args.agent.clone(),
        parent,
        session: args.session.clone(),
        since_ms: args.since.map(|age| now.saturating_sub(millis(age))),
        q: args.contains.clone(),
        limit: Some(args.limit),
        after,
    };
    let page = client.list_tasks(&query).await?;
    match output {
        OutputFormat::Json => print(&page.to_string())?,
        OutputFormat::Table => {
            print(&render::task_table(&page, now, args.wide))?;
            if let Some(next) = page["next"].as_str() {
                let next = render::clean(next, 40);
                eprintln!("more: swarmd task list --after {next} (with the same filters)");
            }
            let empty = page["tasks"].as_array().is_none_or(Vec::is_empty);
            if let Some(agent) = args.agent.as_deref().filter(|_| empty) {
                note_unknown_agent(client, agent).await;
            }
        }
    }
    Ok(exit::OK)
}

/// Says on stderr when a table came back empty for an agent the daemon
/// does not have (a typo, most often); tasks of an agent removed since
/// stay listable, so the filter itself is not refused.
async fn note_unknown_agent(client: &ApiClient, agent: &str) {
    let Ok(agents) = client.list_agents().await else {
        return;
    };
    let known = agents["agents"]
        .as_array()
        .is_some_and(|list| list.iter().any(|a| a["name"] == agent));
    if !known {
        let agent = render::clean(agent, 64);
        eprintln!("note: the daemon has no agent `{agent}` (swarmd agents lists them)");
    }
}

/// `swarmd agents`: `GET /v1/agents`.
pub(super) async fn agents(args: &ListingArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = remote::connect(&args.connection, env).await?;
    let agents = client.list_agents().await?;
    print(&match args.output {
        OutputFormat::Json => agents.to_string(),
        OutputFormat::Table => render::agent_table(&agents),
    })?;
    Ok(exit::OK)
}

/// `swarmd sessions`: `GET /v1/operators` (the admin's credential).
pub(super) async fn sessions(args: &ListingArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = remote::connect(&args.connection, env).await?;
    let sessions = client.list_sessions().await?;
    print(&match args.output {
        OutputFormat::Json => sessions.to_string(),
        OutputFormat::Table => render::session_table(&sessions, now_ms()),
    })?;
    Ok(exit::OK)
}

/// `swarmd status`: `GET /v1/status`.
pub(super) async fn status(args: &ListingArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = remote::connect(&args.connection, env).await?;
    let status = client.status().await?;
    print(&match args.output {
        OutputFormat::Json => status.to_string(),
        OutputFormat::Table => render::status_text(&status),
    })?;
    Ok(exit::OK)
}

fn millis(age: Duration) -> u64 {
    u64::try_from(age.as_millis()).unwrap_or(u64::MAX)
}
