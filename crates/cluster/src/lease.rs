//! The node lease's arithmetic on this node's monotonic clock: how often a
//! node heartbeats and looks for dead peers, and when it must consider
//! itself dead without asking the database.
//!
//! The database decides who is dead (its `now()` against `heartbeat_at`);
//! this side only makes a node stop before its peers may act on a lease it
//! could not renew: a node whose last successful heartbeat is a whole lease
//! old (the database was out of reach, or the process was paused) stops at
//! once, since a peer may already own its tasks.

use std::time::Duration;

use tokio::time::Instant;

/// The shortest interval between two heartbeats, whatever the lease.
const MIN_TICK: Duration = Duration::from_millis(100);

/// A node's lease as this node keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    length: Duration,
    /// When the last heartbeat that found the node alive was sent.
    renewed_at: Instant,
}

impl Lease {
    /// A lease of `length`, renewed `now` (registration is a heartbeat).
    pub(crate) fn new(length: Duration, now: Instant) -> Lease {
        Lease {
            length,
            renewed_at: now,
        }
    }

    /// How often the node heartbeats and checks its peers: a third of the
    /// lease, so two heartbeats may be lost before the lease runs out.
    pub(crate) fn tick(&self) -> Duration {
        (self.length / 3).max(MIN_TICK)
    }

    /// Records a heartbeat the database accepted; `sent` is when it was
    /// sent (the lease runs from there, the cautious end).
    pub(crate) fn renewed(&mut self, sent: Instant) {
        self.renewed_at = self.renewed_at.max(sent);
    }

    /// Whether the lease ran out on this node's clock: peers may own its
    /// tasks now, so the node must stop.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.renewed_at) >= self.length
    }

    /// The longest a dead node's tasks wait for a survivor: its lease, plus
    /// one tick until a peer looks, plus one tick for the takeover itself.
    /// Within 2 × the lease for every lease the configuration allows.
    pub(crate) fn takeover_bound(&self) -> Duration {
        self.length + 2 * self.tick()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_expires_a_whole_lease_after_its_last_renewal() {
        let start = Instant::now();
        let mut lease = Lease::new(Duration::from_secs(9), start);
        assert_eq!(lease.tick(), Duration::from_secs(3));
        tokio::time::advance(Duration::from_secs(6)).await;
        lease.renewed(Instant::now());
        tokio::time::advance(Duration::from_millis(8_999)).await;
        assert!(!lease.expired(Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(lease.expired(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_never_moves_the_lease_back() {
        let start = Instant::now();
        let mut lease = Lease::new(Duration::from_secs(2), start);
        tokio::time::advance(Duration::from_secs(1)).await;
        let late = Instant::now();
        lease.renewed(late);
        // An earlier heartbeat answered after a later one.
        lease.renewed(start);
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert!(!lease.expired(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pause_past_the_lease_expires_it() {
        let lease = Lease::new(Duration::from_secs(2), Instant::now());
        // A SIGSTOP does not stop the monotonic clock.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(lease.expired(Instant::now()));
    }

    #[test]
    fn takeover_fits_in_two_leases_for_every_allowed_lease() {
        let now = Instant::now();
        for secs in 1..=300 {
            let lease = Lease::new(Duration::from_secs(secs), now);
            assert!(
                lease.takeover_bound() <= 2 * Duration::from_secs(secs),
                "lease {secs} s"
            );
        }
        assert_eq!(
            Lease::new(Duration::from_millis(150), now).tick(),
            MIN_TICK,
            "a tick is never shorter than {MIN_TICK:?}"
        );
    }
}
