//! The guard on looking session tokens up in the database: a token this
//! node does not hold is looked up (it may be a session another node logged
//! in), and that look-up happens before the token is known to be anyone's.
//! So at most `MAX_LOOKUPS` run at once, whatever a flood of made-up tokens
//! asks, and a token found to be nobody's is not looked up again for
//! `MISS_TTL` (a client retrying with a deleted session's token costs one
//! query every two seconds, not one per request).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

/// Look-ups in flight at once.
pub(crate) const MAX_LOOKUPS: usize = 4;
/// How long a look-up waits for its turn before the token is taken as
/// unknown (its request is refused, 401).
const TURN_WAIT: Duration = Duration::from_secs(2);
/// How long a token found to be nobody's is not looked up again. The
/// session sync adopts another node's new sessions within a second, so a
/// real session is never refused for longer than this.
const MISS_TTL: Duration = Duration::from_secs(2);
/// Misses remembered at most; past it the expired ones are forgotten, and
/// if none has expired, all of them.
const MAX_MISSES: usize = 4096;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct TokenLookups {
    turns: Semaphore,
    misses: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Default for TokenLookups {
    fn default() -> Self {
        TokenLookups {
            turns: Semaphore::new(MAX_LOOKUPS),
            misses: Mutex::default(),
        }
    }
}

impl TokenLookups {
    /// A turn to look `digest` up, or `None` when it was found to be
    /// nobody's a moment ago or no turn came within `TURN_WAIT`.
    pub(crate) async fn turn(&self, digest: &[u8; 32]) -> Option<SemaphorePermit<'_>> {
        if self.recently_missed(digest) {
            return None;
        }
        match tokio::time::timeout(TURN_WAIT, self.turns.acquire()).await {
            Ok(Ok(permit)) => Some(permit),
            _ => {
                tracing::debug!("no turn to look a session token up; taken as unknown");
                None
            }
        }
    }

    /// Whether `digest` was found to be nobody's a moment ago.
    pub(crate) fn recently_missed(&self, digest: &[u8; 32]) -> bool {
        self.lock()
            .get(digest)
            .is_some_and(|at| at.elapsed() < MISS_TTL)
    }

    /// `digest` is nobody's session.
    pub(crate) fn missed(&self, digest: [u8; 32]) {
        let mut misses = self.lock();
        if misses.len() >= MAX_MISSES {
            misses.retain(|_, at| at.elapsed() < MISS_TTL);
            if misses.len() >= MAX_MISSES {
                misses.clear();
            }
        }
        misses.insert(digest, Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Instant>> {
        self.misses.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_miss_is_not_looked_up_again_until_it_expires() {
        let lookups = TokenLookups::default();
        let digest = [7; 32];
        assert!(lookups.turn(&digest).await.is_some());
        lookups.missed(digest);
        assert!(lookups.turn(&digest).await.is_none());
        assert!(lookups.turn(&[8; 32]).await.is_some(), "other tokens go on");
        tokio::time::advance(MISS_TTL).await;
        assert!(lookups.turn(&digest).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn look_ups_take_turns_and_a_late_one_gives_up() {
        let lookups = TokenLookups::default();
        let held: Vec<_> = futures_util::future::join_all(
            (0..MAX_LOOKUPS as u8).map(|n| lookups.turn_for_test(n)),
        )
        .await;
        assert!(held.iter().all(Option::is_some));
        let waited = Instant::now();
        assert!(lookups.turn(&[99; 32]).await.is_none());
        assert_eq!(waited.elapsed(), TURN_WAIT);
        drop(held);
        assert!(lookups.turn(&[99; 32]).await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn misses_are_bounded() {
        let lookups = TokenLookups::default();
        for n in 0..=MAX_MISSES as u32 {
            let mut digest = [0; 32];
            digest[..4].copy_from_slice(&n.to_le_bytes());
            lookups.missed(digest);
        }
        assert!(lookups.lock().len() <= MAX_MISSES);
    }

    impl TokenLookups {
        async fn turn_for_test(&self, n: u8) -> Option<SemaphorePermit<'_>> {
            self.turn(&[n; 32]).await
        }
    }
}
