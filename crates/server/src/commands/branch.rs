//! `swarmd branch list | show | apply | prune`: the git branches coding
//! tasks leave, acted on through the running daemon (docs/branches.md).
//! Lists print as tables (`-o json` for the daemon's answer); `show` prints
//! the task's diff as git prints one.

use clap::{Args, Subcommand};
use serde_json::json;
use swarmd_engine::ids::TaskId;

use super::{CommandError, print, remote};
use crate::cli::{ConnectionArgs, OutputFormat, exit, parse_age};
use swarmd_client::branch_table;
use swarmd_client::render::{clean, now_ms};
use swarmd_config::environment::Environment;

/// `swarmd branch …`: flags shared by every verb, then the verb.
#[derive(Debug, Clone, Args)]
pub struct BranchArgs {
    #[command(subcommand)]
    pub command: BranchCommand,
    /// How the answer is printed.
    #[arg(
        short = 'o',
        long,
        value_enum,
        value_name = "FORMAT",
        default_value = "table",
        global = true
    )]
    pub output: OutputFormat,
    #[command(flatten)]
    pub connection: ConnectionArgs,
}

/// The branch verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum BranchCommand {
    /// List the swarmd branches of your tasks: task, status, commits ahead
    /// of the agent's base, whether the base holds them.
    List {
        /// Only this agent's branches.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
    /// Print the diff a task's latest attempt recorded on its branch.
    Show {
        /// The task id (T-…).
        task: TaskId,
    },
    /// Apply a finished task's branch to a branch you name: fast-forward
    /// when possible, else a merge commit. A branch checked out in a
    /// worktree is refused unless --checked-out; a conflict changes nothing
    /// and names the files (exit status 1).
    Apply {
        /// The task id (T-…).
        task: TaskId,
        /// The branch to apply it to (made at the task's head when missing).
        #[arg(long, value_name = "BRANCH")]
        into: String,
        /// Only a fast-forward; refuse otherwise.
        #[arg(long, conflicts_with = "merge")]
        ff_only: bool,
        /// Always a merge commit.
        #[arg(long)]
        merge: bool,
        /// Update the branch also where it is checked out (refused when
        /// that worktree has uncommitted changes).
        #[arg(long)]
        checked_out: bool,
    },
    /// Delete the branches of finished tasks that the agent's base holds
    /// (and with --older-than, of tasks finished that long ago).
    Prune {
        /// Only this agent's branches.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// Also unmerged branches of tasks finished this long ago: a number
        /// and a unit, s, m, h, d or w (`7d`).
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: Option<std::time::Duration>,
        /// List what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Runs one branch verb.
pub(super) async fn run(args: BranchArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = remote::connect(&args.connection, env).await?;
    let json = args.output == OutputFormat::Json;
    match args.command {
        BranchCommand::List { agent } => {
            let list = client.list_branches(agent.as_deref()).await?;
            if json {
                print(&list.to_string())?;
            } else {
                print(&branch_table(&list["branches"], now_ms()))?;
            }
        }
        BranchCommand::Show { task } => {
            let diff = client.task_diff(&task).await?;
            if json {
                print(&diff.to_string())?;
            } else {
                let text = diff["diff"].as_str().unwrap_or_default();
                print(text.trim_end())?;
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
                    print(&branch_table(&pruned["pruned"], now_ms()))?;
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
