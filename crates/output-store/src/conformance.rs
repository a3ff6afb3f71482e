//! The behaviour every `OutputStore` backend must show, run against each backend by its tests.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use crate::{ContentRef, ManualClock, OutputEvent, OutputStore};

/// Runs every check on a fresh store whose records are stamped by `clock`.
///
/// Retention runs first: it counts every record in the store.
pub async fn run_all(store: Arc<dyn OutputStore>, clock: &ManualClock) {
    prune_and_forget_remove_whole_tasks(&*store, clock).await;
    seq_is_per_stream_and_dense(&*store).await;
    tail_pages_by_after_seq_and_limit(&*store).await;
    last_final_is_the_last_final(&*store).await;
    list_attempts_is_sorted_and_exact(&*store).await;
    append_at_takes_the_callers_seqs_and_refuses_a_taken_one(&*store).await;
    a_refused_write_leaves_no_blob_behind(&*store).await;
    concurrent_appends_keep_seqs_dense_and_unique(store).await;
}

fn progress(stage: &str) -> OutputEvent {
    OutputEvent::Progress {
        stage: stage.to_owned(),
        note: None,
    }
}

fn partial(value: serde_json::Value) -> OutputEvent {
    OutputEvent::Partial {
        chunk: ContentRef::Inline { value },
    }
}

fn seqs(records: &[crate::OutputRecord]) -> Vec<u64> {
    records.iter().map(|record| record.seq).collect()
}

async fn seq_is_per_stream_and_dense(store: &dyn OutputStore) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let first = store
        .append(
            a,
            1,
            "w1",
            vec![progress("1"), progress("2"), progress("3")],
        )
        .await
        .unwrap();
    assert_eq!(seqs(&first), [1, 2, 3]);
    assert!(
        first
            .iter()
            .all(|r| r.task == a && r.attempt == 1 && r.producer == "w1")
    );
    assert_eq!(
        seqs(&store.append(a, 2, "w", vec![progress("x")]).await.unwrap()),
        [1]
    );
    assert_eq!(
        seqs(&store.append(b, 1, "w", vec![progress("y")]).await.unwrap()),
        [1]
    );
    let more = store
        .append(a, 1, "w2", vec![partial(json!(4)), partial(json!(5))])
        .await
        .unwrap();
    assert_eq!(seqs(&more), [4, 5]);
    assert!(
        store
            .append(a, 1, "w", Vec::new())
            .await
            .unwrap()
            .is_empty()
    );

    let stored = store.tail(a, 1, 0, 100).await.unwrap();
    assert_eq!(
        stored,
        [first, more].concat(),
        "append returns what tail reads"
    );
}

async fn append_at_takes_the_callers_seqs_and_refuses_a_taken_one(store: &dyn OutputStore) {
    let task = Uuid::new_v4();
    assert_eq!(store.last_seq(task, 1).await.unwrap(), 0);
    let prepared = store
        .prepare(vec![progress("a"), partial(json!("b"))])
        .await
        .unwrap();
    assert_eq!(prepared.len(), 2);
    let (records, durable) = store.append_at(task, 1, 1, "w", prepared);
    assert_eq!(seqs(&records), [1, 2]);
    assert!(records.iter().all(|r| r.producer == "w" && r.task == task));
    durable.await.unwrap();
    let (records, durable) = store.append_at(
        task,
        1,
        3,
        "w",
        store.prepare(vec![progress("c")]).await.unwrap(),
    );
    assert_eq!(seqs(&records), [3]);
    durable.await.unwrap();
    assert_eq!(store.last_seq(task, 1).await.unwrap(), 3);
    let stored = store.tail(task, 1, 0, 10).await.unwrap();
    assert_eq!(seqs(&stored), [1, 2, 3]);
    assert_eq!(stored[1].event, partial(json!("b")));

    let (_, taken) = store.append_at(
        task,
        1,
        2,
        "w",
        store.prepare(vec![progress("again")]).await.unwrap(),
    );
    assert!(taken.await.is_err(), "seq 2 is taken");
    assert_eq!(seqs(&store.tail(task, 1, 0, 10).await.unwrap()), [1, 2, 3]);
    // A store-numbered append goes on after the caller's seqs.
    let next = store
        .append(task, 1, "w", vec![progress("d")])
        .await
        .unwrap();
    assert_eq!(seqs(&next), [4]);
}

/// A value over every backend's inline limit (the suites run at 256 KiB
/// or less), unlike any other.
fn big_value() -> serde_json::Value {
    json!(format!("{}:{}", Uuid::new_v4(), "b".repeat(300 * 1024)))
}

/// `encode` stores nothing yet tells what the events take; a write whose
/// blobs were stored and that is refused after all deletes them, unless
/// another write claimed the same blob meanwhile.
async fn a_refused_write_leaves_no_blob_behind(store: &dyn OutputStore) {
    let value = big_value();
    let encoded = store.encode(vec![partial(value.clone())]).await.unwrap();
    let spilled = match encoded.events()[0].content() {
        Some(ContentRef::FileRef { sha256, size, .. }) => Some((sha256.clone(), *size)),
        _ => None,
    };
    let Some((sha256, size)) = spilled else {
        // A store that keeps every value inline stores no blob to leave.
        let stored = store.prepare(vec![partial(value)]).await.unwrap();
        assert_eq!(encoded.stored_bytes(), stored.stored_bytes());
        return;
    };
    assert!(size > 300 * 1024 && encoded.stored_bytes() > size);
    assert_eq!(
        store.read_blob(&sha256).await.unwrap(),
        None,
        "encode stores nothing"
    );
    let bytes = encoded.stored_bytes();
    let stored = store.store_blobs(encoded).await.unwrap();
    assert_eq!(stored.stored_bytes(), bytes);
    assert!(store.read_blob(&sha256).await.unwrap().is_some());
    assert_eq!(store.discard_blobs(stored).await.unwrap(), 1);
    assert_eq!(store.read_blob(&sha256).await.unwrap(), None, "discarded");

    // Another write claims the blob the refused one created: it stays.
    let shared = big_value();
    let refused = store.encode(vec![partial(shared.clone())]).await.unwrap();
    let refused = store.store_blobs(refused).await.unwrap();
    let kept = store.prepare(vec![partial(shared.clone())]).await.unwrap();
    let Some(ContentRef::FileRef { sha256, .. }) = kept.events()[0].content().cloned() else {
        panic!("spilled once, spilled again");
    };
    assert_eq!(store.discard_blobs(refused).await.unwrap(), 0);
    let task = Uuid::new_v4();
    let (_, durable) = store.append_at(task, 1, 1, "w", kept);
    durable.await.unwrap();
    assert!(
        store.read_blob(&sha256).await.unwrap().is_some(),
        "claimed twice"
    );

    // A write whose blob was there already created none to discard.
    let reused = store.encode(vec![partial(shared)]).await.unwrap();
    let reused = store.store_blobs(reused).await.unwrap();
    assert_eq!(store.discard_blobs(reused).await.unwrap(), 0);
    assert!(
        store.read_blob(&sha256).await.unwrap().is_some(),
        "still named"
    );
}

async fn tail_pages_by_after_seq_and_limit(store: &dyn OutputStore) {
    let task = Uuid::new_v4();
    let events = (1..=10).map(|n| partial(json!(n))).collect();
    store.append(task, 1, "w", events).await.unwrap();
    assert_eq!(seqs(&store.tail(task, 1, 0, 3).await.unwrap()), [1, 2, 3]);
    assert_eq!(seqs(&store.tail(task, 1, 3, 3).await.unwrap()), [4, 5, 6]);
    assert_eq!(seqs(&store.tail(task, 1, 9, 5).await.unwrap()), [10]);
    assert!(store.tail(task, 1, 10, 5).await.unwrap().is_empty());
    assert!(store.tail(task, 1, u64::MAX, 5).await.unwrap().is_empty());
    assert!(store.tail(task, 1, 0, 0).await.unwrap().is_empty());
    assert_eq!(store.tail(task, 1, 0, usize::MAX).await.unwrap().len(), 10);
    assert!(store.tail(task, 2, 0, 5).await.unwrap().is_empty());
    let page = store.tail(task, 1, 4, 1).await.unwrap();
    assert_eq!(page[0].event, partial(json!(5)));
}

async fn last_final_is_the_last_final(store: &dyn OutputStore) {
    let task = Uuid::new_v4();
    store
        .append(task, 1, "w", vec![progress("a")])
        .await
        .unwrap();
    assert_eq!(store.last_final(task, 1).await.unwrap(), None);
    store
        .append(
            task,
            1,
            "w",
            vec![
                OutputEvent::inline_final(json!("first"), false),
                partial(json!(1)),
            ],
        )
        .await
        .unwrap();
    store
        .append(
            task,
            1,
            "w",
            vec![
                OutputEvent::inline_final(json!("second"), true),
                progress("after"),
            ],
        )
        .await
        .unwrap();
    let last = store.last_final(task, 1).await.unwrap().unwrap();
    assert_eq!(last.seq, 4);
    assert_eq!(last.event, OutputEvent::inline_final(json!("second"), true));
    assert_eq!(store.last_final(task, 2).await.unwrap(), None);
}

async fn list_attempts_is_sorted_and_exact(store: &dyn OutputStore) {
    let task = Uuid::new_v4();
    for attempt in [3, 1, 2, 3, 0, u32::MAX] {
        store
            .append(task, attempt, "w", vec![progress("p")])
            .await
            .unwrap();
    }
    store.append(task, 7, "w", Vec::new()).await.unwrap();
    assert_eq!(
        store.list_attempts(task).await.unwrap(),
        [0, 1, 2, 3, u32::MAX]
    );
    assert!(
        store
            .list_attempts(Uuid::new_v4())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn prune_and_forget_remove_whole_tasks(store: &dyn OutputStore, clock: &ManualClock) {
    let (old, mixed, fresh) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    clock.set_ms(1_000);
    store
        .append(old, 1, "w", vec![progress("1"), progress("2")])
        .await
        .unwrap();
    store
        .append(mixed, 1, "w", vec![progress("1")])
        .await
        .unwrap();
    clock.set_ms(9_000);
    store
        .append(mixed, 2, "w", vec![progress("2")])
        .await
        .unwrap();
    store
        .append(fresh, 1, "w", vec![progress("1")])
        .await
        .unwrap();

    // `mixed` has an old record but its newest one is recent, so it stays whole.
    assert_eq!(store.prune(5_000).await.unwrap(), 2);
    assert!(store.list_attempts(old).await.unwrap().is_empty());
    assert_eq!(store.list_attempts(mixed).await.unwrap(), [1, 2]);
    assert_eq!(store.prune(5_000).await.unwrap(), 0);
    // A record at exactly `before_ms` is not older than it.
    assert_eq!(store.prune(9_000).await.unwrap(), 0);

    assert_eq!(
        store.forget(&[mixed, Uuid::new_v4(), mixed]).await.unwrap(),
        2
    );
    assert!(store.list_attempts(mixed).await.unwrap().is_empty());
    assert_eq!(store.forget(&[]).await.unwrap(), 0);
    assert_eq!(seqs(&store.tail(fresh, 1, 0, 10).await.unwrap()), [1]);

    // A forgotten stream starts again at seq 1.
    assert_eq!(
        seqs(
            &store
                .append(mixed, 1, "w", vec![progress("again")])
                .await
                .unwrap()
        ),
        [1]
    );
    store.forget(&[mixed]).await.unwrap();
    clock.set_ms(20_000);
}

async fn concurrent_appends_keep_seqs_dense_and_unique(store: Arc<dyn OutputStore>) {
    const PRODUCERS: usize = 16;
    const APPENDS: usize = 40;
    let shared = Uuid::new_v4();
    let mut handles = Vec::new();
    for producer in 0..PRODUCERS {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let own = Uuid::new_v4();
            let name = format!("p{producer}");
            for n in 0..APPENDS {
                let batch = (0..(n % 3 + 1))
                    .map(|k| partial(json!([producer, n, k])))
                    .collect();
                let records = store.append(shared, 1, &name, batch).await.unwrap();
                let own_records = store
                    .append(own, 1, &name, vec![partial(json!(n))])
                    .await
                    .unwrap();
                assert_eq!(seqs(&own_records), [n as u64 + 1]);
                assert!(
                    records.windows(2).all(|w| w[1].seq == w[0].seq + 1),
                    "one append is contiguous"
                );
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    let stored = store.tail(shared, 1, 0, usize::MAX).await.unwrap();
    let expected: usize = (0..APPENDS).map(|n| n % 3 + 1).sum::<usize>() * PRODUCERS;
    assert_eq!(seqs(&stored), (1..=expected as u64).collect::<Vec<_>>());
    // Each producer's events appear in the order it appended them.
    let mut last_seen: HashMap<String, (u64, u64)> = HashMap::new();
    for record in &stored {
        let OutputEvent::Partial {
            chunk: ContentRef::Inline { value },
        } = &record.event
        else {
            panic!("unexpected event {:?}", record.event);
        };
        let key = (value[1].as_u64().unwrap(), value[2].as_u64().unwrap());
        if let Some(previous) = last_seen.insert(record.producer.clone(), key) {
            assert!(
                previous < key,
                "{} went from {previous:?} to {key:?}",
                record.producer
            );
        }
    }
    assert_eq!(last_seen.len(), PRODUCERS);
}
