//! `swarmd flow …`: flows and their runs on a running daemon (docs/flows.md,
//! CLI). Lint runs on the daemon, so a flow is checked against the agents
//! and flows it will actually run with. A verb that waits for a run exits
//! by its outcome, as `task wait` does.

use std::io;
use std::path::Path;

use serde_json::Value;
use swarmd_client::flow::{
    LintProblem, answer_block, flow_table, problem_lines, problems_of, run_block, run_table,
    shape_problem, waits_on_a_person,
};
use swarmd_client::render::now_ms;
use swarmd_client::{ClientError, RunQuery, RunRequest, RunStart};

use super::{CommandError, print, remote};
use crate::cli::{FlowArgs, FlowCommand, FlowRunArgs, OutputFormat, exit};
use swarmd_config::environment::Environment;

/// Runs one flow verb and prints the daemon's answer as `-o` asks.
pub(super) async fn run(args: FlowArgs, env: &Environment) -> Result<u8, CommandError> {
    if let FlowCommand::Import { file, name } = &args.command {
        return import(file, name.as_deref());
    }
    let client = remote::connect(&args.connection, env).await?;
    let output = args.output;
    match args.command {
        FlowCommand::List => {
            let flows = client.list_flows().await?;
            print(&match output {
                OutputFormat::Json => flows.to_string(),
                OutputFormat::Table => flow_table(&flows),
            })?;
            Ok(exit::OK)
        }
        FlowCommand::Lint { file } => {
            let flow = read_flow(&file)?;
            let answer = match client.lint_flow(&flow).await {
                Ok(answer) => answer,
                Err(ClientError::Status {
                    status: 400,
                    code: Some(code),
                    message,
                    ..
                }) if code == "invalid_flow" => {
                    // A document that is not flow IR is a lint finding too.
                    serde_json::json!({"ok": false, "hash": null, "problems": [shape_problem(&message)]})
                }
                Err(error) => return Err(error.into()),
            };
            note_too_large_for_the_directory(&file);
            let problems = problems_of(&answer);
            match output {
                OutputFormat::Json => print(&answer.to_string())?,
                OutputFormat::Table if problems.is_empty() => {
                    print(&format!("ok  {}", hash_of(&answer)))?;
                }
                OutputFormat::Table => print(&problem_lines(&problems))?,
            }
            let ok = answer["ok"].as_bool().unwrap_or(problems.is_empty());
            Ok(if ok { exit::OK } else { exit::FAILURE })
        }
        FlowCommand::Run(run) => start(&client, *run, output).await,
        FlowCommand::Show { run, wait } => {
            let run = client.resolve_run(&run).await?;
            let Some(wait) = wait else {
                print_view(&client.get_run(&run, None).await?, output)?;
                return Ok(exit::OK);
            };
            let view = client.wait_run(&run, wait).await?;
            print_waited(&view, output)
        }
        FlowCommand::Runs(list) => {
            // A tail (…0fa766f4) names the run it ends, as everywhere.
            let before = match &list.before {
                Some(given) => Some(client.resolve_run(given).await?),
                None => None,
            };
            let query = RunQuery {
                status: list.status.map(|s| s.name().to_owned()),
                flow: list.flow,
                before,
                limit: Some(list.limit),
            };
            let page = client.list_runs(&query).await?;
            match output {
                OutputFormat::Json => print(&page.to_string())?,
                OutputFormat::Table => {
                    print(&run_table(&page, now_ms(), list.wide))?;
                    let runs = page["runs"].as_array().map_or(0, Vec::len);
                    let last = page["runs"][runs.saturating_sub(1)]["id"].as_str();
                    if let Some(last) = last.filter(|_| u32::try_from(runs) == Ok(list.limit)) {
                        let last = swarmd_client::render::clean(last, 40);
                        eprintln!("more: swarmd flow runs --before {last} (with the same filters)");
                    }
                }
            }
            Ok(exit::OK)
        }
        FlowCommand::Answer { run, wait, value } => {
            let run = client.resolve_run(&run).await?;
            let answer = client.answer_wait(&run, &wait, &value, None).await?;
            // The run's view, or `{id, wait, status}` for a wait's token.
            print(&match output {
                OutputFormat::Json => answer.to_string(),
                OutputFormat::Table => answer_block(&answer, now_ms()),
            })?;
            Ok(exit::OK)
        }
        FlowCommand::Import { .. } => unreachable!("handled before connecting"),
        FlowCommand::Cancel { run, reason } => {
            let run = client.resolve_run(&run).await?;
            let view = client.cancel_run(&run, reason.as_deref()).await?;
            print_view(&view, output)?;
            Ok(exit::OK)
        }
    }
}

/// `flow run`: starts the run and prints its id (`-o json`: its view);
/// with `--wait`, waits and prints the run as `flow show` does.
async fn start(
    client: &swarmd_client::ApiClient,
    args: FlowRunArgs,
    output: OutputFormat,
) -> Result<u8, CommandError> {
    let flow = if is_file(&args.flow) {
        read_flow(Path::new(&args.flow))?
    } else {
        Value::String(args.flow.clone())
    };
    let input = match (args.input, &args.input_file) {
        (Some(input), _) => input,
        (None, Some(path)) => read_json(path, "read the input file")?,
        (None, None) => serde_json::json!({}),
    };
    let request = RunRequest {
        flow,
        input,
        idempotency_key: args.key,
    };
    let (view, created) = match client.start_run(&request).await? {
        RunStart::Started { view, created } => (view, created),
        RunStart::Invalid { message, problems } => {
            let url = format!("{}/v1/runs", client.base_url());
            return Err(invalid(url, message, &problems));
        }
    };
    let id = view["id"].as_str().unwrap_or_default().to_owned();
    if !created {
        eprintln!("an earlier request with this key started the run");
    }
    let Some(wait) = args.wait else {
        print(&match output {
            OutputFormat::Json => view.to_string(),
            OutputFormat::Table => swarmd_client::render::clean(&id, 40),
        })?;
        return Ok(exit::OK);
    };
    let view = client.wait_run(&id, wait).await?;
    print_waited(&view, output)
}

/// A run a verb waited for: printed as `flow show` prints it, a note on
/// stderr when it stopped at a person's wait, and the exit status by its
/// outcome.
fn print_waited(view: &Value, output: OutputFormat) -> Result<u8, CommandError> {
    print_view(view, output)?;
    if waits_on_a_person(view) {
        let id = swarmd_client::render::clean(view["id"].as_str().unwrap_or("-"), 40);
        let names: Vec<String> = view["waits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|wait| wait["open"].as_bool() == Some(true))
            .map(|wait| swarmd_client::render::clean(wait["name"].as_str().unwrap_or("-"), 64))
            .collect();
        eprintln!(
            "run {id} waits for an answer to {}: swarmd flow answer {id} WAIT '<JSON>'",
            names.join(", ")
        );
    }
    Ok(outcome(view))
}

/// A flow refused by lint: every problem on stderr, then the refusal as
/// the command's error.
fn invalid(url: String, message: String, problems: &[LintProblem]) -> CommandError {
    if !problems.is_empty() {
        eprintln!("{}", problem_lines(problems));
    }
    CommandError::Client(ClientError::Status {
        url,
        status: 400,
        code: Some("invalid_flow".to_owned()),
        message,
    })
}

fn print_view(view: &Value, output: OutputFormat) -> Result<(), CommandError> {
    print(&match output {
        OutputFormat::Json => view.to_string(),
        OutputFormat::Table => run_block(view, now_ms()),
    })
}

fn hash_of(answer: &Value) -> String {
    swarmd_client::render::clean(answer["hash"].as_str().unwrap_or("-"), 80)
}

/// The exit status of a verb that waited for a run: 0 when it passed,
/// `TASK_NOT_PASSED` when it ended otherwise, `TASK_NOT_FINISHED` when it
/// had not ended.
fn outcome(view: &Value) -> u8 {
    match view["status"].as_str() {
        Some("passed") => exit::OK,
        Some("failed" | "cancelled") => exit::TASK_NOT_PASSED,
        _ => exit::TASK_NOT_FINISHED,
    }
}

/// Whether `flow run`'s argument names a file rather than a flow: a flow's
/// name never holds a `/` or a `.`.
fn is_file(arg: &str) -> bool {
    arg.contains('/') || arg.ends_with(".json") || arg.ends_with(".toml") || arg.ends_with(".lua")
}

/// A flow's IR from `path`: TOML when the name ends in `.toml`, else JSON.
/// `swarmd flow import`: the Blueprint as swarmd IR on stdout, what was
/// left out on stderr.
fn import(file: &Path, name: Option<&str>) -> Result<u8, CommandError> {
    let blueprint = read_flow(file)?;
    match swarmd_flow::import::import_blueprint(&blueprint) {
        Ok(mut imported) => {
            if let Some(name) = name {
                imported.flow.name = name.to_owned();
            }
            for problem in &imported.dropped {
                eprintln!("left out {}: {}", problem.pointer, problem.message);
            }
            let text =
                serde_json::to_string_pretty(&imported.flow).map_err(|e| CommandError::Io {
                    action: "print the flow",
                    source: io::Error::other(e),
                })?;
            print(&text)?;
            Ok(exit::OK)
        }
        Err(problems) => {
            for problem in problems {
                eprintln!(
                    "{}  {}  {}  ({})",
                    problem.pointer, problem.code, problem.message, problem.hint
                );
            }
            Ok(exit::FAILURE)
        }
    }
}

/// Says on stderr when a linted file is larger than the daemon's flows
/// directory reads: such a flow runs only when sent inline.
fn note_too_large_for_the_directory(path: &Path) {
    let bound = swarmd_flow_run::catalog::MAX_FLOW_FILE_BYTES;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() > bound
    {
        eprintln!(
            "note: {} is {} bytes; [flows_dir] reads files of at most {bound} bytes, so it runs only sent inline",
            path.display(),
            meta.len()
        );
    }
}

fn read_flow(path: &Path) -> Result<Value, CommandError> {
    if path.extension().is_some_and(|ext| ext == "lua") {
        return Err(CommandError::Io {
            action: "read the flow file",
            source: io::Error::other(format!(
                "{}: a flow in Lua is read only from the daemon's flows directory ([flows_dir], docs/flows.md); this command takes a JSON or TOML flow",
                path.display()
            )),
        });
    }
    if path.extension().is_some_and(|ext| ext == "toml") {
        let text = read(path, "read the flow file")?;
        return toml::from_str::<Value>(&text).map_err(|error| CommandError::Io {
            action: "read the flow file",
            source: io::Error::other(format!("{}: {error}", path.display())),
        });
    }
    read_json(path, "read the flow file")
}

fn read_json(path: &Path, action: &'static str) -> Result<Value, CommandError> {
    let text = read(path, action)?;
    serde_json::from_str(&text).map_err(|error| CommandError::Io {
        action,
        source: io::Error::other(format!("{}: {error}", path.display())),
    })
}

fn read(path: &Path, action: &'static str) -> Result<String, CommandError> {
    std::fs::read_to_string(path).map_err(|error| CommandError::Io {
        action,
        source: io::Error::new(error.kind(), format!("{}: {error}", path.display())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_argument_is_a_file_only_when_a_name_cannot_be() {
        assert!(!is_file("best-of-3"));
        assert!(is_file("./review"));
        assert!(is_file("review.json"));
        assert!(is_file("flows/review.toml"));
        assert!(is_file("review.lua"));
    }

    #[test]
    fn a_lua_flow_file_is_told_where_lua_flows_load_from() {
        let dir = tempfile::tempdir().unwrap();
        let lua = dir.path().join("f.lua");
        std::fs::write(&lua, "return flow{}").unwrap();
        let error = read_flow(&lua).unwrap_err().to_string();
        assert!(error.contains("flows directory"), "{error}");
    }

    #[test]
    fn a_flow_file_is_toml_by_its_extension_else_json() {
        let dir = tempfile::tempdir().unwrap();
        let toml_file = dir.path().join("f.toml");
        std::fs::write(
            &toml_file,
            "name = \"f\"\n[body]\nkind = \"step\"\nref = \"a\"\n",
        )
        .unwrap();
        let flow = read_flow(&toml_file).unwrap();
        assert_eq!(flow["body"]["ref"], "a");
        let json_file = dir.path().join("f.json");
        std::fs::write(&json_file, "{\"name\": \"f\"}").unwrap();
        assert_eq!(read_flow(&json_file).unwrap()["name"], "f");
        std::fs::write(&json_file, "name = 1").unwrap();
        let refused = read_flow(&json_file).unwrap_err().to_string();
        assert!(refused.contains("f.json"), "{refused}");
    }

    #[test]
    fn a_waited_run_exits_by_its_outcome() {
        let status = |s: &str| outcome(&serde_json::json!({ "status": s }));
        assert_eq!(status("passed"), exit::OK);
        assert_eq!(status("failed"), exit::TASK_NOT_PASSED);
        assert_eq!(status("cancelled"), exit::TASK_NOT_PASSED);
        assert_eq!(status("waiting"), exit::TASK_NOT_FINISHED);
    }
}
