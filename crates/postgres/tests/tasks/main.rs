//! The engine's `TaskStore` conformance cases against `PgTaskStore`, each
//! on a fresh database of the test cluster, then what only PostgreSQL
//! shows: migrations under the advisory lock, group commits, reopening,
//! which node holds a live task (`owners`), and sessions and their mail
//! across nodes (`mail`), and a task's spec written once (`specs`).

use std::sync::Arc;

use swarmd_engine::store::TaskStore;
use swarmd_postgres::testing::{TestDatabase, fresh_database};
use swarmd_postgres::{PgDb, PgTaskStore};

mod cluster;
mod keys;
mod mail;
mod owners;
mod postgres_only;
mod specs;

/// A fresh database and a task store on it.
async fn fresh_store() -> (TestDatabase, Arc<dyn TaskStore>) {
    let database = fresh_database().await;
    let db = PgDb::open(database.options()).await.unwrap();
    let store: Arc<dyn TaskStore> = Arc::new(PgTaskStore::new(db));
    (database, store)
}

mod conformance {
    swarmd_engine::task_store_conformance!(super::fresh_store());
}
