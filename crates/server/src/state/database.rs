//! The keyring and the admin token on `store.backend = "postgres"`: read,
//! created and rotated in the database every node shares (`PgSecrets`),
//! when no systemd credential or `auth.*_file` names them.

use swarmd_engine::auth::{Keyring, SessionSecret};
use swarmd_postgres::{PgOptions, PgSecrets};

use super::{AdminTokenDigest, SecretSource, StateError, load_keyring, read_admin_secret};
use swarmd_config::Config;
use swarmd_config::environment::Environment;

/// A connection to the configured database for its secrets (the schema
/// migrated first, as at a node's start).
///
/// # Errors
/// `DatabaseUnreachable` naming the URL without its password.
async fn connect(config: &Config, env: &Environment) -> Result<PgSecrets, StateError> {
    let unreachable = |source| StateError::DatabaseUnreachable {
        url: swarmd_postgres::redact_url(&store_url(config)),
        source,
    };
    let mut opts = PgOptions::new(store_url(config));
    opts.password = pg_password(config, env).map_err(unreachable)?;
    PgSecrets::connect(&opts).await.map_err(unreachable)
}

fn store_url(config: &Config) -> String {
    config.store.url.clone().unwrap_or_default().0
}

/// A store error as a state error naming the database, without its password.
fn failed(config: &Config, source: swarmd_output_store::StoreError) -> StateError {
    StateError::Database {
        url: swarmd_postgres::redact_url(&store_url(config)),
        source,
    }
}

/// Secrets a node or a command reads, through one connection opened the
/// first time the database is needed.
pub(crate) struct Secrets<'a> {
    config: &'a Config,
    env: &'a Environment,
    db: Option<PgSecrets>,
}

impl<'a> Secrets<'a> {
    pub(crate) fn new(config: &'a Config, env: &'a Environment) -> Secrets<'a> {
        Secrets {
            config,
            env,
            db: None,
        }
    }

    async fn db(&mut self) -> Result<&mut PgSecrets, StateError> {
        let db = match self.db.take() {
            Some(db) => db,
            None => connect(self.config, self.env).await?,
        };
        Ok(self.db.insert(db))
    }

    /// The keyring from `source`, created where swarmd may create it.
    pub(crate) async fn keyring(&mut self, source: &SecretSource) -> Result<Keyring, StateError> {
        match source {
            SecretSource::Database => {
                let loaded = self.db().await?.keyring().await;
                loaded.map_err(|error| failed(self.config, error))
            }
            file => load_keyring(file),
        }
    }

    /// Makes a fresh key current at `source`; returns its id.
    pub(crate) async fn rotate(&mut self, source: &SecretSource) -> Result<String, StateError> {
        match source {
            SecretSource::Database => {
                let rotated = self.db().await?.rotate().await;
                rotated.map_err(|error| failed(self.config, error))
            }
            file => super::rotate_keys(file),
        }
    }

    /// The admin token's digest from `source`, the token created where
    /// swarmd may create it. A node keeps only this.
    pub(crate) async fn admin_digest(
        &mut self,
        source: &SecretSource,
    ) -> Result<AdminTokenDigest, StateError> {
        match source {
            SecretSource::Database => {
                let digest = self.db().await?.admin_digest().await;
                digest
                    .map(AdminTokenDigest::from_bytes)
                    .map_err(|error| failed(self.config, error))
            }
            file => super::load_or_create_admin_secret(file).map(|s| AdminTokenDigest::of(&s)),
        }
    }

    /// The admin token itself from `source`, created where swarmd may
    /// create it (`swarmd admin-token`).
    pub(crate) async fn admin_secret(
        &mut self,
        source: &SecretSource,
    ) -> Result<SessionSecret, StateError> {
        match source {
            SecretSource::Database => {
                let secret = self.db().await?.admin_secret().await;
                secret.map_err(|error| failed(self.config, error))
            }
            file => super::load_or_create_admin_secret(file),
        }
    }

    /// The admin token from `source`, never created (the CLI's default
    /// credential).
    pub(crate) async fn existing_admin_secret(
        &mut self,
        source: &SecretSource,
    ) -> Result<SessionSecret, StateError> {
        match source {
            SecretSource::Database => {
                let secret = self.db().await?.existing_admin_secret().await;
                secret
                    .map_err(|error| failed(self.config, error))?
                    .ok_or(StateError::NoAdminTokenInDatabase)
            }
            SecretSource::Credential(path)
            | SecretSource::ConfigFile(path)
            | SecretSource::StateDir(path) => read_admin_secret(path),
        }
    }
}

/// systemd's credential name for the PostgreSQL password
/// (`LoadCredential=swarmd-pg-password:…`).
pub(crate) const PG_PASSWORD_CREDENTIAL: &str = "swarmd-pg-password";

/// The PostgreSQL password: from `store.password_file`, else from the
/// systemd credential when it exists, else none. Trailing newlines are not
/// part of it. Errors name the file, never its contents.
pub(crate) fn pg_password(
    config: &Config,
    env: &Environment,
) -> Result<Option<String>, swarmd_output_store::StoreError> {
    let file = config.store.password_file.clone().or_else(|| {
        let dir = env.get("CREDENTIALS_DIRECTORY")?;
        let file = std::path::Path::new(&dir).join(PG_PASSWORD_CREDENTIAL);
        file.exists().then_some(file)
    });
    let Some(file) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&file).map_err(|error| {
        swarmd_output_store::StoreError::Io(std::io::Error::new(
            error.kind(),
            format!("store.password_file {}: {error}", file.display()),
        ))
    })?;
    Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned()))
}
