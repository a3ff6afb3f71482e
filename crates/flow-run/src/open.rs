//! The runs a node holds open, each behind its own lock, counted by owner
//! so that one caller cannot hold every place a node has.

use std::collections::HashMap;
use std::sync::Arc;

use swarmd_engine::RunId;

use crate::advance::Live;

/// Open runs one owner (an operator session) may hold on one node; the
/// admin's runs count only against the node's `MAX_OPEN_RUNS`. A start
/// past it is `429 too_many_runs`.
pub const MAX_OPEN_RUNS_PER_OWNER: usize = 1_000;

/// The owner whose runs no share bounds.
const ADMIN: &str = "admin";

/// One open run: its state behind a lock (one verb at a time per run).
pub(crate) type Cell = Arc<tokio::sync::Mutex<Live>>;

/// The open runs of this node (`C`, a run's cell) and how many each
/// owner holds.
pub(crate) struct OpenRuns<C = Cell> {
    runs: HashMap<RunId, (C, Option<Arc<str>>)>,
    by_owner: HashMap<Arc<str>, usize>,
}

impl<C> Default for OpenRuns<C> {
    fn default() -> Self {
        OpenRuns {
            runs: HashMap::new(),
            by_owner: HashMap::new(),
        }
    }
}

impl<C> OpenRuns<C> {
    pub(crate) fn get(&self, id: &RunId) -> Option<&C> {
        self.runs.get(id).map(|(cell, _)| cell)
    }

    pub(crate) fn contains_key(&self, id: &RunId) -> bool {
        self.runs.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }

    /// How many open runs `owner` holds here; 0 for the admin, whose runs
    /// are not counted.
    pub(crate) fn held_by(&self, owner: &str) -> usize {
        self.by_owner.get(owner).copied().unwrap_or(0)
    }

    /// Opens run `id`, started by `owner`.
    pub(crate) fn insert(&mut self, id: RunId, cell: C, owner: Option<&str>) {
        let owner: Option<Arc<str>> = owner.filter(|o| *o != ADMIN).map(Arc::from);
        if let Some(owner) = &owner {
            *self.by_owner.entry(owner.clone()).or_default() += 1;
        }
        if let Some((_, Some(before))) = self.runs.insert(id, (cell, owner)) {
            self.forget(&before);
        }
    }

    /// Closes run `id`; its cell when it was open.
    pub(crate) fn remove(&mut self, id: &RunId) -> Option<C> {
        let (cell, owner) = self.runs.remove(id)?;
        if let Some(owner) = owner {
            self.forget(&owner);
        }
        Some(cell)
    }

    fn forget(&mut self, owner: &Arc<str>) {
        if let Some(held) = self.by_owner.get_mut(owner) {
            *held -= 1;
            if *held == 0 {
                self.by_owner.remove(owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_owner_is_counted_and_the_admin_is_not() {
        let mut open = OpenRuns::<()>::default();
        let (a, b, c) = (RunId::new(), RunId::new(), RunId::new());
        open.insert(a, (), Some("S-1"));
        open.insert(b, (), Some("S-1"));
        open.insert(c, (), Some(ADMIN));
        assert_eq!(
            (open.len(), open.held_by("S-1"), open.held_by(ADMIN)),
            (3, 2, 0)
        );
        // Opening a run again (read back from the store) counts it once.
        open.insert(a, (), Some("S-1"));
        assert_eq!(open.held_by("S-1"), 2);
        assert!(open.remove(&a).is_some());
        assert!(open.remove(&a).is_none(), "closed twice");
        assert_eq!(open.held_by("S-1"), 1);
        open.remove(&b);
        open.remove(&c);
        assert_eq!((open.len(), open.held_by("S-1")), (0, 0));
        assert!(open.by_owner.is_empty());
    }
}
