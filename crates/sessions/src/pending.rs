//! Server → client requests waiting for their reply, keyed by `req_id`:
//! `spawn` (→ `spawn_ack`/`spawn_halt`), `ask` (→ `answer`), `hook_before`
//! (→ `hook_ack`). A reply completes the waiter's oneshot, or, for a request
//! another node relayed, goes back to that node as mail; a reply nobody
//! waits for is an error the client is told about.
//!
//! Waiters whose caller gave up (its receiver is gone) are pruned when the
//! table has doubled since the last prune, so the table stays bounded by the
//! requests really in flight. One std `Mutex`, never held across an `.await`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use swarmd_spawner::operator::{HookAck, SpawnReply};
use swarmd_types::cluster::NodeId;
use tokio::sync::oneshot;

use crate::frames::Reply;

const MIN_PRUNE_AT: usize = 64;

/// Who waits for a reply, and for which kind.
#[derive(Debug)]
pub enum Waiter {
    Spawn(oneshot::Sender<SpawnReply>),
    Ask(oneshot::Sender<Value>),
    Hook(oneshot::Sender<HookAck>),
    /// A request another node sent through the mailbox: the reply goes
    /// back there as mail.
    Relay(Relayed),
}

/// Which reply a relayed request expects, and where it goes.
#[derive(Debug)]
pub struct Relayed {
    pub(crate) expects: Expects,
    pub(crate) sid: swarmd_engine::ids::SessionId,
    pub(crate) reply_to: NodeId,
    pub(crate) post: crate::cluster::postbox::Postbox,
}

/// The kind of reply a request expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expects {
    Spawn,
    Answer,
    Hook,
}

impl Waiter {
    fn is_closed(&self) -> bool {
        match self {
            Waiter::Spawn(tx) => tx.is_closed(),
            Waiter::Ask(tx) => tx.is_closed(),
            Waiter::Hook(tx) => tx.is_closed(),
            Waiter::Relay(relayed) => relayed.post.is_closed(),
        }
    }

    fn kind(&self) -> Expects {
        match self {
            Waiter::Spawn(_) => Expects::Spawn,
            Waiter::Ask(_) => Expects::Answer,
            Waiter::Hook(_) => Expects::Hook,
            Waiter::Relay(relayed) => relayed.expects,
        }
    }

    fn expects(&self) -> &'static str {
        match self.kind() {
            Expects::Spawn => "spawn_ack or spawn_halt",
            Expects::Answer => "answer",
            Expects::Hook => "hook_ack",
        }
    }
}

/// Why a reply completed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("no pending request `{0}`")]
    Unknown(String),
    #[error("request `{req_id}` expects {expects}")]
    WrongKind {
        req_id: String,
        expects: &'static str,
    },
}

#[derive(Debug)]
pub struct Pending {
    table: Mutex<Table>,
}

#[derive(Debug)]
struct Table {
    waiters: HashMap<String, Waiter>,
    prune_at: usize,
    /// Replies that found no waiter, newest last, kept a while: on a
    /// cluster the waiter of a request sent before the session moved here
    /// may be registered just after its reply (`insert_or_complete`).
    orphans: std::collections::VecDeque<(String, Reply, std::time::Instant, usize)>,
    /// The weight of the kept orphans' values (`weight`).
    orphan_bytes: usize,
}

/// Replies kept without a waiter, how much of them, and for how long. A
/// client's stray replies (a `req_id` it made up) cost this much at most.
const MAX_ORPHANS: usize = 64;
const MAX_ORPHAN_BYTES: usize = 1 << 20;
const ORPHAN_TTL: std::time::Duration = std::time::Duration::from_secs(30);

/// About how many bytes a reply's values hold (their JSON text).
fn weight(reply: &Reply) -> usize {
    let json = |value: &Value| serde_json::to_vec(value).map_or(0, |text| text.len());
    let text = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    match reply {
        Reply::Answer(value) => json(value),
        Reply::Spawn(SpawnReply::Ack {
            value,
            error,
            stats,
            ..
        }) => json(value) + text(error) + stats.as_ref().map_or(0, json),
        Reply::Spawn(SpawnReply::Halt { value, reason }) => {
            value.as_ref().map_or(0, json) + text(reason)
        }
        Reply::Hook(ack) => text(&ack.reason),
    }
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            table: Mutex::new(Table {
                waiters: HashMap::new(),
                prune_at: MIN_PRUNE_AT,
                orphans: std::collections::VecDeque::new(),
                orphan_bytes: 0,
            }),
        }
    }
}

impl Table {
    /// Keeps a reply that found no waiter, of `bytes` (`weight`), within
    /// `MAX_ORPHANS` and `MAX_ORPHAN_BYTES` (the oldest go first; one
    /// heavier than the whole allowance is not kept).
    fn keep_orphan(&mut self, req_id: &str, reply: Reply, bytes: usize) {
        self.drop_stale_orphans();
        if bytes > MAX_ORPHAN_BYTES {
            return;
        }
        while self.orphans.len() >= MAX_ORPHANS || self.orphan_bytes + bytes > MAX_ORPHAN_BYTES {
            match self.orphans.pop_front() {
                Some((.., gone)) => self.orphan_bytes -= gone,
                None => break,
            }
        }
        let now = std::time::Instant::now();
        self.orphans
            .push_back((req_id.to_owned(), reply, now, bytes));
        self.orphan_bytes += bytes;
    }

    fn insert(&mut self, req_id: String, waiter: Waiter) {
        if self.waiters.len() >= self.prune_at {
            self.waiters.retain(|_, w| !w.is_closed());
            self.prune_at = (self.waiters.len() * 2).max(MIN_PRUNE_AT);
        }
        self.waiters.insert(req_id, waiter);
    }

    fn drop_stale_orphans(&mut self) {
        while let Some((_, _, at, bytes)) = self.orphans.front() {
            if at.elapsed() < ORPHAN_TTL {
                break;
            }
            self.orphan_bytes -= *bytes;
            self.orphans.pop_front();
        }
    }
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, req_id: String, waiter: Waiter) {
        self.lock().insert(req_id, waiter);
    }

    /// Completes the request `req_id` with `reply`. A caller that stopped
    /// waiting is not an error: the reply simply arrived late.
    pub(crate) fn complete(&self, req_id: &str, reply: Reply) -> Result<(), ReplyError> {
        // A reply without a waiter is weighed outside the lock (it may
        // hold a megabyte), and the waiters are looked at again after: one
        // registered meanwhile (a hand-over's) takes the reply instead of
        // leaving it an orphan nothing would claim.
        let mut weighed = None;
        let waiter = loop {
            let mut table = self.lock();
            let Some(waiter) = table.waiters.remove(req_id) else {
                match weighed {
                    Some(bytes) => {
                        table.keep_orphan(req_id, reply, bytes);
                        return Err(ReplyError::Unknown(req_id.to_owned()));
                    }
                    None => {
                        drop(table);
                        weighed = Some(weight(&reply));
                        continue;
                    }
                }
            };
            let matches = matches!(
                (waiter.kind(), &reply),
                (Expects::Spawn, Reply::Spawn(_))
                    | (Expects::Answer, Reply::Answer(_))
                    | (Expects::Hook, Reply::Hook(_))
            );
            if !matches {
                let expects = waiter.expects();
                table.waiters.insert(req_id.to_owned(), waiter);
                return Err(ReplyError::WrongKind {
                    req_id: req_id.to_owned(),
                    expects,
                });
            }
            break waiter;
        };
        match (waiter, reply) {
            (Waiter::Spawn(tx), Reply::Spawn(r)) => drop(tx.send(r)),
            (Waiter::Ask(tx), Reply::Answer(v)) => drop(tx.send(v)),
            (Waiter::Hook(tx), Reply::Hook(a)) => drop(tx.send(a)),
            (Waiter::Relay(relayed), reply) => relayed.post.reply(&relayed, req_id, &reply),
            _ => {}
        }
        Ok(())
    }

    /// Registers a waiter, or completes it at once with a reply that came
    /// without a waiter in the last `ORPHAN_TTL`.
    /// `None` keeps the waiter registered already (this node's own).
    pub(crate) fn insert_or_complete(&self, req_id: String, waiter: Option<Waiter>) {
        // The orphan is looked for and the waiter registered under one
        // lock, so a reply that `complete` is keeping meanwhile either is
        // found here or finds the waiter there.
        let orphan = {
            let mut table = self.lock();
            table.drop_stale_orphans();
            let found = table.orphans.iter().position(|(id, ..)| *id == req_id);
            let orphan = found.and_then(|index| table.orphans.remove(index));
            if let Some((.., bytes)) = &orphan {
                table.orphan_bytes -= bytes;
            }
            if let Some(waiter) = waiter {
                table.insert(req_id.clone(), waiter);
            }
            orphan
        };
        if let Some((_, reply, ..)) = orphan {
            let _ = self.complete(&req_id, reply);
        }
    }

    /// Takes a request's waiter out, to move it to another session.
    pub(crate) fn take(&self, req_id: &str) -> Option<Waiter> {
        self.lock().waiters.remove(req_id)
    }

    /// Where the reply to each request goes once the session moved to
    /// another node: `here` for this node's own waiters, which stay; the
    /// relayed ones leave with their node.
    pub(crate) fn hand_over(&self, here: NodeId) -> Vec<(String, Expects, NodeId)> {
        let mut table = self.lock();
        let routes: Vec<_> = table
            .waiters
            .iter()
            .filter(|(_, w)| !w.is_closed())
            .map(|(id, w)| {
                let to = match w {
                    Waiter::Relay(relayed) => relayed.reply_to,
                    _ => here,
                };
                (id.clone(), w.kind(), to)
            })
            .collect();
        table.waiters.retain(|_, w| !matches!(w, Waiter::Relay(_)));
        routes
    }

    /// Forgets a request; its caller sees the sender dropped.
    pub(crate) fn remove(&self, req_id: &str) {
        self.lock().waiters.remove(req_id);
    }

    /// Drops every waiter (the session is gone).
    pub(crate) fn clear(&self) {
        let waiters = std::mem::take(&mut self.lock().waiters);
        drop(waiters);
    }

    /// Requests waiting for their reply.
    pub(crate) fn len(&self) -> usize {
        self.lock().waiters.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn stray_replies_are_kept_within_a_count_and_a_weight() {
        let pending = Pending::default();
        let big = |n: usize| Reply::Answer(json!("x".repeat(n)));
        // Three of 400 KiB: the oldest goes to keep the weight in 1 MiB.
        for id in ["s-1", "s-2", "s-3"] {
            let _ = pending.complete(id, big(400 << 10));
        }
        let kept: Vec<String> = pending.lock().orphans.iter().map(|o| o.0.clone()).collect();
        assert_eq!(kept, ["s-2", "s-3"]);
        assert!(pending.lock().orphan_bytes <= MAX_ORPHAN_BYTES);
        // One heavier than the whole allowance is not kept at all.
        let _ = pending.complete("s-4", big(2 << 20));
        assert_eq!(pending.lock().orphans.len(), 2);
        // Small ones are kept up to the count, the oldest going first.
        for i in 0..100 {
            let _ = pending.complete(&format!("t-{i}"), Reply::Answer(json!(i)));
        }
        let table = pending.lock();
        assert_eq!(table.orphans.len(), MAX_ORPHANS);
        assert_eq!(table.orphans.back().unwrap().0, "t-99");
        let weights: usize = table.orphans.iter().map(|o| o.3).sum();
        assert_eq!(table.orphan_bytes, weights);
    }

    #[tokio::test]
    async fn a_reply_completes_its_waiter_once() {
        let pending = Pending::default();
        let (tx, rx) = oneshot::channel();
        pending.insert("ask-1".into(), Waiter::Ask(tx));
        pending
            .complete("ask-1", Reply::Answer(json!("yes")))
            .unwrap();
        assert_eq!(rx.await.unwrap(), json!("yes"));
        assert_eq!(
            pending.complete("ask-1", Reply::Answer(json!("again"))),
            Err(ReplyError::Unknown("ask-1".into()))
        );
    }

    #[tokio::test]
    async fn a_reply_of_the_wrong_kind_keeps_the_waiter() {
        let pending = Pending::default();
        let (tx, rx) = oneshot::channel();
        pending.insert("spawn-1".into(), Waiter::Spawn(tx));
        let error = pending
            .complete("spawn-1", Reply::Answer(json!(1)))
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "request `spawn-1` expects spawn_ack or spawn_halt"
        );
        let halt = SpawnReply::Halt {
            value: None,
            reason: Some("enough".into()),
        };
        pending
            .complete("spawn-1", Reply::Spawn(halt.clone()))
            .unwrap();
        assert_eq!(rx.await.unwrap(), halt);
    }

    #[tokio::test]
    async fn clearing_tells_every_caller_the_session_is_gone() {
        let pending = Pending::default();
        let (tx, rx) = oneshot::channel();
        pending.insert("hook-1".into(), Waiter::Hook(tx));
        pending.clear();
        assert!(rx.await.is_err());
        assert_eq!(pending.len(), 0);
    }

    #[test]
    fn a_late_reply_to_a_caller_that_gave_up_is_accepted_and_abandoned_waiters_are_pruned() {
        let pending = Pending::default();
        for n in 0..MIN_PRUNE_AT {
            let (tx, rx) = oneshot::channel();
            drop(rx);
            pending.insert(format!("ask-{n}"), Waiter::Ask(tx));
        }
        pending
            .complete("ask-0", Reply::Answer(json!(null)))
            .unwrap();
        let (tx, _rx) = oneshot::channel();
        pending.insert("live".into(), Waiter::Ask(tx));
        assert_eq!(
            pending.len(),
            MIN_PRUNE_AT,
            "nothing pruned below the threshold"
        );
        let (tx, _rx2) = oneshot::channel();
        pending.insert("live-2".into(), Waiter::Ask(tx));
        assert_eq!(
            pending.len(),
            2,
            "abandoned waiters pruned once the table is full"
        );
    }

    #[test]
    fn a_reply_racing_its_handed_over_waiter_always_reaches_it() {
        // The client's reply (half a megabyte, so weighing it takes a
        // while) and the hand-over's waiter arrive at once: the waiter gets
        // the reply every time, never left waiting beside an orphan.
        let pending = std::sync::Arc::new(Pending::default());
        let reply = Reply::Answer(json!("x".repeat(512 << 10)));
        for round in 0..60 {
            let id = format!("ask-{round}");
            let (tx, mut rx) = oneshot::channel();
            let start = std::sync::Arc::new(std::sync::Barrier::new(2));
            let answering = {
                let (pending, id, start, reply) =
                    (pending.clone(), id.clone(), start.clone(), reply.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let _ = pending.complete(&id, reply);
                })
            };
            start.wait();
            std::thread::sleep(std::time::Duration::from_micros(50));
            pending.insert_or_complete(id, Some(Waiter::Ask(tx)));
            answering.join().unwrap();
            // Both sides are done: a reply sent reached the channel.
            assert!(
                rx.try_recv().is_ok(),
                "round {round}: the reply was kept as an orphan"
            );
        }
    }
}
