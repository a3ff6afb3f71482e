//! `swarmd keys rotate`, `swarmd admin-token` and `swarmd token mint`: local
//! operations on the secrets the daemon would load (files next to the state
//! directory, or the PostgreSQL database).

use std::sync::Arc;

use swarmd_engine::auth::{AuthorityConfig, MAX_LEEWAY_SECS, TokenAuthority};
use swarmd_engine::clock::SystemClock;
use swarmd_engine::gate::Role;

use super::{CommandError, print};
use crate::cli::{ConfigArgs, MintArgs, MintRole, exit};
use crate::state::SecretSource;
use crate::state::database::Secrets;
use swarmd_config::Config;
use swarmd_config::environment::Environment;

fn load(args: &ConfigArgs, env: &Environment) -> Result<Config, CommandError> {
    Ok(Config::load(
        &args.config_path(env),
        env,
        &args.overrides(),
    )?)
}

/// Rotates the keyring the daemon would load and prints the new key id.
pub(super) async fn rotate_keys(args: &ConfigArgs, env: &Environment) -> Result<u8, CommandError> {
    let config = load(args, env)?;
    let kid = Secrets::new(&config, env)
        .rotate(&SecretSource::for_keys(&config, env))
        .await?;
    print(&kid)?;
    Ok(exit::OK)
}

/// Prints the admin token, creating it when missing.
pub(super) async fn admin_token(args: &ConfigArgs, env: &Environment) -> Result<u8, CommandError> {
    let config = load(args, env)?;
    let secret = Secrets::new(&config, env)
        .admin_secret(&SecretSource::for_admin_token(&config, env))
        .await?;
    print(secret.expose())?;
    Ok(exit::OK)
}

/// Mints an observer, senior or worker-pool token with the daemon's keyring and prints it.
pub(super) async fn mint_token(args: &MintArgs, env: &Environment) -> Result<u8, CommandError> {
    let config = load(&args.config, env)?;
    let max_secs = config.auth.max_token_ttl_secs;
    if args.ttl == 0 || args.ttl > max_secs {
        return Err(CommandError::Ttl {
            ttl_secs: args.ttl,
            max_secs,
        });
    }
    let keyring = Secrets::new(&config, env)
        .keyring(&SecretSource::for_keys(&config, env))
        .await?;
    let authority = TokenAuthority::new(
        keyring,
        Arc::new(SystemClock),
        AuthorityConfig {
            leeway_secs: MAX_LEEWAY_SECS,
            max_ttl_secs: config.auth.max_token_ttl_secs,
        },
    );
    let minted = match args.role {
        MintRole::WorkerPool => {
            check_pool_agents(&config, &args.agents)?;
            authority.mint_pool(&args.agents, args.ttl)?
        }
        _ if !args.agents.is_empty() => {
            return Err(mint_usage(
                "--agent is for --role worker-pool only".to_owned(),
            ));
        }
        MintRole::Observer => authority.mint_role(Role::Observer, args.ttl, None)?,
        MintRole::Senior => authority.mint_role(Role::Senior, args.ttl, None)?,
    };
    print(minted.token.expose())?;
    Ok(exit::OK)
}

/// A worker-pool token names at least one agent, each a configured remote
/// agent, and fits a token's sub.
fn check_pool_agents(config: &Config, agents: &[String]) -> Result<(), CommandError> {
    if agents.is_empty() {
        return Err(mint_usage(
            "--role worker-pool needs at least one --agent".to_owned(),
        ));
    }
    for agent in agents {
        let remote = config
            .agents
            .get(agent)
            .is_some_and(|a| a.kind.name() == "remote");
        if !remote {
            return Err(mint_usage(format!(
                "agent `{agent}` is not a configured agent of kind remote"
            )));
        }
    }
    let sub_len = swarmd_engine::auth::POOL_SUB_PREFIX.len()
        + agents.iter().map(|a| a.len() + 1).sum::<usize>();
    if sub_len > swarmd_engine::auth::MAX_SUB_BYTES {
        return Err(mint_usage(
            "the agents' names are too long for one token: mint one per agent".to_owned(),
        ));
    }
    Ok(())
}

fn mint_usage(message: String) -> CommandError {
    CommandError::Usage(format!("cannot mint the token: {message}"))
}
