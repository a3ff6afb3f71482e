//! The stream driver's summary frame on paused time: at most one per
//! interval however fast records come, none while nothing is counted, each
//! due one sent without waiting for another record; a stream that may
//! end on its own ends within `END_CHECK` of its end while idle; and a
//! jump in the live seqs makes the stream read the store.

use std::sync::atomic::{AtomicBool, Ordering};

use swarmd_engine::event::Event;
use swarmd_engine::ids::TaskId;

use super::*;

/// Counts every live record; sends nothing else.
struct Counting {
    cursor: u64,
    counted: u64,
    every: Duration,
    over: Arc<AtomicBool>,
}

impl Follow for Counting {
    type Item = u64;

    async fn fill(&mut self, _out: &mut VecDeque<u64>) -> Result<bool, EngineError> {
        Ok(false)
    }

    fn wake(&self, _record: &EventRecord) -> Wake {
        Wake::Behind
    }

    fn take_live(&mut self, record: &EventRecord) -> Live<u64> {
        self.cursor = record.seq;
        self.counted += 1;
        Live::Skip
    }

    fn render(&self, item: u64) -> SseEvent {
        SseEvent::default().data(item.to_string())
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(self.every)
    }

    fn tick_pending(&self) -> bool {
        self.counted > 0
    }

    fn tick(&mut self) -> Option<SseEvent> {
        let counted = std::mem::take(&mut self.counted);
        (counted > 0).then(|| SseEvent::default().id(self.cursor.to_string()))
    }

    fn may_end(&self) -> bool {
        true
    }

    fn ended(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }
}

fn record(seq: u64) -> Arc<EventRecord> {
    Arc::new(EventRecord {
        seq,
        ts_ms: 0,
        session: None,
        event: Event::TaskQueued {
            task_id: TaskId::new(),
        },
    })
}

#[tokio::test(start_paused = true)]
async fn ticks_come_at_most_once_per_interval_and_only_with_news() {
    let (tx, rx) = broadcast::channel(4096);
    let over = Arc::new(AtomicBool::new(false));
    let follow = Counting {
        cursor: 0,
        counted: 0,
        every: Duration::from_secs(1),
        over: over.clone(),
    };
    let mut driver = Driver::new(follow, (None, rx), CancellationToken::new(), false);
    let start = tokio::time::Instant::now();
    // 100 records, one per 25 ms: 2.5 s of them.
    let sender = tokio::spawn(async move {
        for seq in 1..=100 {
            tx.send(record(seq)).unwrap();
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tx
    });
    let mut ticks = Vec::new();
    while ticks.len() < 3 {
        let _tick = driver.next().await.expect("the stream ended");
        ticks.push(start.elapsed());
    }
    // Due at 1 s and 2 s, and the last records' tick at 3 s: never closer
    // than the interval, and the last one without a record to wake it.
    let whole = |d: &Duration| d.as_millis() / 1000;
    assert_eq!(
        ticks.iter().map(whole).collect::<Vec<_>>(),
        [1, 2, 3],
        "{ticks:?}"
    );
    for pair in ticks.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_secs(1), "{ticks:?}");
    }
    let tx = sender.await.unwrap();
    // Nothing counted: no tick, however long; the stream ends within
    // END_CHECK once its follow says it is over.
    let quiet = tokio::time::timeout(Duration::from_secs(10), driver.next()).await;
    assert!(quiet.is_err(), "a frame with nothing counted");
    over.store(true, Ordering::Release);
    let ended_at = tokio::time::Instant::now();
    assert!(driver.next().await.is_none());
    assert!(ended_at.elapsed() <= END_CHECK, "{:?}", ended_at.elapsed());
    drop(tx);
}

/// Reads the store only when told to; no live record is its own.
struct Fills {
    fills: Arc<std::sync::atomic::AtomicUsize>,
}

impl Follow for Fills {
    type Item = u64;

    async fn fill(&mut self, _out: &mut VecDeque<u64>) -> Result<bool, EngineError> {
        self.fills.fetch_add(1, Ordering::AcqRel);
        Ok(false)
    }

    fn wake(&self, _record: &EventRecord) -> Wake {
        Wake::Ignore
    }

    fn render(&self, item: u64) -> SseEvent {
        SseEvent::default().data(item.to_string())
    }
}

#[tokio::test(start_paused = true)]
async fn a_jump_in_the_live_seqs_reads_the_store() {
    let (tx, rx) = broadcast::channel(16);
    let fills = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let follow = Fills {
        fills: fills.clone(),
    };
    let mut driver = Driver::new(follow, (None, rx), CancellationToken::new(), false);
    for seq in [1, 2, 3] {
        tx.send(record(seq)).unwrap();
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), driver.next()).await;
    assert_eq!(fills.load(Ordering::Acquire), 1, "only the first read");
    // Seqs 4 and 5 were stepped past on the bus (a cluster's pump read
    // them bare before this stream followed): the store has them.
    for seq in [6, 7] {
        tx.send(record(seq)).unwrap();
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), driver.next()).await;
    assert_eq!(fills.load(Ordering::Acquire), 2, "the jump reads the store");
    tx.send(record(8)).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(1), driver.next()).await;
    assert_eq!(fills.load(Ordering::Acquire), 2, "no jump, no read");
}
