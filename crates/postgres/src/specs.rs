//! The tasks whose spec this process has sent the database, so that a
//! task's later writes carry only its state.
//!
//! A task's row holds its spec (written once) and its state (rewritten at
//! each change). A row must never be inserted with a state and no spec, so
//! a task's first write from this process carries the spec, whatever the
//! task's state (a takeover, a reopened database, a test writing a task in
//! any state first). Sending it again is harmless: the upsert keeps the
//! spec a row already has (`rows::statements::TASKS`). So the set may
//! forget ids at any time, and does: when a write group fails (a creation
//! it held rolled back, so the task's next write must carry the spec
//! again), when a batch cannot be encoded, when a task is encoded in a
//! terminal state (nothing writes it again but a repair), and when it
//! grows past [`SpecsSent::MAX`].

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use uuid::Uuid;

/// The ids of the tasks whose spec this process has queued on the writer
/// since the last failed group.
#[derive(Debug, Default)]
pub(crate) struct SpecsSent {
    ids: Mutex<HashSet<Uuid>>,
}

impl SpecsSent {
    /// The set is emptied when it passes this many ids.
    pub(crate) const MAX: usize = 100_000;

    /// Whether a write of task `id` must carry its spec: it does unless
    /// its spec was sent before. A write in a terminal state forgets the
    /// id; any other write records it.
    pub(crate) fn needs_spec(&self, id: Uuid, terminal: bool) -> bool {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if terminal {
            return !ids.remove(&id);
        }
        if ids.contains(&id) {
            return false;
        }
        if ids.len() >= Self::MAX {
            ids.clear();
        }
        ids.insert(id);
        true
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
    fn a_spec_is_sent_first_and_again_once_forgotten() {
        let specs = SpecsSent::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(specs.needs_spec(a, false));
        assert!(!specs.needs_spec(a, false));
        assert!(specs.needs_spec(b, false));
        specs.forget_all();
        assert!(specs.needs_spec(a, false));
        // A terminal write forgets the task once its spec was sent.
        assert!(!specs.needs_spec(a, true));
        assert!(specs.needs_spec(a, true));
        assert!(specs.needs_spec(a, false));
    }

    #[test]
    fn the_set_is_emptied_when_it_passes_its_bound() {
        let specs = SpecsSent::default();
        let first = Uuid::now_v7();
        assert!(specs.needs_spec(first, false));
        for _ in 1..SpecsSent::MAX {
            specs.needs_spec(Uuid::now_v7(), false);
        }
        assert!(!specs.needs_spec(first, false));
        assert!(specs.needs_spec(Uuid::now_v7(), false));
        assert!(specs.needs_spec(first, false));
    }
}
