//! The tasks whose spec this process has committed to the database, so
//! that a task's later writes carry only its state.
//!
//! A task's row holds its spec (written once) and its state (rewritten at
//! each change). A row must never be inserted with a state and no spec, so
//! every write of a task carries the spec until a write that carried it
//! has committed (`committed`, called by the writer after each successful
//! group): a write queued behind its task's creation carries it too, and a
//! task whose creation rolled back is never taken for stored. Sending it
//! again is harmless: the upsert keeps the spec a row already has
//! (`rows::statements::TASKS`). So the set may forget ids at any time, and
//! does: when a write fails (before the failed jobs are told), when a task
//! is encoded in a terminal state (nothing writes it again but a repair),
//! and when it grows past [`SpecsSent::MAX`].

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use uuid::Uuid;

/// The ids of the tasks whose spec a committed write of this process
/// carried, since the last failed write.
#[derive(Debug, Default)]
pub(crate) struct SpecsSent {
    ids: Mutex<HashSet<Uuid>>,
}

impl SpecsSent {
    /// The set is emptied when it passes this many ids.
    pub(crate) const MAX: usize = 100_000;

    /// Whether a write of task `id` must carry its spec: it does unless a
    /// write that carried it committed. A write in a terminal state
    /// forgets the id.
    pub(crate) fn needs_spec(&self, id: Uuid, terminal: bool) -> bool {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if terminal {
            !ids.remove(&id)
        } else {
            !ids.contains(&id)
        }
    }

    /// Records that writes carrying the specs of `ids` committed.
    pub(crate) fn committed(&self, ids: impl IntoIterator<Item = Uuid>) {
        let mut ids_now = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            if ids_now.len() >= Self::MAX {
                ids_now.clear();
            }
            ids_now.insert(id);
        }
    }

    /// Forgets every id: each task's next write carries its spec. Called
    /// before a failed write's callbacks run.
    pub(crate) fn forget_all(&self) {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_is_sent_until_a_write_carrying_it_committed() {
        let specs = SpecsSent::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(specs.needs_spec(a, false));
        assert!(specs.needs_spec(a, false), "not committed yet");
        specs.committed([a]);
        assert!(!specs.needs_spec(a, false));
        assert!(specs.needs_spec(b, false));
        specs.forget_all();
        assert!(specs.needs_spec(a, false));
        // A terminal write forgets the task once its spec committed.
        specs.committed([a]);
        assert!(!specs.needs_spec(a, true));
        assert!(specs.needs_spec(a, true));
        assert!(specs.needs_spec(a, false));
    }

    #[test]
    fn the_set_is_emptied_when_it_passes_its_bound() {
        let specs = SpecsSent::default();
        let first = Uuid::now_v7();
        specs.committed([first]);
        specs.committed((1..SpecsSent::MAX).map(|_| Uuid::now_v7()));
        assert!(!specs.needs_spec(first, false));
        specs.committed([Uuid::now_v7()]);
        assert!(specs.needs_spec(first, false));
    }
}
