//! `swarmd serve`: the daemon's wiring, in order: configuration, state
//! directory (locked), systemd, signal handlers, listener, then `run`.

use std::sync::Arc;

use super::CommandError;
use crate::cli::ServeArgs;
use crate::state::{PreparedState, StateDir};
use crate::systemd::Systemd;
use crate::{Startup, bind, run, shutdown};
use swarmd_config::environment::Environment;
use swarmd_config::{Config, StoreBackend};

/// Runs the daemon until SIGTERM/SIGINT and its drain are over.
pub(super) async fn serve(args: &ServeArgs, env: &Environment) -> Result<(), CommandError> {
    let config = Config::load(&args.config.config_path(env), env, &args.overrides())?;
    let config = Arc::new(config);
    // One daemon per state directory that holds a store (SQLite's file,
    // a cluster node's id): held until `serve` returns.
    let dir = StateDir::prepare(&config.store.state_dir)?;
    let _lock = match config.store.backend {
        StoreBackend::Memory => None,
        _ => Some(dir.lock().await?),
    };
    let state = PreparedState::prepare_in(dir, &config, env).await?;
    let systemd = Systemd::from_env(env);
    let shutdown = shutdown::install().map_err(|source| CommandError::Io {
        action: "install signal handlers",
        source,
    })?;
    let listener = bind(config.server.bind).await?;
    let startup = Startup {
        config,
        state,
        systemd,
        env: env.clone(),
    };
    run(startup, listener, shutdown).await?;
    Ok(())
}
