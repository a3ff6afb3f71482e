//! Per-credential and per-peer rates (GCRA, `governor`): writes per
//! credential (`limits.write_rate_per_sec` with `limits.write_burst`),
//! credential-less logins per peer address (`limits.login_rate_per_min`).
//!
//! A key is a digest of the credential as presented, never the credential
//! itself, so a limiter holds no secret. A credential the route then
//! refuses still spent a place in its own bucket only: forged credentials
//! cannot drain a real one's. Keys idle long enough to be back at a full
//! bucket are dropped by `sweep`, which the daemon runs periodically, so an
//! attacker cycling through fresh credentials holds memory for a few
//! seconds per key at most.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use sha2::{Digest, Sha256};
use swarmd_engine::ids::SessionId;

use swarmd_config::LimitsConfig;

/// What a bucket is kept for: 16 bytes of a SHA-256 over a tagged subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateKey([u8; 16]);

impl RateKey {
    fn tagged(tag: &[u8], subject: &[u8]) -> RateKey {
        let digest = Sha256::new()
            .chain_update(tag)
            .chain_update([0])
            .chain_update(subject)
            .finalize();
        let mut key = [0; 16];
        key.copy_from_slice(&digest[..16]);
        RateKey(key)
    }

    /// The bucket of a credential (a token, a handle, a session secret).
    pub fn credential(credential: &str) -> RateKey {
        RateKey::tagged(b"credential", credential.as_bytes())
    }

    /// The bucket of a peer address, for requests without a credential.
    pub fn peer(ip: IpAddr) -> RateKey {
        RateKey::tagged(b"peer", ip.to_string().as_bytes())
    }

    /// The bucket of a MainAI session's WebSocket writes.
    pub fn session(sid: &SessionId) -> RateKey {
        RateKey::tagged(b"session", sid.as_uuid().as_bytes())
    }
}

/// The words a refusal under `limit` uses for what was limited.
pub(super) fn subject(limit: &str) -> &'static str {
    match limit {
        "login" => "peer address (limits.login_rate_per_min)",
        _ => "credential (limits.write_rate_per_sec)",
    }
}

type Limiter = DefaultKeyedRateLimiter<RateKey>;

/// The daemon's limiters; a limit configured as 0 is off.
pub struct Rates {
    writes: Option<Limiter>,
    logins: Option<Limiter>,
}

impl std::fmt::Debug for Rates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rates")
            .field("writes", &self.writes.as_ref().map(Limiter::len))
            .field("logins", &self.logins.as_ref().map(Limiter::len))
            .finish()
    }
}

impl Rates {
    pub fn new(limits: &LimitsConfig) -> Rates {
        let writes = NonZeroU32::new(limits.write_rate_per_sec).map(|rate| {
            let burst = NonZeroU32::new(limits.write_burst)
                .unwrap_or(rate)
                .max(rate);
            Limiter::dashmap(Quota::per_second(rate).allow_burst(burst))
        });
        let logins = NonZeroU32::new(limits.login_rate_per_min)
            .map(|rate| Limiter::dashmap(Quota::per_minute(rate)));
        Rates { writes, logins }
    }

    /// Takes a place for one write under `key`, or says how long to wait.
    pub fn check_write(&self, key: &RateKey) -> Result<(), Duration> {
        check(self.writes.as_ref(), key)
    }

    /// Takes a place for one credential-less login from `ip`.
    pub fn check_login(&self, ip: IpAddr) -> Result<(), Duration> {
        check(self.logins.as_ref(), &RateKey::peer(ip))
    }

    /// Forgets keys whose buckets are full again.
    pub fn sweep(&self) {
        for limiter in [&self.writes, &self.logins].into_iter().flatten() {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }

    /// Keys held now, over both limiters.
    pub fn keys(&self) -> usize {
        [&self.writes, &self.logins]
            .into_iter()
            .flatten()
            .map(Limiter::len)
            .sum()
    }
}

fn check(limiter: Option<&Limiter>, key: &RateKey) -> Result<(), Duration> {
    let Some(limiter) = limiter else {
        return Ok(());
    };
    limiter
        .check_key(key)
        .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rate: u32, burst: u32, logins: u32) -> LimitsConfig {
        LimitsConfig {
            write_rate_per_sec: rate,
            write_burst: burst,
            login_rate_per_min: logins,
            ..LimitsConfig::default()
        }
    }

    #[test]
    fn a_credential_gets_its_burst_then_waits() {
        let rates = Rates::new(&limits(1, 3, 60));
        let key = RateKey::credential("sws-one");
        for _ in 0..3 {
            rates.check_write(&key).unwrap();
        }
        let wait = rates.check_write(&key).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        rates
            .check_write(&RateKey::credential("sws-two"))
            .expect("another credential has its own bucket");
    }

    #[test]
    fn logins_are_counted_per_peer() {
        let rates = Rates::new(&limits(1000, 2000, 2));
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        rates.check_login(peer).unwrap();
        rates.check_login(peer).unwrap();
        assert!(rates.check_login(peer).is_err());
        rates.check_login("127.0.0.2".parse().unwrap()).unwrap();
    }

    #[test]
    fn zero_turns_a_limit_off() {
        let rates = Rates::new(&limits(0, 1, 0));
        let key = RateKey::credential("x");
        for _ in 0..10_000 {
            rates.check_write(&key).unwrap();
        }
        assert_eq!(rates.keys(), 0);
    }

    #[test]
    fn keys_are_digests_not_credentials() {
        let a = RateKey::credential("sws-secret");
        assert_ne!(a, RateKey::session(&SessionId::new()));
        assert!(!format!("{a:?}").contains("secret"));
    }
}
