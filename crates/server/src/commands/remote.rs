//! `swarmd task …`, `swarmd worker` and `swarmd mcp`: the commands that
//! talk to a running daemon over HTTP.

use std::path::Path;

use serde_json::Value;

use super::{CommandError, listing, print};
use crate::cli::{
    ConnectionArgs, McpArgs, OutputFormat, SpawnArgs, TaskArgs, TaskCommand, WorkerArgs, exit,
};
use crate::state::database::Secrets;
use crate::state::{SecretSource, StateError};
use swarmd_client::mcp::ProxyError;
use swarmd_client::render::{self, now_ms};
use swarmd_client::{ApiClient, Bearer, SpawnRequest, TailOptions};
use swarmd_config::environment::Environment;
use swarmd_config::{Config, config_candidates};
use swarmd_worker::{WorkerOptions, run_worker};

/// Runs one task verb and prints the daemon's answer as `-o` asks. A verb
/// that waits for the task exits by its outcome (`outcome`).
pub(super) async fn task(args: TaskArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = connect(&args.connection, env).await?;
    let mut waited = false;
    let answer = match args.command {
        TaskCommand::List(list) => {
            return listing::tasks(&client, &list, args.output).await;
        }
        TaskCommand::Spawn(spawn) => {
            let SpawnArgs {
                agent,
                continue_from,
                prompt,
                system,
                input,
                layers,
                metadata,
                policy,
                idempotency_key,
                wait,
            } = *spawn;
            let prompt = if prompt == "-" {
                read_stdin().await?
            } else {
                prompt
            };
            waited = wait.is_some();
            let continue_from = match continue_from {
                Some(given) => Some(client.resolve_task(&given).await?),
                None => None,
            };
            let request = SpawnRequest {
                agent: agent.unwrap_or_default(),
                continue_from,
                prompt,
                system,
                input,
                layers,
                metadata,
                policy,
                idempotency_key,
                wait_secs: wait,
            };
            client.create_task(&request).await?
        }
        TaskCommand::Get { id } => client.get_task(&client.resolve_task(&id).await?).await?,
        TaskCommand::Wait { id, timeout } => {
            waited = true;
            let id = client.resolve_task(&id).await?;
            client.wait_task(&id, timeout).await?
        }
        TaskCommand::Cancel { id, reason } => {
            let id = client.resolve_task(&id).await?;
            client.cancel_task(&id, reason.as_deref()).await?
        }
        TaskCommand::Tail {
            id,
            attempt,
            after_seq,
        } => {
            let id = client.resolve_task(&id).await?;
            let options = TailOptions { attempt, after_seq };
            let mut stdout = std::io::stdout();
            client.tail_output(&id, options, &mut stdout).await?;
            return Ok(exit::OK);
        }
    };
    if !answer.is_null() {
        print(&task_text(&answer, args.output))?;
    }
    Ok(if waited { outcome(&answer) } else { exit::OK })
}

/// A task verb's answer as `output` asks: the JSON as the daemon sent it,
/// or a key/value block (a spawn that did not wait answers only its id and
/// status).
fn task_text(answer: &Value, output: OutputFormat) -> String {
    match output {
        OutputFormat::Json => answer.to_string(),
        OutputFormat::Table if answer.get("created_ms").is_some() => {
            render::task_block(answer, now_ms())
        }
        OutputFormat::Table => render::accepted(answer),
    }
}

/// The exit status of a command that waited for a task: 0 when it passed,
/// `TASK_NOT_PASSED` when it finished otherwise, `TASK_NOT_FINISHED` when
/// it was still queued or running.
fn outcome(task: &serde_json::Value) -> u8 {
    match task["status"].as_str() {
        Some("pass") => exit::OK,
        Some("blocked" | "failed" | "cancelled") => exit::TASK_NOT_PASSED,
        _ => exit::TASK_NOT_FINISHED,
    }
}

/// Runs `swarmd mcp`: the daemon's MCP tools on stdio until stdin closes.
/// With `--no-login` the credential is required as for `task`; otherwise a
/// missing one is no error: the login is then a loopback login.
pub(super) async fn mcp(args: McpArgs, env: &Environment) -> Result<u8, CommandError> {
    let (url, found, missing) = if args.no_login {
        let found = endpoint(&args.connection, env).await?;
        (found.url.clone(), Some(found), None)
    } else {
        match endpoint(&args.connection, env).await {
            Ok(found) => (found.url.clone(), Some(found), None),
            Err(error @ CommandError::NoCredential { .. }) => {
                tracing::debug!(%error, "no admin token: trying a loopback login");
                (url_only(&args.connection, env)?, None, Some(error))
            }
            Err(error) => return Err(error),
        }
    };
    let options = args.relay_options(swarmd_config::user_state_dir(env));
    let token = found.as_ref().map(|found| found.token.as_str());
    let served = swarmd_client::mcp::serve_stdio(&options, &url, token).await;
    match (served, missing, found) {
        (Ok(()), _, _) => Ok(exit::OK),
        // A loopback login refused for want of a credential: say where the
        // credential was looked for. Other refusals (a role taken) stand.
        (Err(ProxyError::Refused { message, .. }), Some(missing), _)
            if message.ends_with("(unauthorized)") =>
        {
            Err(missing)
        }
        // A credential refused: say where it was read from, never what it is.
        (Err(ProxyError::Refused { url, what, message }), _, Some(found))
            if message.ends_with("(unauthorized)") =>
        {
            Err(ProxyError::Refused {
                url,
                what,
                message: format!("{message} (credential from {})", found.token_source),
            }
            .into())
        }
        (Err(error), _, _) => Err(error.into()),
    }
}

/// Runs `swarmd worker` and returns the command's exit code.
pub(super) async fn worker(args: WorkerArgs) -> Result<u8, CommandError> {
    // Both are required by the parser unless a subcommand is given.
    let (Some(base_url), Some(handle)) = (args.base_url, args.handle) else {
        return Err(CommandError::Io {
            action: "run the worker",
            source: std::io::Error::other("--handle and --base-url are required"),
        });
    };
    let options = WorkerOptions {
        base_url,
        handle: Bearer::new(&handle),
        task_id: args.task_id,
        heartbeat_secs: args.heartbeat_secs,
        command: args.command,
    };
    Ok(run_worker(&options).await?)
}

/// A client from the flags (see `endpoint`); a 401 answer names where its
/// credential was read from.
pub(super) async fn connect(
    args: &ConnectionArgs,
    env: &Environment,
) -> Result<ApiClient, CommandError> {
    let found = endpoint(args, env).await?;
    let bearer = Bearer::new(&found.token).read_from(found.token_source);
    Ok(ApiClient::new(&found.url, bearer)?)
}

/// How to reach the daemon: its URL, the credential, and where the
/// credential was read from (a flag, a variable, a file; never the
/// credential itself).
pub(super) struct Endpoint {
    pub(super) url: String,
    pub(super) token: String,
    pub(super) token_source: String,
}

/// The daemon's URL and the bearer credential. The URL: `--url`, else
/// `SWARMD_URL` (both read by the parser), else the configuration's. The
/// credential: `--token`, else the file `--token-file` names, else
/// `SWARMD_TOKEN`, else the file `SWARMD_TOKEN_FILE` names, else the admin
/// token (its file, or the database on PostgreSQL) of the configuration's
/// state directory. The configuration (`--config`, else the per-user file,
/// else /etc) is read only when one of them is missing there.
pub(super) async fn endpoint(
    args: &ConnectionArgs,
    env: &Environment,
) -> Result<Endpoint, CommandError> {
    let load = || Config::load(&args.config.config_path(env), env, &args.config.overrides());
    let mut loaded = None;
    let url = match &args.url {
        Some(url) => url.clone(),
        None => {
            let config: &Config = loaded.insert(load()?);
            config.base_url(config.server.bind)
        }
    };
    let given = match (&args.token, &args.token_file) {
        (Some(token), _) => Some((token.clone(), "--token".to_owned())),
        (None, Some(path)) => Some((
            read_token(path, "--token-file")?,
            format!("the file {} of --token-file", path.display()),
        )),
        (None, None) => match (env.get("SWARMD_TOKEN"), env.get("SWARMD_TOKEN_FILE")) {
            (Some(token), _) => Some((token.to_owned(), "SWARMD_TOKEN".to_owned())),
            (None, Some(path)) => Some((
                read_token(Path::new(path), "SWARMD_TOKEN_FILE")?,
                format!("the file {path} of SWARMD_TOKEN_FILE"),
            )),
            (None, None) => None,
        },
    };
    let (token, token_source) = match given {
        Some(given) => given,
        None => {
            let config = match loaded {
                Some(config) => config,
                None => load()?,
            };
            let source = SecretSource::for_admin_token(&config, env);
            match Secrets::new(&config, env)
                .existing_admin_secret(&source)
                .await
            {
                Ok(secret) => {
                    let place = match source.path() {
                        Some(path) => format!("the admin token file {}", path.display()),
                        None => "the admin token in the database".to_owned(),
                    };
                    let config = config_name(&config, env);
                    (
                        secret.expose().to_owned(),
                        format!("{place}, configuration: {config}"),
                    )
                }
                Err(error) => return Err(no_credential(&error, &config, env)),
            }
        }
    };
    Ok(Endpoint {
        url,
        token,
        token_source,
    })
}

/// The credential in the file at `path`, trimmed; `source` (the flag or
/// variable that named it) and the path are in the error, never the file's
/// content.
pub(super) fn read_token(path: &Path, source: &'static str) -> Result<String, CommandError> {
    let unreadable = |reason: String| CommandError::TokenFile {
        source_name: source,
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|error| unreadable(error.to_string()))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(unreadable("it holds no single credential".to_owned()));
    }
    Ok(token.to_owned())
}

/// The admin token could not be read: say where it was looked for and which
/// configuration named that place.
fn no_credential(error: &StateError, config: &Config, env: &Environment) -> CommandError {
    CommandError::NoCredential {
        reason: error.to_string(),
        config: config_name(config, env),
    }
}

/// The configuration file `config` was read from, or the places looked at
/// when there was none.
fn config_name(config: &Config, env: &Environment) -> String {
    match &config.source {
        Some(path) => path.display().to_string(),
        None => {
            let candidates: Vec<String> = config_candidates(env)
                .iter()
                .map(|path| path.display().to_string())
                .collect();
            format!("no file, looked for {}", candidates.join(" and "))
        }
    }
}

/// The daemon's URL from the flags, else from the configuration.
fn url_only(args: &ConnectionArgs, env: &Environment) -> Result<String, CommandError> {
    if let Some(url) = &args.url {
        return Ok(url.clone());
    }
    let config = Config::load(&args.config.config_path(env), env, &args.config.overrides())?;
    Ok(config.base_url(config.server.bind))
}

async fn read_stdin() -> Result<String, CommandError> {
    let read = tokio::task::spawn_blocking(|| std::io::read_to_string(std::io::stdin()))
        .await
        .map_err(std::io::Error::other)
        .and_then(|read| read);
    read.map_err(|source| CommandError::Io {
        action: "read the prompt from stdin",
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::cli::ConfigArgs;

    fn args(token: Option<&str>, token_file: Option<PathBuf>) -> ConnectionArgs {
        ConnectionArgs {
            url: Some("http://127.0.0.1:1".to_owned()),
            token: token.map(str::to_owned),
            token_file,
            config: ConfigArgs {
                config: None,
                state_dir: None,
            },
        }
    }

    #[tokio::test]
    async fn the_credential_is_flag_then_file_flag_then_variable_then_file_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let flag_file = file("flag", "from-flag-file\n");
        let env_file = file("env", "  from-env-file  ");
        let env_path = env_file.to_str().unwrap();
        let both = Environment::from_pairs([
            ("SWARMD_TOKEN", "from-env"),
            ("SWARMD_TOKEN_FILE", env_path),
        ]);
        let file_only = Environment::from_pairs([("SWARMD_TOKEN_FILE", env_path)]);
        let token = |args: ConnectionArgs, env: Environment| async move {
            endpoint(&args, &env).await.map(|found| found.token)
        };
        let got = token(
            args(Some("from-flag"), Some(flag_file.clone())),
            both.clone(),
        );
        assert_eq!(got.await.unwrap(), "from-flag");
        let got = token(args(None, Some(flag_file)), both.clone());
        assert_eq!(got.await.unwrap(), "from-flag-file");
        assert_eq!(token(args(None, None), both).await.unwrap(), "from-env");
        assert_eq!(
            token(args(None, None), file_only).await.unwrap(),
            "from-env-file"
        );

        let empty = file("empty", " \n");
        let refused = token(args(None, Some(empty.clone())), Environment::default()).await;
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("--token-file") && message.contains(empty.to_str().unwrap()));
        let two = file("two", "sws-a sws-b");
        let refused = token(args(None, Some(two)), Environment::default()).await;
        assert!(!refused.unwrap_err().to_string().contains("sws-a"));
    }
}
