//! The signing keyring and the admin token in PostgreSQL, shared by every
//! node of one database (docs/security.md, Secrets on PostgreSQL).
//!
//! `PgSecrets` is one connection of its own, opened at a node's start (and
//! by `swarmd keys rotate`, `swarmd admin-token` and `swarmd token mint`),
//! which applies the schema migrations first. Creating or rotating happens
//! in one transaction under `pg_advisory_xact_lock(SECRETS_LOCK)`: the first
//! node to start creates the keyring and the admin token, and nodes
//! starting together end with one of each. The constraints back the lock
//! up: one row of `admin_token`, at most one `current` signing key.
//!
//! A node reads only the admin token's digest; its secret is read only to
//! print it. Nothing here logs a secret: key ids and fingerprints only.

use rand::RngCore;
use rand::rngs::OsRng;
use swarmd_engine::auth::{KEY_BYTES, Keyring, SessionSecret, SigningKey};
use swarmd_output_store::StoreError;
use tokio_postgres::Client;

use crate::connect::{self, db_error};
use crate::{PgOptions, migrate, writer};

/// The advisory lock key of secret creation and rotation: "swkeys" in
/// ASCII, beside the migrations' "swarmd".
const SECRETS_LOCK: i64 = i64::from_be_bytes(*b"\0\0swkeys");

/// A connection for reading and changing the shared secrets.
pub struct PgSecrets {
    client: Client,
}

impl std::fmt::Debug for PgSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSecrets").finish_non_exhaustive()
    }
}

impl PgSecrets {
    /// Connects and applies the schema migrations this build knows.
    ///
    /// # Errors
    /// `StoreError::Database` when the server cannot be reached;
    /// `StoreError::Schema` for a database of a newer swarmd.
    pub async fn connect(opts: &PgOptions) -> Result<PgSecrets, StoreError> {
        let (mut client, connection) = connect::connect(&opts.pg_config()?).await?;
        writer::drive(connection);
        migrate::migrate(&mut client).await?;
        Ok(PgSecrets { client })
    }

    /// The keyring, created with one fresh key when the database has none.
    ///
    /// # Errors
    /// `StoreError::Database` on a failed query; `StoreError::Schema` when a
    /// stored key cannot be used (a bad id or secret length).
    pub async fn keyring(&mut self) -> Result<Keyring, StoreError> {
        if let Some(keyring) = self.read_keyring().await? {
            return Ok(keyring);
        }
        let tx = self.client.transaction().await.map_err(db_error)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SECRETS_LOCK])
            .await
            .map_err(db_error)?;
        let empty = tx
            .query_opt("SELECT 1 FROM signing_keys LIMIT 1", &[])
            .await
            .map_err(db_error)?
            .is_none();
        if empty {
            insert_fresh_key(&tx, &[]).await?;
        }
        tx.commit().await.map_err(db_error)?;
        self.read_keyring()
            .await?
            .ok_or_else(|| StoreError::Schema("signing_keys has no current key".into()))
    }

    /// Makes a fresh key current; the old current key verifies on. An empty
    /// keyring gets one fresh key instead. Returns the new current key id.
    ///
    /// # Errors
    /// `StoreError::Database` on a failed query.
    pub async fn rotate(&mut self) -> Result<String, StoreError> {
        let tx = self.client.transaction().await.map_err(db_error)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SECRETS_LOCK])
            .await
            .map_err(db_error)?;
        let taken: Vec<String> = tx
            .query("SELECT kid FROM signing_keys", &[])
            .await
            .map_err(db_error)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        tx.execute("UPDATE signing_keys SET current = false WHERE current", &[])
            .await
            .map_err(db_error)?;
        let kid = insert_fresh_key(&tx, &taken).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(kid)
    }

    /// SHA-256 of the admin token, created when the database has none. The
    /// token itself is not read.
    ///
    /// # Errors
    /// `StoreError::Database` on a failed query; `StoreError::Schema` when
    /// the stored digest is not 32 bytes.
    pub async fn admin_digest(&mut self) -> Result<[u8; 32], StoreError> {
        self.ensure_admin().await?;
        let row = self
            .client
            .query_one("SELECT digest FROM admin_token", &[])
            .await
            .map_err(db_error)?;
        let digest: &[u8] = row.get(0);
        digest
            .try_into()
            .map_err(|_| StoreError::Schema("admin_token.digest is not 32 bytes".into()))
    }

    /// The admin token itself, created when the database has none: what
    /// `swarmd admin-token` prints and the CLI presents.
    ///
    /// # Errors
    /// `StoreError::Database` on a failed query; `StoreError::Schema` when
    /// the stored value is not an `sws-` secret (never quoted).
    pub async fn admin_secret(&mut self) -> Result<SessionSecret, StoreError> {
        self.ensure_admin().await?;
        self.existing_admin_secret()
            .await?
            .ok_or_else(|| StoreError::Schema("admin_token has no row".into()))
    }

    /// The admin token if the database has one; never creates it.
    ///
    /// # Errors
    /// As `admin_secret`.
    pub async fn existing_admin_secret(&mut self) -> Result<Option<SessionSecret>, StoreError> {
        let row = self
            .client
            .query_opt("SELECT secret FROM admin_token", &[])
            .await
            .map_err(db_error)?;
        let Some(row) = row else {
            return Ok(None);
        };
        SessionSecret::parse(row.get::<_, &str>(0))
            .map(Some)
            .map_err(|_| {
                StoreError::Schema(
                    "admin_token.secret is not `sws-` followed by 64 lowercase hex digits".into(),
                )
            })
    }

    /// Creates the admin token unless there is one.
    async fn ensure_admin(&mut self) -> Result<(), StoreError> {
        let present = self
            .client
            .query_opt("SELECT 1 FROM admin_token", &[])
            .await
            .map_err(db_error)?
            .is_some();
        if present {
            return Ok(());
        }
        let tx = self.client.transaction().await.map_err(db_error)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SECRETS_LOCK])
            .await
            .map_err(db_error)?;
        let secret = SessionSecret::generate();
        let digest = secret.digest();
        tx.execute(
            "INSERT INTO admin_token (secret, digest) VALUES ($1, $2)
             ON CONFLICT (singleton) DO NOTHING",
            &[&secret.expose(), &&digest[..]],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    /// The stored keyring, current key first, the others newest first;
    /// `None` when there is no key.
    async fn read_keyring(&self) -> Result<Option<Keyring>, StoreError> {
        stored_keyring(&self.client).await
    }
}

/// The keyring the database holds, current key first; `None` when it has
/// no key.
pub(crate) async fn stored_keyring(
    client: &impl tokio_postgres::GenericClient,
) -> Result<Option<Keyring>, StoreError> {
    let rows = client
        .query(
            "SELECT kid, secret, current FROM signing_keys ORDER BY current DESC, id DESC",
            &[],
        )
        .await
        .map_err(db_error)?;
    let mut keys = Vec::with_capacity(rows.len());
    for row in &rows {
        let kid: &str = row.get(0);
        let stored: &[u8] = row.get(1);
        let current: bool = row.get(2);
        let mut secret: [u8; KEY_BYTES] = stored.try_into().map_err(|_| {
            StoreError::Schema(format!("signing key {kid} is not {KEY_BYTES} bytes"))
        })?;
        let key = SigningKey::new(kid, secret);
        secret.fill(0);
        let key = key.map_err(|error| StoreError::Schema(error.to_string()))?;
        keys.push((current, key));
    }
    let mut keys = keys.into_iter();
    let Some((current, first)) = keys.next() else {
        return Ok(None);
    };
    if !current {
        return Err(StoreError::Schema(
            "signing_keys has keys but none is current; run `swarmd keys rotate`".into(),
        ));
    }
    Keyring::new(first, keys.map(|(_, key)| key).collect())
        .map(Some)
        .map_err(|error| StoreError::Schema(error.to_string()))
}

/// Inserts a fresh current key whose random id `k` + 8 hex digits is not in
/// `taken` (the keyring file's form), and returns its id.
async fn insert_fresh_key(
    tx: &tokio_postgres::Transaction<'_>,
    taken: &[String],
) -> Result<String, StoreError> {
    let kid = loop {
        let mut bytes = [0u8; 4];
        OsRng.fill_bytes(&mut bytes);
        let kid = format!("k{:08x}", u32::from_be_bytes(bytes));
        if !taken.contains(&kid) {
            break kid;
        }
    };
    let mut secret = [0u8; KEY_BYTES];
    OsRng.fill_bytes(&mut secret);
    let inserted = tx
        .execute(
            "INSERT INTO signing_keys (kid, secret, current) VALUES ($1, $2, true)",
            &[&kid, &&secret[..]],
        )
        .await
        .map_err(db_error);
    secret.fill(0);
    inserted?;
    Ok(kid)
}

impl crate::PgDb {
    /// What changes whenever the keyring does (a rotation adds a key with
    /// a higher id): the highest key id and the number of keys.
    ///
    /// # Errors
    /// `StoreError::Database` on a failed query.
    pub async fn keyring_stamp(&self) -> Result<(i64, i64), StoreError> {
        let client = self.reader().await?;
        let row = client
            .query_one(
                "SELECT COALESCE(MAX(id), 0)::bigint, COUNT(*)::bigint FROM signing_keys",
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok((row.get(0), row.get(1)))
    }

    /// The keyring the database holds (`None` when it has no key), read
    /// through the pool.
    ///
    /// # Errors
    /// As `PgSecrets::keyring`, without creating a key.
    pub async fn stored_keyring(&self) -> Result<Option<Keyring>, StoreError> {
        let client = self.reader().await?;
        stored_keyring(&**client).await
    }
}
