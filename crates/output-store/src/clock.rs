//! Wall-clock time as an injected dependency: `SystemClock` in the daemon,
//! `ManualClock` in tests that need to stand at an exact millisecond.
//!
//! Output timestamps, token expiry, leases and session idleness all read time
//! through this one `Clock` (the engine re-exports it), so tests never sleep.
//! Times are unix milliseconds; a clock set before 1970 reads as 0.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of unix time.
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the unix epoch.
    fn now_ms(&self) -> u64;

    /// Whole seconds since the unix epoch.
    fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }
}

/// The operating system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            })
    }
}

/// A clock that moves only when told to. Shared by reference (`Arc`) between
/// the code under test and the test itself.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(now_ms),
        }
    }

    /// A clock standing at `now_secs` whole seconds.
    pub fn at_secs(now_secs: u64) -> Self {
        Self::new(now_secs.saturating_mul(1000))
    }

    /// Moves the clock to `now_ms` (backwards too).
    pub fn set_ms(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the clock forward by `delta_ms`, saturating at `u64::MAX`.
    pub fn advance_ms(&self, delta_ms: u64) {
        // `fetch_update` never fails with a closure that always returns `Some`.
        let _ = self
            .now_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(delta_ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn system_clock_is_after_2024_and_consistent() {
        let clock = SystemClock;
        let ms = clock.now_ms();
        assert!(ms > 1_704_067_200_000, "{ms}");
        let secs = clock.now_secs();
        assert!(secs >= ms / 1000 && secs <= ms / 1000 + 1);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = Arc::new(ManualClock::new(1_500));
        let shared: Arc<dyn Clock> = clock.clone();
        assert_eq!(shared.now_ms(), 1_500);
        assert_eq!(shared.now_secs(), 1);
        clock.advance_ms(600);
        assert_eq!(shared.now_ms(), 2_100);
        assert_eq!(shared.now_secs(), 2);
        clock.set_ms(10);
        assert_eq!(shared.now_ms(), 10);
        clock.advance_ms(u64::MAX);
        assert_eq!(shared.now_ms(), u64::MAX);
        assert_eq!(ManualClock::at_secs(7).now_ms(), 7_000);
    }
}
