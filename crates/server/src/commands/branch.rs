//! `swarmd branch list | show | apply | prune`: the git branches coding
//! tasks leave, acted on through the running daemon (docs/branches.md).
//! Lists print as tables (`-o json` for the daemon's answer); `show` prints
//! the task's diff as git prints one.

use std::io::IsTerminal;

use serde_json::json;

use super::{CommandError, print, remote};
use crate::cli::{BranchArgs, BranchCommand, OutputFormat, exit};
use swarmd_client::branch_table;
use swarmd_client::render::{clean, clean_lines, now_ms};
use swarmd_config::environment::Environment;

/// Runs one branch verb.
pub(super) async fn run(args: BranchArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = remote::connect(&args.connection, env).await?;
    let json = args.output == OutputFormat::Json;
    match args.command {
        BranchCommand::List { agent, wide } => {
            let list = client.list_branches(agent.as_deref()).await?;
            if json {
                print(&list.to_string())?;
            } else {
                print(&branch_table(&list["branches"], now_ms(), wide))?;
            }
        }
        BranchCommand::Show { task } => {
            let task = client.resolve_task(&task).await?;
            let diff = client.task_diff(&task).await?;
            if json {
                print(&diff.to_string())?;
            } else {
                let text = diff["diff"].as_str().unwrap_or_default().trim_end();
                // A worker wrote the diff: a terminal gets it without the
                // escape sequences it may hold; a pipe (a patch file) gets
                // it whole.
                if std::io::stdout().is_terminal() {
                    print(&clean_lines(text))?;
                } else {
                    print(text)?;
                }
                if diff["diff_truncated"].as_bool() == Some(true) {
                    eprintln!(
                        "the recorded diff is cut; the whole one: git diff {} {}",
                        clean(diff["base"].as_str().unwrap_or_default(), 64),
                        clean(diff["branch"].as_str().unwrap_or_default(), 200)
                    );
                }
            }
        }
        BranchCommand::Apply {
            task,
            into,
            ff_only,
            merge,
            checked_out,
        } => {
            let mode = if ff_only {
                "ff"
            } else if merge {
                "merge"
            } else {
                "auto"
            };
            let body = json!({"into": into, "mode": mode, "checked_out": checked_out});
            let task = client.resolve_task(&task).await?;
            let applied = client.apply_task(&task, &body).await?;
            if json {
                print(&applied.to_string())?;
            } else {
                let head = applied["head"].as_str().unwrap_or_default();
                print(&format!(
                    "{}: {} into {} (now {})",
                    clean(applied["outcome"].as_str().unwrap_or_default(), 20),
                    clean(applied["branch"].as_str().unwrap_or_default(), 200),
                    clean(applied["into"].as_str().unwrap_or_default(), 200),
                    clean(&head.chars().take(12).collect::<String>(), 12),
                ))?;
            }
        }
        BranchCommand::Prune {
            agent,
            older_than,
            dry_run,
        } => {
            let body = json!({
                "agent": agent,
                "older_than_secs": older_than.map(|age| age.as_secs()),
                "dry_run": dry_run,
            });
            let pruned = client.prune_branches(&body).await?;
            if json {
                print(&pruned.to_string())?;
            } else {
                let count = pruned["pruned"].as_array().map_or(0, Vec::len);
                if count > 0 {
                    print(&branch_table(&pruned["pruned"], now_ms(), false))?;
                }
                let verb = if dry_run { "would delete" } else { "deleted" };
                eprintln!("{verb} {count} branch(es)");
                for kept in pruned["kept"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    eprintln!(
                        "kept {}: {}",
                        clean(kept["name"].as_str().unwrap_or_default(), 200),
                        clean(kept["reason"].as_str().unwrap_or_default(), 300)
                    );
                }
            }
        }
    }
    Ok(exit::OK)
}
