//! Role names across nodes (docs/decisions.md, Cluster): a login holds an advisory lock per
//! role name it asks for, from before it reads the roles' holders until its
//! session is stored, so two logins for one role on two nodes at once are
//! judged one after the other and the second sees the first's holder.
//!
//! The locks are session-level advisory locks on a pooled connection of
//! their own (`pg_try_advisory_lock(class, hashtext(role))`, a key space
//! apart from the migration's one-key lock). Two role names whose hashes
//! collide only wait for each other. A lock is released by
//! [`RoleLock::release`]; one dropped without it takes its connection out
//! of the pool and closes it, which releases the locks, so no pooled
//! connection ever keeps one.

use std::time::Duration;

use swarmd_output_store::StoreError;

use crate::PgCluster;
use crate::connect::db_error;

/// The first key of every role lock: "swRo" in ASCII.
const ROLE_LOCK_CLASS: i32 = i32::from_be_bytes(*b"swRo");
/// How long a login waits for another login of one of its roles.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);
/// The first and the longest pause between tries.
const RETRY_FIRST: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_millis(100);

/// Advisory locks on role names, held until released or dropped.
#[derive(Debug)]
pub struct RoleLock {
    client: Option<deadpool_postgres::Object>,
}

impl PgCluster {
    /// Locks every role name of `roles` for one login, waiting for a login
    /// of the same names on any node to end.
    ///
    /// # Errors
    ///
    /// `StoreError::Busy` when another login held one of them for
    /// 10 s; `StoreError::Database` when the database fails.
    pub async fn lock_roles(&self, roles: &[String]) -> Result<RoleLock, StoreError> {
        let mut names: Vec<&str> = roles.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let lock = RoleLock {
            client: Some(self.db.reader().await?),
        };
        let deadline = tokio::time::Instant::now() + LOCK_PATIENCE;
        let mut pause = RETRY_FIRST;
        loop {
            if lock.try_all(&names).await? {
                return Ok(lock);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::Busy(
                    "another login of the same role name is in progress".into(),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }
}

impl RoleLock {
    fn client(&self) -> &deadpool_postgres::Object {
        self.client.as_ref().expect("held until released")
    }

    /// Takes every lock of `names` (sorted), or none: at a name held
    /// elsewhere it gives back those it took, so two logins never hold
    /// parts of each other's names.
    async fn try_all(&self, names: &[&str]) -> Result<bool, StoreError> {
        let client = self.client();
        for name in names {
            let got: bool = client
                .query_one(
                    "SELECT pg_try_advisory_lock($1, hashtext($2))",
                    &[&ROLE_LOCK_CLASS, name],
                )
                .await
                .map_err(db_error)?
                .get(0);
            if !got {
                client
                    .batch_execute("SELECT pg_advisory_unlock_all()")
                    .await
                    .map_err(db_error)?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Releases the locks; the connection goes back to the pool.
    pub async fn release(mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if client
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .await
            .is_err()
        {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

impl Drop for RoleLock {
    fn drop(&mut self) {
        // Not released (the login's future was dropped): the connection
        // leaves the pool and closes, and the server releases its locks.
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}
