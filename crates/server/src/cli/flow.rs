//! `swarmd flow …`'s command line: list and lint flows, start runs, and
//! show, list, answer and cancel them (docs/flows.md, CLI).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use super::{ConnectionArgs, OutputFormat, parse_json};

/// `swarmd flow …`: flags shared by every verb, then the verb.
#[derive(Debug, Clone, Args)]
pub struct FlowArgs {
    /// How answers are printed.
    #[arg(
        short = 'o',
        long,
        value_enum,
        value_name = "FORMAT",
        default_value = "table",
        global = true,
        display_order = 900
    )]
    pub output: OutputFormat,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(subcommand)]
    pub command: FlowCommand,
}

/// The flow verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum FlowCommand {
    /// List the flows the daemon offers (`-o json`: `{flows}` with their
    /// input schemas).
    List,
    /// Check a flow file against the daemon (its agents and flows) and
    /// print every problem, one per line: pointer, code, message, (hint).
    /// Exits 1 when there is any.
    Lint {
        /// The flow's IR: a JSON file, or TOML when it ends in `.toml`.
        file: PathBuf,
    },
    /// Start a run and print its id; with --wait, the run once it ended
    /// or waits on a person.
    Run(Box<FlowRunArgs>),
    /// Print a run: its state, its node tree and its waits.
    Show {
        /// The run id (R-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_run_id)]
        run: String,
        /// Wait up to SECS (at most 300) for the run to end, or to wait on
        /// a person's answer, first; the exit status is then 0 passed, 2
        /// failed or cancelled, 3 not ended (running, or waiting).
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
    },
    /// List runs, newest first (`-o json`: `{runs}`).
    Runs(FlowRunsArgs),
    /// Answer a run's open wait with a JSON value and print the run. The
    /// credential may be the wait's own token (`--token swt1.…`), which
    /// needs the run's whole id and prints only the run's id, the wait and
    /// the run's status.
    Answer {
        /// The run id (R-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_run_id)]
        run: String,
        /// The wait's name, or its key when several open waits share it.
        wait: String,
        /// The answer, as JSON (it must match the wait's schema).
        #[arg(value_name = "JSON", value_parser = parse_json)]
        value: Value,
    },
    /// Convert an upstream mlua-swarm Blueprint (JSON, or TOML when the
    /// file ends in `.toml`; the whole Blueprint or its `flow` node) into
    /// swarmd flow IR and print it; needs no daemon. Parts left out are
    /// listed on stderr; exits 1, naming every one, when it cannot convert.
    Import {
        /// The Blueprint file.
        file: PathBuf,
        /// The flow's name [default: the Blueprint's].
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Cancel a run and print it.
    Cancel {
        /// The run id (R-…), or the tail a table prints (…7c8d9e0f).
        #[arg(value_parser = parse_run_id)]
        run: String,
        /// Why, kept with the run.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
}

/// `swarmd flow run`'s flags.
#[derive(Debug, Clone, Args)]
pub struct FlowRunArgs {
    /// A flow's name, or a file of flow IR: an argument with a `/`, or
    /// ending in `.json` or `.toml`, is a file (`./review.json`).
    #[arg(value_name = "NAME|FILE")]
    pub flow: String,
    /// The run's input, as a JSON object [default: {}].
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub input: Option<Value>,
    /// A file holding the run's input as JSON.
    #[arg(long, value_name = "FILE", conflicts_with = "input")]
    pub input_file: Option<PathBuf>,
    /// Idempotency key: the same key answers the run it started the first
    /// time instead of starting another.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Wait up to SECS (at most 300) for the run to end, or to wait on a
    /// person's answer, and print it; the exit status is then 0 passed, 2
    /// failed or cancelled, 3 not ended (running, or waiting).
    #[arg(long, value_name = "SECS")]
    pub wait: Option<u64>,
}

/// `swarmd flow runs`' flags (`GET /v1/runs`).
#[derive(Debug, Clone, Args)]
pub struct FlowRunsArgs {
    /// Only runs in this state.
    #[arg(long, value_enum)]
    pub status: Option<RunStatusFilter>,
    /// Only runs of this flow.
    #[arg(long, value_name = "NAME")]
    pub flow: Option<String>,
    /// Runs per page (1 to 500).
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    /// Only runs older than this one: the last of the previous page.
    #[arg(long, value_name = "RUN_ID", value_parser = parse_run_id)]
    pub before: Option<String>,
    /// Full run ids in the table (shortened to their last 8 hex digits by
    /// default).
    #[arg(long)]
    pub wide: bool,
}

/// A run id as the daemon writes it, `R-` and 32 lowercase hex digits, or
/// the tail a table prints (`…7c8d9e0f`, looked up when the verb runs);
/// checked here so that no argument reaches another route.
fn parse_run_id(text: &str) -> Result<String, String> {
    let hex = text.strip_prefix("R-").unwrap_or_default();
    let whole = hex.len() == 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if whole || swarmd_client::tail_of(text).is_some() {
        Ok(text.to_owned())
    } else {
        Err("expected a run id: R- and 32 lowercase hex digits, or the tail a table prints (…7c8d9e0f)".to_owned())
    }
}

/// `--status` of `flow runs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunStatusFilter {
    Running,
    Waiting,
    Passed,
    Failed,
    Cancelled,
}

impl RunStatusFilter {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            RunStatusFilter::Running => "running",
            RunStatusFilter::Waiting => "waiting",
            RunStatusFilter::Passed => "passed",
            RunStatusFilter::Failed => "failed",
            RunStatusFilter::Cancelled => "cancelled",
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    const RUN: &str = "R-0190f3c2a1b27c3d8e4f5a6b7c8d9e0f";

    fn flow(args: &[&str]) -> Result<FlowArgs, clap::Error> {
        let cli = Cli::try_parse_from(["swarmd", "flow"].iter().chain(args))?;
        match cli.command {
            Command::Flow(flow) => Ok(*flow),
            other => panic!("expected flow, got {other:?}"),
        }
    }

    #[test]
    fn flow_verbs_take_their_flags_and_the_connection_flags_after_the_verb() {
        let got = flow(&[
            "run",
            "review",
            "--input",
            "{\"task\": \"t\"}",
            "--key",
            "k",
            "--wait",
            "60",
            "--url",
            "http://x:1",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(got.output, OutputFormat::Json);
        assert_eq!(got.connection.url.as_deref(), Some("http://x:1"));
        let FlowCommand::Run(run) = got.command else {
            panic!("expected run");
        };
        assert_eq!(run.flow, "review");
        assert_eq!(run.input, Some(serde_json::json!({"task": "t"})));
        assert_eq!((run.key.as_deref(), run.wait), (Some("k"), Some(60)));

        let got = flow(&["answer", RUN, "approve", "true", "--token", "swt1.x"]).unwrap();
        assert_eq!(got.connection.token.as_deref(), Some("swt1.x"));
        assert!(matches!(got.command, FlowCommand::Answer { value, .. } if value == true));

        let got = flow(&["runs", "--status", "waiting", "--limit", "5"]).unwrap();
        assert!(matches!(got.command, FlowCommand::Runs(runs)
            if runs.status == Some(RunStatusFilter::Waiting) && runs.limit == 5));
    }

    #[test]
    fn run_ids_json_and_exclusive_inputs_are_checked_by_the_parser() {
        assert!(flow(&["show", "../etc"]).is_err());
        assert!(flow(&["show", &RUN.to_uppercase()]).is_err());
        assert!(flow(&["runs", "--before", "R-123"]).is_err());
        assert!(flow(&["show", RUN, "--wait", "5"]).is_ok());
        assert!(flow(&["answer", RUN, "approve", "{nope"]).is_err());
        assert!(flow(&["run", "f", "--input", "{}", "--input-file", "i.json"]).is_err());
        assert!(flow(&["runs", "--limit", "0"]).is_err());
        assert!(flow(&["cancel", RUN, "--reason", "enough"]).is_ok());
        assert!(flow(&["lint"]).is_err());
    }
}
