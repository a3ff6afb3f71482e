//! Who opened each MCP session, and each credential's share of the session
//! table (docs/mcp.md, Sessions).
//!
//! A session belongs to the credential whose `initialize` opened it: the
//! admin token, or one operator session. A request naming it with any other
//! credential is answered as for a session that does not exist. Each
//! credential holds at most `mcp.max_sessions_per_credential` sessions, and
//! the operators together at most `mcp.max_sessions`; the admin's sessions
//! count only against its own share, so no number of operators locks it out.
//!
//! A request that may open a session takes a [`Slot`] first. The slot counts
//! as a session until the answer shows whether rmcp opened one: then it
//! becomes that session's place ([`Slot::bind`]), or it is given back when
//! dropped. Sessions rmcp closed on its own (idle ones, the drain) are
//! pruned against its table before a slot is counted, so the counts are
//! those of what is open, whatever the requests' headers said.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use swarmd_engine::ids::SessionId;

/// The credential an MCP session belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Credential {
    Admin,
    Operator(SessionId),
}

/// Which cap refused a new session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The credential holds its whole share.
    Credential,
    /// The operators hold the whole table.
    Total,
}

impl Refusal {
    /// The label of `swarmd_mcp_sessions_refused_total`.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Refusal::Credential => "credential",
            Refusal::Total => "total",
        }
    }
}

/// The sessions open (or being opened) and their owners.
#[derive(Debug)]
pub(super) struct Ledger {
    table: Mutex<Table>,
    per_credential: usize,
    total: usize,
}

#[derive(Debug, Default)]
struct Table {
    /// Open sessions by rmcp id, with who opened them.
    owners: HashMap<String, Credential>,
    /// Sessions plus slots, per credential (no zero entries).
    held: HashMap<Credential, usize>,
    /// Sessions plus slots of all operators.
    operators: usize,
}

impl Table {
    fn take(&mut self, credential: &Credential) {
        *self.held.entry(credential.clone()).or_default() += 1;
        if *credential != Credential::Admin {
            self.operators += 1;
        }
    }

    fn give_back(&mut self, credential: &Credential) {
        if let Some(held) = self.held.get_mut(credential) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(credential);
            }
        }
        if *credential != Credential::Admin {
            self.operators = self.operators.saturating_sub(1);
        }
    }
}

impl Ledger {
    /// A ledger for at most `total` operator sessions and `per_credential`
    /// sessions of any one credential.
    pub(super) fn new(total: usize, per_credential: usize) -> Arc<Ledger> {
        Arc::new(Ledger {
            table: Mutex::new(Table::default()),
            per_credential,
            total,
        })
    }

    /// Whether session `id` is open and was opened by `credential`.
    pub(super) fn opened_by(&self, id: &str, credential: &Credential) -> bool {
        self.table().owners.get(id) == Some(credential)
    }

    /// A slot for one more session of `credential`, or the cap it is over.
    /// Sessions for which `open` is false are forgotten first.
    pub(super) fn reserve(
        self: &Arc<Self>,
        credential: Credential,
        open: impl Fn(&str) -> bool,
    ) -> Result<Slot, Refusal> {
        let mut table = self.table();
        let closed: Vec<String> = table
            .owners
            .keys()
            .filter(|id| !open(id))
            .cloned()
            .collect();
        for id in closed {
            if let Some(owner) = table.owners.remove(&id) {
                table.give_back(&owner);
            }
        }
        if table.held.get(&credential).copied().unwrap_or(0) >= self.per_credential {
            return Err(Refusal::Credential);
        }
        if credential != Credential::Admin && table.operators >= self.total {
            return Err(Refusal::Total);
        }
        table.take(&credential);
        Ok(Slot {
            ledger: self.clone(),
            credential: Some(credential),
        })
    }

    /// Forgets session `id` (closed by its owner).
    pub(super) fn closed(&self, id: &str) {
        let mut table = self.table();
        if let Some(owner) = table.owners.remove(id) {
            table.give_back(&owner);
        }
    }

    /// Sessions open or being opened by `credential`.
    #[cfg(test)]
    fn held(&self, credential: &Credential) -> usize {
        self.table().held.get(credential).copied().unwrap_or(0)
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // The table is consistent after every statement: a panic elsewhere
        // leaves nothing half-done.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One session's place, taken before rmcp may open it; given back on drop
/// unless bound.
#[derive(Debug)]
pub(super) struct Slot {
    ledger: Arc<Ledger>,
    credential: Option<Credential>,
}

impl Slot {
    /// The place is session `id`'s from now on.
    pub(super) fn bind(mut self, id: String) {
        if let Some(credential) = self.credential.take() {
            let mut table = self.ledger.table();
            // An id rmcp hands out twice would leave the first owner's count
            // without a session; it never does (random UUIDs), but the
            // count stays true if it did.
            if let Some(previous) = table.owners.insert(id, credential) {
                table.give_back(&previous);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(credential) = self.credential.take() {
            self.ledger.table().give_back(&credential);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator() -> Credential {
        Credential::Operator(SessionId::new())
    }

    #[test]
    fn each_credential_holds_its_share_and_the_admin_is_outside_the_total() {
        let ledger = Ledger::new(3, 2);
        let (a, b) = (operator(), operator());
        let open = |_: &str| true;
        let kept: Vec<Slot> = (0..2)
            .map(|_| ledger.reserve(a.clone(), open).unwrap())
            .collect();
        assert_eq!(
            ledger.reserve(a.clone(), open).unwrap_err(),
            Refusal::Credential
        );
        let third = ledger.reserve(b.clone(), open).unwrap();
        assert_eq!(ledger.reserve(b.clone(), open).unwrap_err(), Refusal::Total);
        // The operators fill the table; the admin still has its share.
        let admin: Vec<Slot> = (0..2)
            .map(|_| ledger.reserve(Credential::Admin, open).unwrap())
            .collect();
        assert_eq!(
            ledger.reserve(Credential::Admin, open).unwrap_err(),
            Refusal::Credential
        );
        drop((kept, third, admin));
        assert_eq!(ledger.held(&a), 0);
        assert_eq!(ledger.held(&Credential::Admin), 0);
    }

    #[test]
    fn a_bound_slot_stays_until_closed_or_pruned_and_binds_to_its_opener() {
        let ledger = Ledger::new(10, 10);
        let (a, b) = (operator(), operator());
        ledger
            .reserve(a.clone(), |_| true)
            .unwrap()
            .bind("one".into());
        ledger
            .reserve(a.clone(), |_| true)
            .unwrap()
            .bind("two".into());
        assert!(ledger.opened_by("one", &a));
        assert!(!ledger.opened_by("one", &b));
        assert!(!ledger.opened_by("one", &Credential::Admin));
        assert!(!ledger.opened_by("three", &a));
        assert_eq!(ledger.held(&a), 2);

        ledger.closed("one");
        assert!(!ledger.opened_by("one", &a));
        assert_eq!(ledger.held(&a), 1);
        // rmcp closed `two` on its own: the next reservation prunes it.
        let slot = ledger.reserve(b.clone(), |id| id != "two").unwrap();
        assert_eq!(ledger.held(&a), 0);
        assert!(!ledger.opened_by("two", &a));
        drop(slot);
        assert_eq!(ledger.held(&b), 0);
    }
}
