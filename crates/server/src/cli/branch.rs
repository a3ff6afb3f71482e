//! `swarmd branch …`'s command line: list, show, apply and prune the git
//! branches coding tasks leave (docs/branches.md).

use clap::{Args, Subcommand};

use super::{ConnectionArgs, OutputFormat, parse_age};

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
    /// List the swarmd branches of your tasks (attempts' and merges'):
    /// task, status, commits ahead of the agent's base, whether the base
    /// holds them.
    List {
        /// Only this agent's branches.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
        /// Full task ids in the table, to pass to `show` and `apply`
        /// (they are shortened to their last 8 hex digits by default).
        #[arg(long)]
        wide: bool,
    },
    /// Print the diff a task's latest attempt recorded on its branch (a
    /// merge task's: from its base to the head it made).
    Show {
        /// The task id (T-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = super::parse_task_ref)]
        task: String,
    },
    /// Apply a finished task's branch to a branch you name: fast-forward
    /// when possible, else a merge commit. A branch checked out in a
    /// worktree is refused unless --checked-out; a conflict changes nothing
    /// and names the files (exit status 1).
    Apply {
        /// The task id (T-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = super::parse_task_ref)]
        task: String,
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
