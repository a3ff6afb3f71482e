//! Test support: a fresh database per test on the throwaway cluster that
//! `scripts/pg-env.sh` starts.
//!
//! The cluster is found through `SWARMD_TEST_PG_URL` and
//! `SWARMD_TEST_PG_PASSWORD_FILE` when both are set, else by running the
//! script once per process (it reuses a live cluster). A missing or broken
//! cluster fails the test with the script's message: tests never skip.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// A database created for one test, kept for [`KEEP_FOR`] after it was made.
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
///
/// A test keeps its database (a failed one can be read afterwards); the
/// first call in each process drops those older than [`KEEP_FOR`].
pub async fn fresh_database() -> TestDatabase {
    let cluster = cluster();
    let name = format!(
        "{PREFIX}{}_{:08x}",
        unix_secs(SystemTime::now()),
        rand::random::<u32>()
    );
    let mut config: tokio_postgres::Config = cluster.url.parse().expect("the cluster's URL");
    config.password(&cluster.password);
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test cluster at {}: {e}", cluster.url));
    tokio::spawn(connection);
    if !SWEPT.swap(true, Ordering::Relaxed) {
        sweep(&client, SystemTime::now()).await;
    }
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

/// How every test database's name starts: `swarmd_test_<unix secs>_<rand>`.
const PREFIX: &str = "swarmd_test_";

/// How long a test database is kept: longer than any test (the long chaos
/// runs included) takes.
pub const KEEP_FOR: Duration = Duration::from_secs(6 * 3600);

/// At most this many old databases are dropped per process, so a cluster
/// that kept thousands never holds one test up for minutes.
const SWEEP_AT_MOST: usize = 64;

/// Whether this process has swept the cluster.
static SWEPT: AtomicBool = AtomicBool::new(false);

fn unix_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// When the test database `name` was made, if it is one (a name without a
/// time reads as made at 0, so it is old).
fn made_at(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(PREFIX)?;
    Some(
        rest.split_once('_')
            .and_then(|(secs, _)| secs.parse().ok())
            .unwrap_or(0),
    )
}

/// Drops test databases older than [`KEEP_FOR`]. Errors are ignored: test
/// processes sweep at once, and one may drop a database another lists.
async fn sweep(client: &tokio_postgres::Client, now: SystemTime) {
    let Ok(rows) = client
        .query(
            "SELECT datname FROM pg_database WHERE starts_with(datname, $1)",
            &[&PREFIX],
        )
        .await
    else {
        return;
    };
    let cutoff = unix_secs(now).saturating_sub(KEEP_FOR.as_secs());
    let old = rows
        .iter()
        .map(|row| row.get::<_, String>(0))
        .filter(|name| made_at(name).is_some_and(|made| made < cutoff));
    for name in old.take(SWEEP_AT_MOST) {
        let _ = client
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                name.replace('"', "\"\"")
            ))
            .await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_database_is_old_by_the_time_in_its_name() {
        assert_eq!(
            made_at("swarmd_test_1700000000_0a1b2c3d"),
            Some(1_700_000_000)
        );
        assert_eq!(made_at("swarmd_test_00ff00ff00ff00ff"), Some(0));
        assert_eq!(made_at("postgres"), None);
        assert_eq!(made_at("swarmd_bench_1"), None);
    }
}
