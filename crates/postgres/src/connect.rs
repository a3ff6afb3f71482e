//! How the store reaches PostgreSQL: the options (URL, password, pool
//! size), the driver's configuration built from them, the writer's own
//! connection and the read pool. The password never leaves these values:
//! `PgOptions`'s `Debug` redacts it, and so does the driver's `Config`.

use std::str::FromStr;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use swarmd_output_store::StoreError;
use tokio_postgres::{Client, Config, NoTls};

use crate::redact::redact_url;

/// Pooled read connections when the configuration names none.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// Most jobs one group commit takes.
pub const DEFAULT_MAX_BATCH: usize = 4096;

/// How to reach the database.
#[derive(Clone)]
pub struct PgOptions {
    /// A libpq-style URL (`postgres://user@host:port/db?...`) or key=value
    /// string (`host=… user=… dbname=…`). A password here works but belongs
    /// in `password`.
    pub url: String,
    /// The login password, read from a credential file by the caller.
    pub password: Option<String>,
    /// Read connections in the pool (at least 1); the writer has its own.
    pub pool_size: usize,
    /// Most jobs folded into one group commit (at least 1).
    pub max_batch: usize,
}

impl PgOptions {
    /// Defaults for the database at `url`.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            password: None,
            pool_size: DEFAULT_POOL_SIZE,
            max_batch: DEFAULT_MAX_BATCH,
        }
    }

    /// The driver's configuration: `url` parsed, the password set, and
    /// `application_name = swarmd` unless the URL names one.
    pub(crate) fn pg_config(&self) -> Result<Config, StoreError> {
        let mut config = Config::from_str(&self.url).map_err(|error| {
            // The parser's message may quote the string, which may hold a
            // password: only its kind is kept.
            let _ = error;
            StoreError::Database(
                "store.url is not a PostgreSQL URL or key=value connection string".into(),
            )
        })?;
        if let Some(password) = &self.password {
            config.password(password);
        }
        if config.get_application_name().is_none() {
            config.application_name("swarmd");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        Ok(config)
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("url", &redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("pool_size", &self.pool_size)
            .field("max_batch", &self.max_batch)
            .finish()
    }
}

/// The SQLSTATE `swarmd_fence` raises when the node's row is not alive
/// with its epoch (migrate.rs).
pub(crate) const FENCED_SQLSTATE: &str = "SW410";

/// A driver error as a store error.
/// The dedicated SQLSTATE `swarmd_fence` raises becomes `StoreError::Fenced`.
pub(crate) fn db_error(error: tokio_postgres::Error) -> StoreError {
    if error.code().map(tokio_postgres::error::SqlState::code) == Some(FENCED_SQLSTATE) {
        return StoreError::Fenced;
    }
    StoreError::Database(Box::new(error))
}

/// A pool error as a store error.
pub(crate) fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Database(Box::new(error))
}

/// The connection's background half, which the caller spawns.
pub(crate) type Connection =
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>;

/// One connection outside the pool (the writer's, the migration's).
pub(crate) async fn connect(config: &Config) -> Result<(Client, Connection), StoreError> {
    config.connect(NoTls).await.map_err(db_error)
}

/// The read pool: connections are made on demand, up to `size`.
pub(crate) fn pool(config: Config, size: usize) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|error| StoreError::Database(Box::new(error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let mut opts = PgOptions::new("postgres://u:inline-secret@h/d");
        opts.password = Some("file-secret".to_owned());
        let shown = format!("{opts:?}");
        assert!(
            !shown.contains("inline-secret") && !shown.contains("file-secret"),
            "{shown}"
        );
    }

    #[test]
    fn a_bad_url_is_refused_without_echoing_it() {
        let opts = PgOptions::new("postgres://u:sekret@h:notaport/d");
        let error = opts.pg_config().unwrap_err().to_string();
        assert!(!error.contains("sekret"), "{error}");
    }
}
