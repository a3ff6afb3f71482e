//! `swarmd keys rotate`, `swarmd admin-token` and `swarmd token mint`: local
//! operations on the secrets next to the state directory.

use std::sync::Arc;

use swarmd_engine::auth::{AuthorityConfig, MAX_LEEWAY_SECS, TokenAuthority};
use swarmd_engine::clock::SystemClock;
use swarmd_engine::gate::Role;

use super::{CommandError, print};
use crate::cli::{ConfigArgs, MintArgs, MintRole, exit};
use crate::config::Config;
use crate::environment::Environment;
use crate::state::{SecretSource, load_keyring, load_or_create_admin_secret};

fn load(args: &ConfigArgs, env: &Environment) -> Result<Config, CommandError> {
    Ok(Config::load(&args.config_path(), env, &args.overrides())?)
}

/// Rotates the keyring the daemon would load and prints the new key id.
pub(super) fn rotate_keys(args: &ConfigArgs, env: &Environment) -> Result<u8, CommandError> {
    let config = load(args, env)?;
    let kid = crate::state::rotate_keys(&SecretSource::for_keys(&config, env))?;
    print(&kid)?;
    Ok(exit::OK)
}

/// Prints the admin token, creating it when missing.
pub(super) fn admin_token(args: &ConfigArgs, env: &Environment) -> Result<u8, CommandError> {
    let config = load(args, env)?;
    let secret = load_or_create_admin_secret(&SecretSource::for_admin_token(&config, env))?;
    print(secret.expose())?;
    Ok(exit::OK)
}

/// Mints an observer or senior token with the daemon's keyring and prints it.
pub(super) fn mint_token(args: &MintArgs, env: &Environment) -> Result<u8, CommandError> {
    let config = load(&args.config, env)?;
    let max_secs = config.auth.max_token_ttl_secs;
    if args.ttl == 0 || args.ttl > max_secs {
        return Err(CommandError::Ttl {
            ttl_secs: args.ttl,
            max_secs,
        });
    }
    let keyring = load_keyring(&SecretSource::for_keys(&config, env))?;
    let authority = TokenAuthority::new(
        keyring,
        Arc::new(SystemClock),
        AuthorityConfig {
            leeway_secs: MAX_LEEWAY_SECS,
            max_ttl_secs: config.auth.max_token_ttl_secs,
        },
    );
    let role = match args.role {
        MintRole::Observer => Role::Observer,
        MintRole::Senior => Role::Senior,
    };
    let minted = authority.mint_role(role, args.ttl, None)?;
    print(minted.token.expose())?;
    Ok(exit::OK)
}
