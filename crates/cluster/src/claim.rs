//! Whether a starting node may take its node id (docs/decisions.md, A node
//! id two live nodes claim). Registration gives the id a new epoch, which
//! fences whoever held it: right for this node's own previous incarnation,
//! wrong for another live node started with the same id (a copied state
//! directory, a repeated `cluster.node_id`).
//!
//! The id is taken at once when its row is absent, not alive, names this
//! node's advertise URL (a restart, a kill -9 included), or has a heartbeat
//! a whole lease old. Otherwise another node may hold it: the row is read
//! every `WATCH_EVERY` for at most a lease and a tick, the margin a live
//! node's heartbeat needs. A heartbeat that advances, or a new epoch, is a
//! live node holding the id: the start is refused. A row that stops being
//! alive, or a heartbeat that grows a lease and a tick old, is a node that
//! is gone: the id is taken as before.

use std::future::Future;
use std::time::Duration;

use swarmd_output_store::StoreError;
use swarmd_postgres::NodeRow;
use tokio::time::Instant;

/// How often the row is read while it is watched.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// What the watch found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Nobody else holds the id: register.
    Free,
    /// A live node at `advertise_url` holds it: refuse to start.
    Held { advertise_url: String },
}

/// Whether `row` (the id's row before registration) may be another node
/// holding the id, so that it must be watched before the id is taken. An
/// id without a row is free.
pub(crate) fn must_watch(row: &NodeRow, advertise_url: &str, lease: Duration) -> bool {
    row.alive && row.heartbeat_age < lease && !same_url(&row.advertise_url, advertise_url)
}

/// Two advertise URLs name the same node, a trailing `/` aside.
fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Watches the id's row, read by `read`, from `first` (a row `must_watch`
/// holds) for at most `window`: `Held` as soon as its heartbeat advances or
/// its epoch changes, `Free` once it is not alive, is gone, or its
/// heartbeat is `window` old.
///
/// # Errors
/// A read that fails.
pub(crate) async fn watch<F, Fut>(
    first: &NodeRow,
    window: Duration,
    mut read: F,
) -> Result<Claim, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<NodeRow>, StoreError>>,
{
    let until = Instant::now() + window;
    loop {
        tokio::time::sleep(WATCH_EVERY.min(until.saturating_duration_since(Instant::now()))).await;
        let Some(row) = read().await? else {
            return Ok(Claim::Free);
        };
        if !row.alive {
            return Ok(Claim::Free);
        }
        if row.epoch != first.epoch || row.heartbeat_us > first.heartbeat_us {
            return Ok(Claim::Held {
                advertise_url: row.advertise_url,
            });
        }
        if row.heartbeat_age >= window || Instant::now() >= until {
            return Ok(Claim::Free);
        }
    }
}

/// What the refusal tells the operator to change: the id's source.
pub(crate) fn fix_hint(configured: bool, id_file: &std::path::Path) -> String {
    if configured {
        "set another cluster.node_id on this node (or remove the key to have an id \
         generated in its state directory)"
            .to_owned()
    } else {
        format!(
            "its state directory holds the other node's id (copied from that node?): \
             remove {} and a new id is generated at the next start",
            id_file.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use super::*;

    const LEASE: Duration = Duration::from_secs(4);

    fn row(url: &str, epoch: i64, heartbeat_us: i64, age_ms: u64) -> NodeRow {
        NodeRow {
            epoch,
            advertise_url: url.to_owned(),
            alive: true,
            heartbeat_us,
            heartbeat_age: Duration::from_millis(age_ms),
        }
    }

    /// A reader that answers `rows` in turn, then the last one again.
    fn reader(
        rows: Vec<Option<NodeRow>>,
    ) -> impl FnMut() -> std::future::Ready<Result<Option<NodeRow>, StoreError>> {
        let rows = Arc::new(Mutex::new(VecDeque::from(rows)));
        move || {
            let mut rows = rows.lock().unwrap();
            let next = if rows.len() > 1 {
                rows.pop_front().unwrap()
            } else {
                rows.front().cloned().unwrap()
            };
            std::future::ready(Ok(next))
        }
    }

    #[test]
    fn only_a_fresh_live_row_of_another_url_is_watched() {
        let me = "http://10.0.0.2:7070";
        let other = row("http://10.0.0.1:7070", 1, 0, 500);
        assert!(must_watch(&other, me, LEASE));
        // Its holder left or was declared dead.
        let left = NodeRow {
            alive: false,
            ..other.clone()
        };
        assert!(!must_watch(&left, me, LEASE));
        // Its heartbeat is a whole lease old: peers may take it over already.
        let stale = row("http://10.0.0.1:7070", 1, 0, 4_000);
        assert!(!must_watch(&stale, me, LEASE));
        // This node's own previous incarnation (a restart after kill -9).
        let mine = row("http://10.0.0.2:7070/", 1, 0, 500);
        assert!(!must_watch(&mine, me, LEASE));
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_that_advances_is_a_live_holder() {
        let first = row("http://a:1", 7, 1_000, 300);
        let read = reader(vec![
            Some(row("http://a:1", 7, 1_000, 550)),
            Some(row("http://a:1", 7, 1_900_000, 10)),
        ]);
        let started = Instant::now();
        let found = watch(&first, LEASE + LEASE / 3, read).await.unwrap();
        assert_eq!(
            found,
            Claim::Held {
                advertise_url: "http://a:1".to_owned()
            }
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_epoch_is_a_live_holder_too() {
        let first = row("http://a:1", 7, 1_000, 300);
        let read = reader(vec![Some(row("http://b:2", 9, 1_000, 300))]);
        let found = watch(&first, LEASE, read).await.unwrap();
        assert_eq!(
            found,
            Claim::Held {
                advertise_url: "http://b:2".to_owned()
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_that_stands_still_frees_the_id_within_the_window() {
        let first = row("http://a:1", 7, 1_000, 300);
        // The row's age grows with the database's clock, here as the test's.
        let started = Instant::now();
        let read = move || {
            let age = Duration::from_millis(300) + started.elapsed();
            std::future::ready(Ok(Some(NodeRow {
                heartbeat_age: age,
                ..row("http://a:1", 7, 1_000, 0)
            })))
        };
        let window = LEASE + LEASE / 3;
        let found = watch(&first, window, read).await.unwrap();
        assert_eq!(found, Claim::Free);
        // Freed when the heartbeat is a window old, not a window after the watch began.
        assert!(started.elapsed() <= window - Duration::from_millis(300) + WATCH_EVERY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_row_that_stops_being_alive_frees_the_id_at_once() {
        let first = row("http://a:1", 7, 1_000, 300);
        let left = NodeRow {
            alive: false,
            ..first.clone()
        };
        let started = Instant::now();
        let found = watch(&first, LEASE, reader(vec![Some(left)]))
            .await
            .unwrap();
        assert_eq!(found, Claim::Free);
        assert_eq!(started.elapsed(), WATCH_EVERY);
    }

    #[test]
    fn the_hint_names_the_id_s_source() {
        let file = std::path::Path::new("/var/lib/swarmd/node_id");
        assert!(fix_hint(true, file).contains("cluster.node_id"));
        assert!(fix_hint(false, file).contains("remove /var/lib/swarmd/node_id"));
    }
}
