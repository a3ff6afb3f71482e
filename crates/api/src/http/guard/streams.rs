//! Live streams held open at once: at most `limits.streams_per_caller` per
//! caller and `limits.max_streams` in all. A stream holds its place for as
//! long as its response body lives, so a client that leaves frees it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use swarmd_config::LimitsConfig;

/// The places of every open stream, by caller.
#[derive(Debug)]
pub(super) struct Streams {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_caller: usize,
    total: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_caller: HashMap<String, usize>,
    total: usize,
}

/// One open stream's place; freed when dropped.
#[derive(Debug)]
pub struct StreamSlot {
    inner: Arc<Inner>,
    caller: String,
}

/// Why a stream was refused: the bound it met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    Caller,
    Total,
}

impl Streams {
    pub(super) fn new(limits: &LimitsConfig) -> Streams {
        Streams::with(
            limits.streams_per_caller as usize,
            limits.max_streams as usize,
        )
    }

    fn with(per_caller: usize, total: usize) -> Streams {
        Streams {
            inner: Arc::new(Inner {
                per_caller,
                total,
                held: Mutex::default(),
            }),
        }
    }

    /// A place for one more stream of `caller`, or the bound it meets.
    pub(super) fn open(&self, caller: String) -> Result<StreamSlot, Full> {
        let mut held = self.inner.lock();
        if held.total >= self.inner.total {
            return Err(Full::Total);
        }
        let count = held.by_caller.entry(caller.clone()).or_default();
        if *count >= self.inner.per_caller {
            return Err(Full::Caller);
        }
        *count += 1;
        held.total += 1;
        Ok(StreamSlot {
            inner: self.inner.clone(),
            caller,
        })
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.inner.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(count) = held.by_caller.get_mut(&self.caller) {
            *count -= 1;
            if *count == 0 {
                held.by_caller.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_caller_and_in_all_and_freed_on_drop() {
        let streams = Streams::with(2, 3);
        let a1 = streams.open("a".into()).unwrap();
        let _a2 = streams.open("a".into()).unwrap();
        assert_eq!(streams.open("a".into()).unwrap_err(), Full::Caller);
        let _b1 = streams.open("b".into()).unwrap();
        assert_eq!(streams.open("c".into()).unwrap_err(), Full::Total);
        drop(a1);
        let _c1 = streams.open("c".into()).unwrap();
        assert_eq!(streams.open("a".into()).unwrap_err(), Full::Total);
        assert_eq!(streams.inner.lock().by_caller.get("a"), Some(&1));
    }
}
