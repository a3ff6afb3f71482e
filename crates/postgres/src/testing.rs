//! Test support: a fresh database per test on the throwaway cluster that
//! `scripts/pg-env.sh` starts.
//!
//! The cluster is found through `SWARMD_TEST_PG_URL` and
//! `SWARMD_TEST_PG_PASSWORD_FILE` when both are set, else by running the
//! script once per process (it reuses a live cluster). A missing or broken
//! cluster fails the test with the script's message: tests never skip.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokio_postgres::NoTls;

use crate::PgOptions;

/// Where the test cluster is: its URL (to the `postgres` database, without
/// the password) and the password.
#[derive(Clone)]
pub struct Cluster {
    pub url: String,
    pub password_file: PathBuf,
    pub password: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &self.url)
            .field("password_file", &self.password_file)
            .finish_non_exhaustive()
    }
}

/// The repository root (this crate is `crates/postgres`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test cluster, started on first use.
pub fn cluster() -> Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(find_cluster)
        .clone()
        .unwrap_or_else(|error| panic!("the PostgreSQL test cluster is not available: {error}"))
}

#[allow(
    clippy::disallowed_methods,
    reason = "a test finds its cluster through the environment CI sets"
)]
fn find_cluster() -> Result<Cluster, String> {
    let (url, password_file) = match (
        std::env::var("SWARMD_TEST_PG_URL"),
        std::env::var("SWARMD_TEST_PG_PASSWORD_FILE"),
    ) {
        (Ok(url), Ok(file)) => (url, PathBuf::from(file)),
        _ => {
            let script = repo_root().join("scripts/pg-env.sh");
            let output = std::process::Command::new("bash")
                .arg(&script)
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            if !output.status.success() {
                return Err(format!(
                    "{} failed:\n{}",
                    script.display(),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            let mut lines = stdout.lines();
            match (lines.next(), lines.next()) {
                (Some(url), Some(file)) => (url.to_owned(), PathBuf::from(file)),
                _ => return Err(format!("{} printed no URL", script.display())),
            }
        }
    };
    let password = std::fs::read_to_string(&password_file)
        .map_err(|e| format!("cannot read {}: {e}", password_file.display()))?
        .trim()
        .to_owned();
    Ok(Cluster {
        url,
        password_file,
        password,
    })
}

/// A database created for one test; dropped by `drop_database` (or left
/// for the throwaway cluster to hold).
#[derive(Debug, Clone)]
pub struct TestDatabase {
    pub name: String,
    /// The URL of this database, without the password.
    pub url: String,
    pub cluster: Cluster,
}

impl TestDatabase {
    /// Store options for this database, password included.
    pub fn options(&self) -> PgOptions {
        let mut opts = PgOptions::new(self.url.clone());
        opts.password = Some(self.cluster.password.clone());
        opts.pool_size = 4;
        opts
    }
}

/// Creates an empty database with a random name on the test cluster.
///
/// Its commits do not wait for the WAL to reach the disk
/// (`synchronous_commit = off`): a committed row is still visible to every
/// later reader, which is all a test that kills swarmd (never PostgreSQL)
/// relies on, while a disk that stalls on a loaded CI machine no longer
/// holds a node's heartbeat (which waits for its own write groups, whose
/// commits hold its row) past a few-second test lease and fences the node.
/// The benchmark scripts make their own databases and keep the default.
pub async fn fresh_database() -> TestDatabase {
    let cluster = cluster();
    let name = format!("swarmd_test_{:016x}", rand::random::<u64>());
    let mut config: tokio_postgres::Config = cluster.url.parse().expect("the cluster's URL");
    config.password(&cluster.password);
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test cluster at {}: {e}", cluster.url));
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
    client
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .await
        .unwrap_or_else(|e| panic!("cannot set up database {name}: {e}"));
    let base = cluster
        .url
        .rsplit_once('/')
        .map_or(cluster.url.as_str(), |(base, _)| base);
    TestDatabase {
        url: format!("{base}/{name}"),
        name,
        cluster,
    }
}

impl crate::PgDb {
    /// Runs `sql` on a pooled connection (test setup); panics on error.
    pub async fn execute_sql(&self, sql: &str) {
        self.reader()
            .await
            .expect("a pooled connection")
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The first column of every row of `sql`, as text (test checks: cast
    /// in the query, `NULL` reads as an empty string).
    pub async fn query_text(&self, sql: &str) -> Vec<String> {
        self.first_column::<Option<String>>(sql)
            .await
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect()
    }

    /// The first column of every row of `sql`, as integers (test checks).
    pub async fn query_i32(&self, sql: &str) -> Vec<i32> {
        self.first_column(sql).await
    }

    async fn first_column<T>(&self, sql: &str) -> Vec<T>
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        self.reader()
            .await
            .expect("a pooled connection")
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}
