//! The state directory (docs/operations.md, State directory) and the secrets kept next to it: the
//! signing keyring and the admin token.
//!
//! `PreparedState::prepare` runs once at startup: it creates `<state_dir>`
//! and `blobs/` (0700), loads or creates the keyring, and loads or creates the
//! admin token, of which only the SHA-256 digest is kept. Secrets come from,
//! in order of preference: a systemd credential (read-only, never written), a
//! file named by `auth.*_file` (created 0600 if missing), the database on
//! `store.backend = "postgres"` (created by the first node, `database`), the
//! default file in the state directory (created 0600 if missing).

mod admin_token;
pub(crate) mod database;
mod dir;
mod keys;
mod lock;

use std::io;
use std::path::{Path, PathBuf};

pub use admin_token::{load_or_create_admin_secret, read_admin_secret};
pub use dir::{BLOBS_DIR, DATABASE_FILE, StateDir};
pub use keys::{load_keyring, rotate_keys};
pub use lock::{LOCK_FILE, LOCK_PATIENCE, StateLock};
pub use swarmd_api::app::AdminTokenDigest;
use swarmd_engine::auth::{Keyring, KeyringError};

use swarmd_config::environment::Environment;
use swarmd_config::{Config, StoreBackend};

/// systemd credential name (`LoadCredential=swarmd-keys:…`) for the keyring.
pub const KEYS_CREDENTIAL: &str = "swarmd-keys";
/// systemd credential name for the admin token.
pub const ADMIN_TOKEN_CREDENTIAL: &str = "swarmd-admin-token";
/// Keyring file name in the state directory.
pub const KEYS_FILE: &str = "keys.json";
/// Admin token file name in the state directory.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Where a secret is read from, and whether swarmd may create or rewrite it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `$CREDENTIALS_DIRECTORY/<name>`: read-only.
    Credential(PathBuf),
    /// A file named in `[auth]`: created 0600 when missing.
    ConfigFile(PathBuf),
    /// The default file in the state directory: created 0600 when missing.
    StateDir(PathBuf),
    /// The PostgreSQL database of `store.url`, shared by every node: created
    /// by the first node to start.
    Database,
}

impl SecretSource {
    /// The file holding the secret; `None` for the database.
    pub fn path(&self) -> Option<&Path> {
        match self {
            SecretSource::Credential(path)
            | SecretSource::ConfigFile(path)
            | SecretSource::StateDir(path) => Some(path),
            SecretSource::Database => None,
        }
    }

    /// Where the keyring comes from for `config` and `env`.
    pub fn for_keys(config: &Config, env: &Environment) -> SecretSource {
        Self::resolve(
            config,
            env,
            KEYS_CREDENTIAL,
            config.auth.keys_file.as_deref(),
            &config.store.state_dir.join(KEYS_FILE),
        )
    }

    /// Where the admin token comes from for `config` and `env`.
    pub fn for_admin_token(config: &Config, env: &Environment) -> SecretSource {
        Self::resolve(
            config,
            env,
            ADMIN_TOKEN_CREDENTIAL,
            config.auth.admin_token_file.as_deref(),
            &config.store.state_dir.join(ADMIN_TOKEN_FILE),
        )
    }

    fn resolve(
        config: &Config,
        env: &Environment,
        credential: &str,
        configured: Option<&Path>,
        default: &Path,
    ) -> SecretSource {
        let from_systemd = env
            .get("CREDENTIALS_DIRECTORY")
            .map(|dir| Path::new(dir).join(credential))
            .filter(|path| path.exists());
        match (from_systemd, configured, &config.store.backend) {
            (Some(path), _, _) => SecretSource::Credential(path),
            (None, Some(path), _) => SecretSource::ConfigFile(path.to_owned()),
            (None, None, StoreBackend::Postgres) => SecretSource::Database,
            (None, None, _) => SecretSource::StateDir(default.to_owned()),
        }
    }
}

impl std::fmt::Display for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path() {
            Some(path) => write!(f, "{}", path.display()),
            None => f.write_str("the PostgreSQL database"),
        }
    }
}

/// Why the state directory or its secrets could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot create state directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "state {} is open to other users (mode {mode:o}) and cannot be made private: {source}; chmod it 700 (600 for a file) or choose another store.state_dir",
        path.display()
    )]
    NotPrivate {
        path: PathBuf,
        mode: u32,
        #[source]
        source: io::Error,
    },
    #[error(
        "state directory {} is in use by another swarmd serve{}; stop it, or give this one another store.state_dir",
        path.display(),
        pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse { path: PathBuf, pid: Option<u32> },
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Keyring(#[from] KeyringError),
    #[error("cannot read admin token {}: {source}", path.display())]
    ReadAdminToken {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write admin token {}: {source}", path.display())]
    WriteAdminToken {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "admin token {} is malformed: expected `sws-` followed by 64 lowercase hex digits",
        path.display()
    )]
    BadAdminToken { path: PathBuf },
    #[error("{} is a systemd credential and is never written; change its source file instead", path.display())]
    ReadOnlyCredential { path: PathBuf },
    #[error("cannot connect to the PostgreSQL database {url}: {source}")]
    DatabaseUnreachable {
        url: String,
        #[source]
        source: swarmd_output_store::StoreError,
    },
    #[error(
        "cannot read or write the keyring or admin token in the PostgreSQL database {url}: {source}"
    )]
    Database {
        url: String,
        #[source]
        source: swarmd_output_store::StoreError,
    },
    #[error(
        "the PostgreSQL database has no admin token yet: start swarmd or run `swarmd admin-token` first"
    )]
    NoAdminTokenInDatabase,
    #[error("this secret is kept in the PostgreSQL database, not in a file")]
    InDatabase,
}

/// Everything startup needs from the state directory.
#[derive(Debug)]
pub struct PreparedState {
    /// The state directory, created.
    pub dir: StateDir,
    /// The signing keyring.
    pub keyring: Keyring,
    /// Where the keyring was read from.
    pub keys_source: SecretSource,
    /// SHA-256 of the admin token; the token itself is not kept.
    pub admin_token: AdminTokenDigest,
}

impl PreparedState {
    /// Creates the state directory and loads (or creates) the keyring and the
    /// admin token, from the database when that is their source.
    ///
    /// # Errors
    /// A `StateError` naming the path (or the database, without its
    /// password) that could not be created, read or parsed.
    pub async fn prepare(config: &Config, env: &Environment) -> Result<PreparedState, StateError> {
        Self::prepare_in(StateDir::prepare(&config.store.state_dir)?, config, env).await
    }

    /// [`PreparedState::prepare`] in a state directory already prepared
    /// (`serve` prepares it once, to lock it before anything is read).
    ///
    /// # Errors
    /// As [`PreparedState::prepare`].
    pub async fn prepare_in(
        dir: StateDir,
        config: &Config,
        env: &Environment,
    ) -> Result<PreparedState, StateError> {
        let mut secrets = database::Secrets::new(config, env);
        let keys_source = SecretSource::for_keys(config, env);
        let keyring = secrets.keyring(&keys_source).await?;
        let admin_source = SecretSource::for_admin_token(config, env);
        let admin_token = secrets.admin_digest(&admin_source).await?;
        tracing::info!(
            state_dir = %dir.root().display(),
            keys = %keys_source,
            kid = keyring.current_kid(),
            admin_token = %admin_source,
            "state directory ready"
        );
        Ok(PreparedState {
            dir,
            keyring,
            keys_source,
            admin_token,
        })
    }
}

#[cfg(test)]
mod tests;
