//! `swarmd task …`, `swarmd worker` and `swarmd mcp`: the commands that
//! talk to a running daemon over HTTP.

use super::{CommandError, print};
use crate::cli::{ConnectionArgs, McpArgs, SpawnArgs, TaskArgs, TaskCommand, WorkerArgs, exit};
use crate::client::{ApiClient, Bearer, SpawnRequest, TailOptions, WorkerOptions, run_worker};
use crate::config::{Config, config_candidates};
use crate::environment::Environment;
use crate::mcp::ProxyError;
use crate::state::database::Secrets;
use crate::state::{SecretSource, StateError};

/// Runs one task verb and prints the daemon's JSON answer. A verb that
/// waits for the task exits by its outcome (`outcome`).
pub(super) async fn task(args: TaskArgs, env: &Environment) -> Result<u8, CommandError> {
    let client = connect(&args.connection, env).await?;
    let mut waited = false;
    let answer = match args.command {
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
        TaskCommand::Get { id } => client.get_task(&id).await?,
        TaskCommand::Wait { id, timeout } => {
            waited = true;
            client.wait_task(&id, timeout).await?
        }
        TaskCommand::Cancel { id } => client.cancel_task(&id).await?,
        TaskCommand::Tail {
            id,
            attempt,
            after_seq,
        } => {
            let options = TailOptions { attempt, after_seq };
            let mut stdout = std::io::stdout();
            client.tail_output(&id, options, &mut stdout).await?;
            return Ok(exit::OK);
        }
    };
    if !answer.is_null() {
        print(&answer.to_string())?;
    }
    Ok(if waited { outcome(&answer) } else { exit::OK })
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
    let (url, token, missing) = if args.no_login {
        let (url, token) = endpoint(&args.connection, env).await?;
        (url, Some(token), None)
    } else {
        match endpoint(&args.connection, env).await {
            Ok((url, token)) => (url, Some(token), None),
            Err(error @ CommandError::NoCredential { .. }) => {
                tracing::debug!(%error, "no admin token: trying a loopback login");
                (url_only(&args.connection, env)?, None, Some(error))
            }
            Err(error) => return Err(error),
        }
    };
    let served = crate::mcp::serve_stdio(&args, &url, token.as_deref(), env).await;
    match (served, missing) {
        (Ok(()), _) => Ok(exit::OK),
        // A loopback login refused for want of a credential: say where the
        // credential was looked for. Other refusals (a role taken) stand.
        (Err(ProxyError::Refused { message, .. }), Some(missing))
            if message.ends_with("(unauthorized)") =>
        {
            Err(missing)
        }
        (Err(error), _) => Err(error.into()),
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

/// A client from the flags (see `endpoint`).
async fn connect(args: &ConnectionArgs, env: &Environment) -> Result<ApiClient, CommandError> {
    let (url, token) = endpoint(args, env).await?;
    Ok(ApiClient::new(&url, Bearer::new(&token))?)
}

/// The daemon's URL and the bearer credential from the flags, falling back to
/// the configuration for the URL and to the admin token (its file, or the
/// database on PostgreSQL) for the credential. The configuration is read
/// only when a flag is missing.
pub(super) async fn endpoint(
    args: &ConnectionArgs,
    env: &Environment,
) -> Result<(String, String), CommandError> {
    let load = || Config::load(&args.config.config_path(env), env, &args.config.overrides());
    let mut loaded = None;
    let url = match &args.url {
        Some(url) => url.clone(),
        None => {
            let config: &Config = loaded.insert(load()?);
            config.base_url(config.server.bind)
        }
    };
    let token = match &args.token {
        Some(token) => token.clone(),
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
                Ok(secret) => secret.expose().to_owned(),
                Err(error) => return Err(no_credential(&error, &config, env)),
            }
        }
    };
    Ok((url, token))
}

/// The admin token could not be read: say where it was looked for and which
/// configuration named that place.
fn no_credential(error: &StateError, config: &Config, env: &Environment) -> CommandError {
    let config = match &config.source {
        Some(path) => path.display().to_string(),
        None => {
            let candidates: Vec<String> = config_candidates(env)
                .iter()
                .map(|path| path.display().to_string())
                .collect();
            format!("no file, looked for {}", candidates.join(" and "))
        }
    };
    CommandError::NoCredential {
        reason: error.to_string(),
        config,
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
