//! Fingerprints of every idempotency key in the store, kept in memory so that
//! a `task_for_key` for a key never used (every new WebSocket `spawn_task`
//! carries one) answers `None` without a read on the blocking pool.
//!
//! A fingerprint is a 64-bit SipHash of the key under a per-process random
//! key, counted (two keys may share one), so the index can only err towards
//! "maybe present", which costs a store read and nothing else: it is filled
//! at open from the table, counted up when a batch carrying a key is
//! submitted (before it commits, so a key is never in the store without its
//! fingerprint) and down when retention deletes the key. A batch that fails
//! leaves a count behind: again only a needless read. Memory: about 32 bytes
//! per stored key.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard, PoisonError};

#[derive(Debug, Default)]
pub(super) struct KeyIndex {
    hasher: RandomState,
    counts: Mutex<HashMap<u64, u32>>,
}

impl KeyIndex {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, u32>> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fingerprint(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Whether `key` may be stored (false: it certainly is not).
    pub(super) fn may_contain(&self, key: &str) -> bool {
        let fingerprint = self.fingerprint(key);
        self.lock().contains_key(&fingerprint)
    }

    pub(super) fn add<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let fingerprints: Vec<u64> = keys.into_iter().map(|k| self.fingerprint(k)).collect();
        if fingerprints.is_empty() {
            return;
        }
        let mut counts = self.lock();
        for fingerprint in fingerprints {
            *counts.entry(fingerprint).or_default() += 1;
        }
    }

    pub(super) fn remove<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let fingerprints: Vec<u64> = keys.into_iter().map(|k| self.fingerprint(k)).collect();
        let mut counts = self.lock();
        for fingerprint in fingerprints {
            if let Some(count) = counts.get_mut(&fingerprint) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(&fingerprint);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_no_only_for_keys_never_added_or_all_removed() {
        let index = KeyIndex::default();
        assert!(!index.may_contain("ws:a:1"));
        index.add(["ws:a:1", "ws:a:1", "ws:a:2"]);
        assert!(index.may_contain("ws:a:1") && index.may_contain("ws:a:2"));
        assert!(!index.may_contain("ws:a:3"));
        index.remove(["ws:a:1"]);
        assert!(index.may_contain("ws:a:1"), "counted: one of two is left");
        index.remove(["ws:a:1", "ws:a:2", "never-added"]);
        assert!(!index.may_contain("ws:a:1") && !index.may_contain("ws:a:2"));
    }
}
