//! This node's plumbing for the sessions of a cluster: what it knows as a
//! node (`SessionCluster`: its id, the mail it pushed into outboxes and
//! waits to see sent, the homes read at start) and the queue its
//! fire-and-forget mail leaves through (`Postbox`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::BoxFuture;
use swarmd_engine::ids::SessionId;
use swarmd_output_store::StoreError;
use swarmd_types::cluster::{NewMail, NodeId};
use tokio::sync::{Notify, mpsc, oneshot};

use super::lookups::TokenLookups;
use super::mail::{self, REPLY};
use super::peers::SessionPeers;
use crate::frames::Reply;
use crate::pending::Relayed;
use crate::{Session, SessionRegistry};

/// The first and the longest wait before a failed mail write is tried
/// again; it is tried until it goes.
const SEND_RETRY: Duration = Duration::from_millis(100);
const SEND_RETRY_MAX: Duration = Duration::from_secs(5);
/// One write takes at most this many pieces of mail, or this many bytes
/// of bodies (and at least one piece), so a backlog goes in writes the
/// database takes instead of one that grows while it is retried.
const MAX_BATCH: usize = 256;
const MAX_BATCH_BYTES: usize = 8 << 20;
/// The mail queued and not yet written, by its weight (`weight`): past
/// this, while the database cannot take it, new mail is dropped.
const MAX_QUEUED_BYTES: usize = 64 << 20;

/// This node's part in the sessions of a cluster.
#[derive(Debug)]
pub(crate) struct SessionCluster {
    pub(crate) peers: Arc<dyn SessionPeers>,
    pub(crate) node: NodeId,
    pub(crate) post: Postbox,
    /// Session mail pushed into an outbox here and not yet sent: mail id →
    /// (session, outbox id). The row goes once the outbox acknowledged it.
    pub(super) inflight: Mutex<BTreeMap<i64, (SessionId, u64)>>,
    /// The homes read at start, for `restore`.
    pub(super) homes: Mutex<HashMap<SessionId, Option<NodeId>>>,
    /// Wakes the mail pump (a session just moved here).
    pub(crate) wake: Notify,
    /// Sessions that just moved here, with the event seq their `task_done`s
    /// were delivered through (the watermark their record holds): the event
    /// router routes their events after it again (`take_catch_ups`).
    pub(super) catch_ups: Mutex<Vec<(Arc<Session>, u64)>>,
    pub(super) catch_up_wake: Notify,
    /// Sessions created after this (unix ms, less a margin for the nodes'
    /// clocks) are looked for at every `SESSION_SYNC`.
    pub(super) synced_ms: std::sync::atomic::AtomicU64,
    /// The releases this node asked other homes for and waits on, by
    /// session: notified when the home answers that it keeps the session.
    pub(super) releases: Mutex<HashMap<SessionId, Arc<Notify>>>,
    /// The guard on looking session tokens up (`load_bearer`).
    pub(super) lookups: TokenLookups,
}

impl SessionCluster {
    /// Node `node`'s part, reaching the others through `peers`, its mail
    /// queue started; the homes are
    /// read at `join_cluster`. `now_ms` is where the session sync starts.
    pub(crate) fn new(peers: Arc<dyn SessionPeers>, node: NodeId, now_ms: u64) -> SessionCluster {
        SessionCluster {
            post: Postbox::start(peers.clone()),
            peers,
            node,
            inflight: Mutex::default(),
            homes: Mutex::default(),
            wake: Notify::new(),
            catch_ups: Mutex::default(),
            catch_up_wake: Notify::new(),
            synced_ms: AtomicU64::new(now_ms),
            releases: Mutex::default(),
            lookups: TokenLookups::default(),
        }
    }

    fn lock_releases(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<Notify>>> {
        self.releases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What tells a wait for `sid`'s release that its home keeps it.
    pub(super) fn await_release(&self, sid: SessionId) -> Arc<Notify> {
        self.lock_releases().entry(sid).or_default().clone()
    }

    /// The wait for `sid`'s release is over.
    pub(super) fn release_done(&self, sid: SessionId) {
        self.lock_releases().remove(&sid);
    }

    /// `sid`'s home keeps it: the waits for its release end.
    pub(super) fn kept(&self, sid: SessionId) {
        if let Some(kept) = self.lock_releases().get(&sid) {
            kept.notify_waiters();
        }
    }

    fn lock_inflight(&self) -> MutexGuard<'_, BTreeMap<i64, (SessionId, u64)>> {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_inflight(&self, id: i64) -> bool {
        self.lock_inflight().contains_key(&id)
    }

    pub(crate) fn track(&self, id: i64, sid: SessionId, outbox_id: u64) {
        self.lock_inflight().insert(id, (sid, outbox_id));
    }

    /// Stops tracking `sid`'s mail (it moved away); the outbox ids of the
    /// frames that came as mail.
    pub(crate) fn untrack(&self, sid: SessionId) -> Vec<u64> {
        let mut inflight = self.lock_inflight();
        let ids: Vec<i64> = inflight
            .iter()
            .filter(|(_, (s, _))| *s == sid)
            .map(|(id, _)| *id)
            .collect();
        ids.iter()
            .filter_map(|id| inflight.remove(id))
            .map(|(_, outbox_id)| outbox_id)
            .collect()
    }

    /// The tracked mail whose frame went out (or whose session is gone
    /// from this node); no longer tracked.
    pub(crate) fn settled(&self, registry: &SessionRegistry) -> Vec<i64> {
        let mut inflight = self.lock_inflight();
        let done: Vec<i64> = inflight
            .iter()
            .filter(|(_, (sid, outbox_id))| {
                registry
                    .get(sid)
                    .is_none_or(|s| s.outbox.acked_through() >= *outbox_id)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &done {
            inflight.remove(id);
        }
        done
    }
}

/// The queue of mail this node sends without waiting (replies, cancels,
/// hand-overs), written in order by one task, bounded in bytes.
#[derive(Debug, Clone)]
pub(crate) struct Postbox {
    tx: mpsc::UnboundedSender<Posted>,
    queue: Arc<QueueWeight>,
}

/// What the queued mail weighs, and how much was dropped for it.
#[derive(Debug, Default)]
struct QueueWeight {
    bytes: AtomicUsize,
    dropped: AtomicU64,
}

/// What goes through the queue: mail, or a flush waiting for everything
/// queued before it.
#[derive(Debug)]
pub(crate) enum Posted {
    Mail(NewMail),
    Flush(oneshot::Sender<()>),
}

/// How the postbox's task writes a batch of mail (the database's
/// `send_mail`, or a test's stand-in).
pub(crate) type SendMail =
    Box<dyn Fn(Vec<NewMail>) -> BoxFuture<'static, Result<u64, StoreError>> + Send + Sync>;

/// What one write of the postbox's task takes from the queue.
#[derive(Default)]
struct Batch {
    mail: Vec<NewMail>,
    bytes: usize,
    flushes: Vec<oneshot::Sender<()>>,
}

impl Batch {
    fn take(&mut self, posted: Posted) {
        match posted {
            Posted::Mail(mail) => {
                self.bytes += weight(&mail);
                self.mail.push(mail);
            }
            Posted::Flush(done) => self.flushes.push(done),
        }
    }

    fn is_full(&self) -> bool {
        self.mail.len() >= MAX_BATCH || self.bytes >= MAX_BATCH_BYTES
    }
}

/// A piece of mail's share of the queue: its body and its other fields.
fn weight(mail: &NewMail) -> usize {
    mail.body.len() + mail.kind.len() + mail.req_id.as_ref().map_or(0, String::len) + 64
}

impl Postbox {
    pub(super) fn start(peers: Arc<dyn SessionPeers>) -> Postbox {
        Postbox::start_with(Box::new(move |batch| {
            let peers = peers.clone();
            Box::pin(async move { peers.send_mail(&batch).await })
        }))
    }

    /// A postbox whose task writes with `send`.
    pub(crate) fn start_with(send: SendMail) -> Postbox {
        let (tx, mut rx) = mpsc::unbounded_channel::<Posted>();
        let queue = Arc::new(QueueWeight::default());
        let weighed = Arc::clone(&queue);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = Batch::default();
                batch.take(first);
                // What is left after a full batch stays queued, flushes
                // included, so a flush still follows the mail before it.
                while !batch.is_full() {
                    let Ok(next) = rx.try_recv() else { break };
                    batch.take(next);
                }
                if !batch.mail.is_empty() {
                    send_until_sent(&send, batch.mail).await;
                    weighed.bytes.fetch_sub(batch.bytes, Ordering::Relaxed);
                }
                for done in batch.flushes {
                    let _ = done.send(());
                }
            }
        });
        Postbox { tx, queue }
    }

    /// A postbox whose mail is read from the receiver (tests).
    #[cfg(test)]
    pub(crate) fn channel() -> (Postbox, mpsc::UnboundedReceiver<Posted>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Arc::default();
        (Postbox { tx, queue }, rx)
    }

    /// Waits up to `wait` until everything queued so far was written (or
    /// dropped by a fenced node); whether it was.
    pub(crate) async fn flush(&self, wait: Duration) -> bool {
        let (done, flushed) = oneshot::channel();
        if self.tx.send(Posted::Flush(done)).is_err() {
            return true;
        }
        matches!(tokio::time::timeout(wait, flushed).await, Ok(Ok(())))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Queues `mail`, unless the queue already holds `MAX_QUEUED_BYTES`
    /// the database has not taken: then it is dropped, as a fenced node's
    /// is, and its waiter runs into its own timeout.
    pub(crate) fn send(&self, mail: NewMail) {
        let size = weight(&mail);
        let queued = self.queue.bytes.fetch_add(size, Ordering::Relaxed);
        if queued.saturating_add(size) > MAX_QUEUED_BYTES {
            self.queue.bytes.fetch_sub(size, Ordering::Relaxed);
            let dropped = self.queue.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Logged at the first drop and at every power of two after.
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped,
                    queued_bytes = queued,
                    "the session mail queue is full while the database cannot take it; mail dropped"
                );
            }
            return;
        }
        if self.tx.send(Posted::Mail(mail)).is_err() {
            self.queue.bytes.fetch_sub(size, Ordering::Relaxed);
            tracing::warn!("the session mail queue is closed; mail dropped");
        }
    }

    /// Sends a client's reply to a relayed request back to its node.
    pub(crate) fn reply(&self, relayed: &Relayed, req_id: &str, reply: &Reply) {
        self.send(NewMail {
            sid: relayed.sid,
            to_node: Some(relayed.reply_to),
            reply_to: None,
            kind: REPLY.to_owned(),
            req_id: Some(req_id.to_owned()),
            body: mail::encode_reply(reply),
        });
    }
}

/// Writes `batch`, again until it goes: a reply or a hand-over dropped here
/// would leave its attempt waiting out its lease. A fenced node drops it.
async fn send_until_sent(send: &SendMail, batch: Vec<NewMail>) {
    let mut wait = SEND_RETRY;
    while let Err(error) = send(batch.clone()).await {
        if error.is_fenced() {
            // Declared dead: nothing this node sends counts any more, and
            // it is on its way out.
            tracing::warn!(
                mails = batch.len(),
                "this node is fenced: session mail dropped"
            );
            return;
        }
        tracing::warn!(
            %error,
            mails = batch.len(),
            retry_in_ms = wait.as_millis() as u64,
            "cannot send session mail; retrying"
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(SEND_RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use swarmd_engine::ids::SessionId;

    use super::*;

    fn mail(n: u32) -> NewMail {
        NewMail {
            sid: SessionId::new(),
            to_node: None,
            reply_to: None,
            kind: "text".into(),
            req_id: None,
            body: n.to_string(),
        }
    }

    /// A sender that answers each call with the next of `answers` (then
    /// `Ok`), recording every batch it was handed.
    fn scripted(answers: Vec<Result<u64, StoreError>>) -> (SendMail, Arc<Mutex<Vec<Vec<String>>>>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        let seen = Arc::clone(&calls);
        let send: SendMail = Box::new(move |batch: Vec<NewMail>| {
            seen.lock()
                .unwrap()
                .push(batch.iter().map(|m| m.body.clone()).collect());
            let answer = answers.lock().unwrap().next().unwrap_or(Ok(0));
            Box::pin(async move { answer })
        });
        (send, calls)
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_returns_once_the_mail_before_it_is_written_retries_included() {
        let busy = || Err(StoreError::Busy("the database restarts".into()));
        let (send, calls) = scripted(vec![busy(), busy()]);
        let post = Postbox::start_with(send);
        for n in 1..=3 {
            post.send(mail(n));
        }
        assert!(post.flush(Duration::from_secs(10)).await);
        let calls = calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 3, "written again until it went: {calls:?}");
        assert_eq!(calls.last().unwrap(), &["1", "2", "3"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_node_drops_its_mail_instead_of_retrying() {
        let (send, calls) = scripted(vec![Err(StoreError::Fenced)]);
        let post = Postbox::start_with(send);
        post.send(mail(1));
        assert!(post.flush(Duration::from_secs(10)).await);
        assert_eq!(calls.lock().unwrap().len(), 1);
        // Later mail is still written.
        post.send(mail(2));
        assert!(post.flush(Duration::from_secs(10)).await);
        assert_eq!(calls.lock().unwrap().last().unwrap(), &["2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_gives_up_after_its_wait_while_the_database_is_down() {
        let down = (0..100)
            .map(|_| Err(StoreError::Busy("down".into())))
            .collect();
        let (send, _calls) = scripted(down);
        let post = Postbox::start_with(send);
        post.send(mail(1));
        assert!(!post.flush(Duration::from_secs(2)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_backlog_is_written_in_bounded_batches_in_order() {
        // The first write fails, so everything after it piles up behind.
        let (send, calls) = scripted(vec![Err(StoreError::Busy("down".into()))]);
        let post = Postbox::start_with(send);
        for n in 0..600 {
            post.send(mail(n));
        }
        assert!(post.flush(Duration::from_secs(10)).await);
        let calls = calls.lock().unwrap().clone();
        assert!(
            calls.iter().all(|batch| batch.len() <= MAX_BATCH),
            "{:?}",
            calls.iter().map(Vec::len).collect::<Vec<_>>()
        );
        // Each batch once, the failed first one twice: in order, none lost.
        let written: Vec<String> = calls[1..].concat();
        let expected: Vec<String> = (0..600).map(|n| n.to_string()).collect();
        assert_eq!(written, expected);
        assert_eq!(post.queue.bytes.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn mail_past_the_queues_bytes_is_dropped_while_the_database_is_down() {
        let down = (0..1000)
            .map(|_| Err(StoreError::Busy("down".into())))
            .collect();
        let (send, _calls) = scripted(down);
        let post = Postbox::start_with(send);
        let big = |n: u32| NewMail {
            body: format!("{n}{}", "b".repeat(1 << 20)),
            ..mail(n)
        };
        for n in 0..100 {
            post.send(big(n));
        }
        let queued = post.queue.bytes.load(Ordering::Relaxed);
        assert!(queued <= MAX_QUEUED_BYTES, "{queued}");
        assert!(post.queue.dropped.load(Ordering::Relaxed) >= 100 - 64);
    }
}
