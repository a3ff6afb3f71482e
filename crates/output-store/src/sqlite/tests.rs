//! Tests of `SqliteDb`: group commit, isolation of failing jobs, ordering, close and reopen.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::*;

const TABLE: &str =
    "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);";

fn open(dir: &tempfile::TempDir) -> SqliteDb {
    let db = SqliteDb::open(SqliteOptions::new(dir.path().join("state/swarmd.db"))).unwrap();
    db.migrate(TABLE).unwrap();
    db
}

fn insert(name: &'static str) -> impl FnOnce(&Transaction<'_>) -> Result<i64, StoreError> + Send {
    move |tx| {
        tx.prepare_cached("INSERT INTO items (name) VALUES (?1)")?
            .execute([name])?;
        Ok(tx.last_insert_rowid())
    }
}

async fn names(db: &SqliteDb) -> Vec<String> {
    db.read(|conn| {
        let mut stmt = conn.prepare("SELECT name FROM items ORDER BY id")?;
        let rows = stmt.query_map([], |row| row.get(0))?;
        Ok(rows.collect::<Result<Vec<String>, _>>()?)
    })
    .await
    .unwrap()
}

/// Occupies the writer until the returned sender fires. Jobs queued meanwhile
/// join the held job's batch (the writer takes what arrived before it
/// commits), up to `max_batch`.
fn hold_writer(db: &SqliteDb) -> (mpsc::Sender<()>, WriteTicket<()>) {
    let (started, is_started) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let ticket = db.write(move |_| {
        started.send(()).unwrap();
        released.recv().unwrap();
        Ok(())
    });
    is_started.recv().unwrap();
    (release, ticket)
}

#[tokio::test]
async fn open_creates_the_directory_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    assert!(db.path().ends_with("state/swarmd.db"));
    let mode: String = db
        .read(|conn| Ok(conn.query_row("PRAGMA journal_mode", [], |row| row.get(0))?))
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    db.healthcheck().await.unwrap();
    db.migrate(TABLE).unwrap();
}

#[tokio::test]
async fn a_failing_or_panicking_job_does_not_poison_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let (release, held) = hold_writer(&db);
    let commits_before = db.stats().commits();

    let first = db.write(insert("first"));
    let failing = db.write(|tx| -> Result<(), StoreError> {
        insert("rolled back")(tx)?;
        tx.execute("INSERT INTO missing_table VALUES (1)", [])?;
        Ok(())
    });
    let panicking = db.write(|tx| -> Result<(), StoreError> {
        insert("also rolled back")(tx)?;
        panic!("job bug");
    });
    let last = db.write(insert("last"));
    release.send(()).unwrap();
    held.await.unwrap();

    assert!(first.await.is_ok());
    assert!(matches!(failing.await, Err(StoreError::Sqlite(_))));
    assert!(matches!(panicking.await, Err(StoreError::Panicked)));
    assert!(last.await.is_ok());
    assert_eq!(
        db.stats().commits(),
        commits_before + 1,
        "one batch: the held job and everything queued meanwhile"
    );
    assert_eq!(db.stats().failed_jobs(), 2);
    assert_eq!(names(&db).await, ["first", "last"]);
}

#[tokio::test]
async fn a_failing_unguarded_job_takes_its_whole_batch_down() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let (release, held) = hold_writer(&db);
    let first = db.write(insert("first"));
    let (tx, rx) = tokio::sync::oneshot::channel();
    db.write_then_unguarded(
        |tx| -> Result<(), StoreError> {
            insert("unguarded")(tx)?;
            tx.execute("INSERT INTO missing_table VALUES (1)", [])?;
            Ok(())
        },
        move |outcome| {
            let _ = tx.send(outcome);
        },
    );
    let last = db.write(insert("last"));
    release.send(()).unwrap();

    assert!(matches!(held.await, Err(StoreError::Batch(_))));
    assert!(matches!(rx.await.unwrap(), Err(StoreError::Sqlite(_))));
    assert!(matches!(first.await, Err(StoreError::Batch(_))));
    assert!(matches!(last.await, Err(StoreError::Batch(_))));
    assert!(
        names(&db).await.is_empty(),
        "nothing of the batch was written"
    );
    // The writer goes on.
    db.write(insert("later")).await.unwrap();
    assert_eq!(names(&db).await, ["later"]);
}

#[tokio::test]
async fn a_lost_transaction_fails_every_job_of_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let (release, held) = hold_writer(&db);
    let before = db.write(insert("before"));
    let rogue = db.write(|tx| Ok(tx.execute_batch("ROLLBACK")?));
    let after = db.write(insert("after"));
    release.send(()).unwrap();

    for outcome in [
        held.await,
        before.await.map(drop),
        rogue.await,
        after.await.map(drop),
    ] {
        assert!(matches!(outcome, Err(StoreError::Batch(_))), "{outcome:?}");
    }
    assert!(names(&db).await.is_empty());
    // The writer carries on with the next batch.
    db.write(insert("next")).await.unwrap();
    assert_eq!(names(&db).await, ["next"]);
}

#[tokio::test]
async fn call_order_is_commit_order_and_callbacks_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (all_done, done_rx) = mpsc::channel();
    for n in 0..500usize {
        let seen = Arc::clone(&seen);
        let all_done = all_done.clone();
        db.write_then(
            move |tx| {
                tx.prepare_cached("INSERT INTO items (name) VALUES (?1)")?
                    .execute([n.to_string()])?;
                Ok(n)
            },
            move |outcome| {
                seen.lock().unwrap().push(outcome.unwrap());
                all_done.send(()).unwrap();
            },
        );
    }
    for _ in 0..500 {
        done_rx.recv().unwrap();
    }
    let expected: Vec<usize> = (0..500).collect();
    assert_eq!(*seen.lock().unwrap(), expected);
    let stored: Vec<usize> = names(&db)
        .await
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(stored, expected);
    assert!(db.stats().commits() < 500, "writes were grouped");
}

#[tokio::test]
async fn a_panicking_callback_or_read_leaves_the_db_usable() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write_then(insert("kept"), |_| panic!("callback bug"));
    let read = db
        .read(|_| -> Result<(), StoreError> { panic!("read bug") })
        .await;
    assert!(matches!(read, Err(StoreError::Panicked)));
    db.write(insert("later")).await.unwrap();
    assert_eq!(names(&db).await, ["kept", "later"]);
}

#[tokio::test]
async fn close_drains_then_refuses_and_reopen_sees_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let queued: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|name| db.write(insert(name)))
        .collect();
    db.close().unwrap();
    for ticket in queued {
        ticket.await.unwrap();
    }
    assert!(matches!(
        db.write(insert("late")).await,
        Err(StoreError::Closed)
    ));
    let (tx, rx) = mpsc::channel();
    db.write_then(insert("late"), move |outcome| tx.send(outcome).unwrap());
    assert!(matches!(rx.recv().unwrap(), Err(StoreError::Closed)));
    assert!(matches!(db.read(|_| Ok(())).await, Err(StoreError::Closed)));
    assert!(db.healthcheck().await.is_err());
    assert!(matches!(db.migrate(TABLE), Err(StoreError::Closed)));
    db.close().unwrap();
    drop(db);

    let wal = dir.path().join("state/swarmd.db-wal");
    assert!(
        !wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0,
        "checkpointed at close"
    );
    let reopened = open(&dir);
    assert_eq!(names(&reopened).await, ["a", "b", "c"]);
}

#[tokio::test]
async fn dropping_the_last_handle_commits_queued_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let ticket = db.write(insert("queued"));
    drop(db);
    ticket.await.unwrap();
    assert_eq!(names(&open(&dir)).await, ["queued"]);
}

#[tokio::test]
async fn readers_are_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let write_through_reader = db
        .read(|conn| Ok(conn.execute("INSERT INTO items (name) VALUES ('x')", [])?))
        .await;
    assert!(matches!(write_through_reader, Err(StoreError::Sqlite(_))));
}

#[tokio::test]
async fn batches_never_exceed_max_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = SqliteOptions::new(dir.path().join("swarmd.db"));
    options.max_batch = 3;
    let db = SqliteDb::open(options).unwrap();
    db.migrate(TABLE).unwrap();
    let (release, held) = hold_writer(&db);
    let commits_before = db.stats().commits();
    let tickets: Vec<_> = ["a", "b", "c", "d", "e", "f", "g"]
        .into_iter()
        .map(|name| db.write(insert(name)))
        .collect();
    release.send(()).unwrap();
    held.await.unwrap();
    for ticket in tickets {
        ticket.await.unwrap();
    }
    // The held job and 7 queued jobs, in batches of at most 3.
    assert_eq!(db.stats().commits() - commits_before, 3);
    assert_eq!(names(&db).await, ["a", "b", "c", "d", "e", "f", "g"]);
}

/// The thread a write's callback runs on, for a database opened with `sync`.
async fn callback_thread(sync: Synchronous) -> (Option<String>, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SqliteOptions::new(dir.path().join("state/swarmd.db"));
    opts.synchronous = sync;
    let db = SqliteDb::open(opts).unwrap();
    db.migrate(TABLE).unwrap();
    let (tx, rx) = mpsc::channel();
    db.write_then(insert("x"), move |outcome| {
        outcome.unwrap();
        tx.send(std::thread::current().name().map(str::to_owned))
            .unwrap();
    });
    let thread = rx.recv().unwrap();
    (thread, db.stats().commits(), db.stats().syncs())
}

#[tokio::test]
async fn full_acknowledges_after_a_wal_sync_and_normal_at_commit() {
    let (thread, commits, syncs) = callback_thread(Synchronous::Full).await;
    assert_eq!(thread.as_deref(), Some("sqlite-sync"));
    assert!(
        syncs >= 1 && syncs <= commits,
        "{syncs} syncs, {commits} commits"
    );

    let (thread, _, syncs) = callback_thread(Synchronous::Normal).await;
    assert_eq!(thread.as_deref(), Some("sqlite-writer"));
    assert_eq!(syncs, 0);
}

#[tokio::test]
async fn one_sync_covers_the_groups_committed_while_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let tickets: Vec<_> = (0..2000).map(|_| db.write(insert("n"))).collect();
    for ticket in tickets {
        ticket.await.unwrap();
    }
    let stats = db.stats();
    assert!(stats.syncs() >= 1);
    assert!(
        stats.syncs() <= stats.commits(),
        "{} syncs for {} commits",
        stats.syncs(),
        stats.commits()
    );
    assert_eq!(names(&db).await.len(), 2000);
}

#[tokio::test]
async fn dropping_the_last_handle_from_a_sync_callback_does_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let (tx, rx) = mpsc::channel();
    let held = db.clone();
    db.write_then(insert("last"), move |outcome| {
        outcome.unwrap();
        drop(held);
        tx.send(()).unwrap();
    });
    drop(db);
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the callback finished");
    assert_eq!(names(&open(&dir)).await, ["last"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_under_continuous_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SqliteOptions::new(dir.path().join("swarmd.db"));
    opts.wal_restart_pages = 256;
    let db = SqliteDb::open(opts).unwrap();
    db.migrate(TABLE).unwrap();
    let wal = dir.path().join("swarmd.db-wal");
    let mut largest = 0;
    // ~16 MiB of rows in a steady stream of small commits, never idle.
    let filler = "x".repeat(2000);
    for _ in 0..40 {
        let tickets: Vec<_> = (0..200)
            .map(|_| {
                let name = filler.clone();
                db.write(move |tx| {
                    tx.prepare_cached("INSERT INTO items (name) VALUES (?1)")?
                        .execute([name])?;
                    Ok(())
                })
            })
            .collect();
        for ticket in tickets {
            ticket.await.unwrap();
        }
        largest = largest.max(std::fs::metadata(&wal).unwrap().len());
    }
    assert!(
        largest < 4 * 1024 * 1024,
        "the WAL grew to {largest} bytes for a 1 MiB restart threshold"
    );
    let count: i64 = db
        .read(|conn| Ok(conn.query_row("SELECT count(*) FROM items", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(count, 8000);
}
