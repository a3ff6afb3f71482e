//! `swarmd worker pool …`: reads the pool's token (a file, `SWARMD_TOKEN`
//! or `SWARMD_TOKEN_FILE`), names the pool, installs its signal handlers
//! and runs `swarmd_worker::pool` until it drained.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use swarmd_git::worktree::{Bootstrap, PortsSpec, SetupSpec, keep_rule};
use swarmd_spawner::process::HostEnv;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use super::CommandError;
use crate::cli::{PoolArgs, exit};
use swarmd_client::Bearer;
use swarmd_client::wire::{MAX_POOL_ID, valid_pool_id};
use swarmd_config::environment::Environment;
use swarmd_worker::pool::run::Command;
use swarmd_worker::pool::worktree::PoolWorktree;
use swarmd_worker::pool::{MAX_SERVERS, PoolError, PoolOptions, run_pool};

/// Environment variable holding the pool's token when no file is given.
const TOKEN_VAR: &str = "SWARMD_TOKEN";
/// Environment variable naming a file that holds it, when neither is given.
const TOKEN_FILE_VAR: &str = "SWARMD_TOKEN_FILE";
/// Where attempts' worktrees go without `--worktree-dir`, under the pool's
/// working directory.
const WORKTREE_DIR: &str = "swarmd-worktrees";

/// Runs the pool; exits 0 once drained after a signal.
pub(super) async fn pool(args: PoolArgs, env: &Environment) -> Result<u8, CommandError> {
    // Where the token was read from, for a 401 to name (never the token).
    let (token, token_source) = match (
        &args.token_file,
        env.get(TOKEN_VAR),
        env.get(TOKEN_FILE_VAR),
    ) {
        (Some(file), _, _) => (
            super::remote::read_token(file, "--token-file")?,
            format!("the file {} of --token-file", file.display()),
        ),
        (None, Some(token), _) => (token.trim().to_owned(), TOKEN_VAR.to_owned()),
        (None, None, Some(path)) => (
            super::remote::read_token(std::path::Path::new(path), TOKEN_FILE_VAR)?,
            format!("the file {path} of {TOKEN_FILE_VAR}"),
        ),
        (None, None, None) => {
            return Err(usage(format!(
                "give the pool's token with --token-file, {TOKEN_VAR} or {TOKEN_FILE_VAR}"
            )));
        }
    };
    let bootstrap = pool_bootstrap(&args).map_err(usage)?;
    let pool_id = match args.pool_id {
        Some(id) if valid_pool_id(&id) => id,
        Some(_) => {
            return Err(usage(format!(
                "--pool-id must be 1 to {MAX_POOL_ID} ASCII letters, digits, '-' or '_'"
            )));
        }
        None => default_pool_id(),
    };
    check_servers(&args.server)?;
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(usage("no command after `--`".to_owned()));
    };
    let host_env = HostEnv::from_pairs(env.iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    let worktree = match args.worktree_repo {
        Some(repo) => {
            let keep = keep_rule(&args.worktree_keep).ok_or_else(|| {
                usage("--worktree-keep must be never, on_failure or always".to_owned())
            })?;
            let root = args
                .worktree_dir
                .unwrap_or_else(|| PathBuf::from(WORKTREE_DIR));
            let prepared =
                PoolWorktree::prepare(repo, args.worktree_base, keep, bootstrap, root, &host_env)
                    .await;
            Some(prepared.map_err(|reason| usage(format!("--worktree-repo: {reason}")))?)
        }
        None => None,
    };
    let options = PoolOptions {
        servers: args.server,
        token: Bearer::new(token).read_from(token_source),
        agent: args.agent,
        concurrency: args.concurrency,
        pool_id,
        command: Command {
            program: program.clone(),
            args: program_args.to_vec(),
            env: args.env,
            cwd: args.cwd,
            kill_grace: Duration::from_secs(args.kill_grace_secs),
            supervisor: Some(crate::daemon::supervisor()),
            worktree,
        },
        drain: Duration::from_secs(args.drain_secs),
        rediscover: Duration::from_secs(args.rediscover_secs),
        through: args.through_server,
    };
    let (stop, kill) = (CancellationToken::new(), CancellationToken::new());
    watch_signals(stop.clone(), kill.clone())?;
    tracing::info!(pool = %options.pool_id, agent = %options.agent, concurrency = options.concurrency, servers = options.servers.len(), through = options.through, "worker pool started");
    match run_pool(options, host_env, stop, kill).await {
        Ok(()) => Ok(exit::OK),
        Err(PoolError::Client(e)) => Err(e.into()),
        Err(PoolError::Refused(e)) => Err(CommandError::Io {
            action: "run the pool (the daemon refused it)",
            source: io::Error::other(e.to_string()),
        }),
        Err(e @ PoolError::AllRefused) => Err(CommandError::Io {
            action: "run the pool",
            source: io::Error::other(e.to_string()),
        }),
    }
}

/// At most [`MAX_SERVERS`] daemons, each named once.
fn check_servers(servers: &[String]) -> Result<(), CommandError> {
    if servers.len() > MAX_SERVERS {
        return Err(usage(format!(
            "--server is given at most {MAX_SERVERS} times"
        )));
    }
    let trimmed = |url: &String| url.trim_end_matches('/').to_owned();
    let distinct: std::collections::HashSet<String> = servers.iter().map(trimmed).collect();
    if distinct.len() != servers.len() {
        return Err(usage("--server names a daemon twice".to_owned()));
    }
    Ok(())
}

fn usage(message: String) -> CommandError {
    CommandError::Io {
        action: "start the pool",
        source: io::Error::new(io::ErrorKind::InvalidInput, message),
    }
}

/// `HOSTNAME-PID`, cut to the characters and length a pool id allows.
fn default_pool_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_POOL_ID - 12)
        .collect();
    let host = if host.is_empty() {
        "pool".to_owned()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// The first SIGTERM or SIGINT fires `stop`, the next `kill`.
fn watch_signals(stop: CancellationToken, kill: CancellationToken) -> Result<(), CommandError> {
    let io = |source| CommandError::Io {
        action: "install the signal handlers",
        source,
    };
    let mut term = signal(SignalKind::terminate()).map_err(io)?;
    let mut int = signal(SignalKind::interrupt()).map_err(io)?;
    tokio::spawn(async move {
        for token in [stop, kill] {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!(
                "signal received: {}",
                if token.is_cancelled() {
                    "again"
                } else {
                    "draining"
                }
            );
            token.cancel();
        }
    });
    Ok(())
}

/// The bootstrap of a pool's worktrees from its `--worktree-*` flags.
///
/// # Errors
/// The flag at fault and why, for the usage error.
fn pool_bootstrap(args: &PoolArgs) -> Result<Bootstrap, String> {
    let bootstrap = Bootstrap {
        copy: args.worktree_copy.clone(),
        link: args.worktree_link.clone(),
        setup: args.worktree_setup.as_ref().map(|shell| SetupSpec {
            command: vec!["sh".to_owned(), "-c".to_owned(), shell.clone()],
            timeout: Duration::from_secs(args.worktree_setup_timeout_secs.max(1)),
        }),
        ports: args
            .worktree_ports
            .as_ref()
            .map(|range| PortsSpec::new(range, args.worktree_port_count))
            .transpose()
            .map_err(|reason| format!("--worktree-ports: {reason}"))?,
    };
    bootstrap
        .check()
        .map_err(|reason| format!("--worktree-{reason}"))?;
    Ok(bootstrap)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command as CliCommand, WorkerCommand};

    fn pool_args(flags: &[&str]) -> PoolArgs {
        let mut argv = vec![
            "swarmd",
            "worker",
            "pool",
            "--agent",
            "a",
            "--server",
            "http://x:1",
        ];
        argv.extend(["--worktree-repo", "/srv/app"]);
        argv.extend(flags);
        argv.extend(["--", "true"]);
        let cli = Cli::try_parse_from(argv).unwrap();
        match cli.command {
            CliCommand::Worker(w) => match w.pool {
                Some(WorkerCommand::Pool(args)) => *args,
                None => panic!("no pool"),
            },
            _ => panic!("not a worker"),
        }
    }

    #[test]
    fn worktree_flags_give_the_pool_the_same_bootstrap_as_an_agent() {
        let args = pool_args(&[
            "--worktree-copy",
            ".env",
            "--worktree-copy",
            "config/*.toml",
            "--worktree-link",
            "node_modules",
            "--worktree-setup",
            "npm ci",
            "--worktree-setup-timeout-secs",
            "60",
            "--worktree-ports",
            "20000-20009",
            "--worktree-port-count",
            "2",
        ]);
        let bootstrap = pool_bootstrap(&args).unwrap();
        assert_eq!(bootstrap.copy, [".env", "config/*.toml"]);
        assert_eq!(bootstrap.link, ["node_modules"]);
        let setup = bootstrap.setup.unwrap();
        assert_eq!(setup.command, ["sh", "-c", "npm ci"]);
        assert_eq!(setup.timeout, Duration::from_secs(60));
        assert_eq!(bootstrap.ports.unwrap().count(), 2);
        assert_eq!(
            pool_bootstrap(&pool_args(&[])).unwrap(),
            Bootstrap::default()
        );
    }

    #[test]
    fn worktree_flags_leaving_the_repository_or_with_a_bad_range_are_refused() {
        let error = pool_bootstrap(&pool_args(&["--worktree-link", "../deps"])).unwrap_err();
        assert!(error.starts_with("--worktree-link: "), "{error}");
        let error = pool_bootstrap(&pool_args(&["--worktree-copy", "/etc/passwd"])).unwrap_err();
        assert!(error.starts_with("--worktree-copy: "), "{error}");
        let error = pool_bootstrap(&pool_args(&["--worktree-ports", "20009-20000"])).unwrap_err();
        assert!(error.contains("inverted"), "{error}");
    }
}
