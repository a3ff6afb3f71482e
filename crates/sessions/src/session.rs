//! One operator session: its identity and roles, its last activity, its
//! outbox of server frames and its table of pending requests. A session
//! outlives its sockets; it ends when deleted or expired, which closes its
//! socket and drops every pending waiter. The surfaces read and deliver
//! its frames through `surface`.
//!
//! Persistence goes through the engine's named session writes
//! (`persist_session`, `delete_session`), queued in the store's ordered
//! write path under the session's own std `Mutex` (held only to queue, never
//! across an `.await`), so a record written on detach can never land after
//! the session's deletion and bring it back.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use serde::Serialize;
use serde_json::Value;
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::SessionKind;
use swarmd_engine::store::SessionRecord;
use swarmd_engine::{Engine, EngineError};
use swarmd_types::cluster::NodeId;

use super::delivery::Delivery;
use super::outbox::{CloseReason, Outbox};
use super::pending::Pending;
use crate::dialect::Dialect;

/// One session as `GET /v1/operators` lists it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionSummary {
    pub sid: SessionId,
    pub roles: Vec<String>,
    pub kind: SessionKind,
    pub connected: bool,
    /// Last activity, unix ms.
    pub last_seen: u64,
    /// Frames in the outbox, waiting for a socket to flush them.
    pub parked: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A live operator session.
#[derive(Debug)]
pub struct Session {
    pub sid: SessionId,
    pub kind: SessionKind,
    pub roles: Vec<String>,
    pub description: Option<String>,
    pub manifest: Option<Value>,
    pub(super) token_digest: [u8; 32],
    created_ms: u64,
    last_seen_ms: AtomicU64,
    /// `last_seen_ms` as last written to the store.
    persisted_ms: AtomicU64,
    /// Set once the session is deleted or expired.
    closed: AtomicBool,
    persist_lock: Mutex<()>,
    pub outbox: Outbox,
    pub pending: Pending,
    pub(crate) delivery: Delivery,
    /// How frames to this session are written.
    pub dialect: Dialect,
    /// Until when the session counts as present through MCP (docs/mcp.md,
    /// Presence) without a WebSocket.
    present_until: Mutex<Option<Instant>>,
    /// MCP calls popping this session's frames right now.
    pollers: AtomicUsize,
    /// Serializes MCP pops, so two calls never take the same frames.
    pub pop_lock: tokio::sync::Mutex<()>,
    /// Serializes this node's moves of the session's home: taking it here
    /// (the database's move and what this node then believes) against a
    /// `moved` mail's check of the database and its closing of the socket,
    /// so a stale move never acts on what a newer one decided.
    pub(super) home_lock: tokio::sync::Mutex<()>,
    /// The session this one's parked spawns moved to, with their `req_id`s:
    /// a later cancel of one of them goes there.
    moved_to: Mutex<Option<Moved>>,
    /// Set once `moved_to` is: a spawn on a session never taken over (the
    /// delegated hot path) reads this flag and takes no lock.
    taken_over: AtomicBool,
    /// The node this session is homed on when that is not this one (on a
    /// cluster, `homes`): this node holds a copy, reaches the session
    /// through the mailbox, and neither expires nor writes it.
    elsewhere: Mutex<Option<NodeId>>,
}

/// Spawns handed over to another session.
#[derive(Debug)]
struct Moved {
    to: Weak<Session>,
    req_ids: HashSet<String>,
}

impl Session {
    pub(super) fn new(
        record: &SessionRecord,
        token_digest: [u8; 32],
        park_max: usize,
    ) -> Arc<Session> {
        Arc::new(Session {
            sid: record.sid,
            kind: record.kind,
            roles: record.roles.clone(),
            description: record.description.clone(),
            manifest: record.manifest.clone(),
            token_digest,
            created_ms: record.created_ms,
            last_seen_ms: AtomicU64::new(record.last_seen_ms),
            persisted_ms: AtomicU64::new(record.last_seen_ms),
            closed: AtomicBool::new(false),
            persist_lock: Mutex::new(()),
            outbox: Outbox::new(park_max),
            pending: Pending::default(),
            delivery: Delivery::new(record.done_through),
            dialect: Dialect::from_stored(record.dialect.as_deref()),
            present_until: Mutex::new(None),
            pollers: AtomicUsize::new(0),
            pop_lock: tokio::sync::Mutex::new(()),
            home_lock: tokio::sync::Mutex::new(()),
            moved_to: Mutex::new(None),
            taken_over: AtomicBool::new(false),
            elsewhere: Mutex::new(None),
        })
    }

    /// The other node this session is homed on; `None`: this one.
    pub(crate) fn elsewhere(&self) -> Option<NodeId> {
        *self.elsewhere.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this node is the session's home.
    pub(crate) fn is_home(&self) -> bool {
        self.elsewhere().is_none()
    }

    pub(super) fn set_elsewhere(&self, node: Option<NodeId>) {
        *self.elsewhere.lock().unwrap_or_else(|e| e.into_inner()) = node;
    }

    pub fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms.load(Ordering::Relaxed)
    }

    /// Records activity at `now_ms` (never moves backwards).
    pub fn touch(&self, now_ms: u64) {
        self.last_seen_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// Whether the session has expired at `now_ms`: no socket, and no
    /// activity for `idle`.
    pub fn idle_at(&self, now_ms: u64, idle: std::time::Duration) -> bool {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        !self.connected() && now_ms.saturating_sub(self.last_seen_ms()) >= idle_ms
    }

    /// Whether the session can take frames now: a WebSocket is attached,
    /// an MCP call is popping its frames, or an MCP request came within the
    /// presence window.
    pub fn connected(&self) -> bool {
        self.outbox.is_attached()
            || self.pollers.load(Ordering::Acquire) > 0
            || self
                .lock_presence()
                .is_some_and(|until| until > Instant::now())
    }

    /// Counts the session present for `window` from now (an MCP request).
    pub fn mark_present(&self, window: Duration) {
        let until = Instant::now() + window;
        let mut present = self.lock_presence();
        if present.is_none_or(|old| old < until) {
            *present = Some(until);
        }
    }

    /// Counts the session connected while the returned guard lives (an MCP
    /// call waiting for its frames).
    pub fn polling(self: &Arc<Self>) -> Polling {
        self.pollers.fetch_add(1, Ordering::AcqRel);
        Polling(self.clone())
    }

    fn lock_presence(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.present_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the session was deleted or expired.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Frames waiting for delivery.
    pub fn parked(&self) -> usize {
        self.outbox.len()
    }

    /// Server requests (`spawn`, `ask`, `hook_before`) waiting for a reply.
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }

    pub(super) fn record(&self) -> SessionRecord {
        SessionRecord {
            sid: self.sid,
            token_digest: hex(&self.token_digest),
            roles: self.roles.clone(),
            kind: self.kind,
            description: self.description.clone(),
            manifest: self.manifest.clone(),
            created_ms: self.created_ms,
            last_seen_ms: self.last_seen_ms(),
            done_through: Some(self.delivery.through()),
            dialect: (self.dialect != Dialect::Standard).then(|| self.dialect.as_str().to_owned()),
        }
    }

    pub fn summary(&self) -> SessionSummary {
        SessionSummary {
            sid: self.sid,
            roles: self.roles.clone(),
            kind: self.kind,
            connected: self.connected(),
            last_seen: self.last_seen_ms(),
            parked: self.parked(),
            description: self.description.clone(),
        }
    }

    /// Whether activity happened since the record was last written.
    pub(super) fn dirty(&self) -> bool {
        self.last_seen_ms() > self.persisted_ms.load(Ordering::Relaxed)
    }

    /// A copy's activity up to `seen_ms` was reported to its home.
    pub(super) fn reported(&self, seen_ms: u64) {
        self.persisted_ms.fetch_max(seen_ms, Ordering::Relaxed);
    }

    /// Writes the session's record, unless it is closed already or homed
    /// on another node (which writes it).
    pub async fn persist(&self, engine: &Engine) -> Result<(), EngineError> {
        if !self.is_home() {
            return Ok(());
        }
        let last_seen = self.last_seen_ms();
        let done_through = self.delivery.through();
        let done = {
            let _guard = self.persist_lock.lock().unwrap_or_else(|e| e.into_inner());
            if self.is_closed() {
                return Ok(());
            }
            engine.persist_session(self.record())
        };
        done.await?;
        self.persisted_ms.fetch_max(last_seen, Ordering::Relaxed);
        self.delivery.persisted(done_through);
        Ok(())
    }

    /// Ends the session: closes its socket with `reason`, drops its pending
    /// waiters and deletes its record. Only the first call does anything.
    pub(super) async fn end(
        &self,
        engine: &Engine,
        reason: CloseReason,
    ) -> Result<(), EngineError> {
        let done = {
            let _guard = self.persist_lock.lock().unwrap_or_else(|e| e.into_inner());
            if self.closed.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
            engine.delete_session(self.sid)
        };
        self.outbox.close(reason);
        self.pending.clear();
        done.await
    }
}

impl Session {
    /// Moves this session's undelivered `spawn` frames, with the requests
    /// waiting for their replies, to `to` (a login that took its roles
    /// over). Returns how many moved; one that finds `to`'s outbox full is
    /// dropped, and its attempt waits for its SubAgent or its lease.
    ///
    /// The session is marked taken over before its outbox is emptied, so a
    /// spawn queued here while this runs is seen by its sender, which moves
    /// it itself (`Session::spawn`).
    pub(super) fn hand_over_spawns(&self, to: &Arc<Session>) -> usize {
        self.lock_moved().get_or_insert_with(|| Moved {
            to: Arc::downgrade(to),
            req_ids: HashSet::new(),
        });
        self.taken_over.store(true, Ordering::Release);
        let mut count = 0;
        for spawn in self.outbox.take_spawns() {
            let req_id = spawn.req_id.clone();
            let waiter = self.pending.take(&req_id);
            if let Some(waiter) = waiter {
                to.pending.insert(req_id.clone(), waiter);
            }
            match to.outbox.push(super::Outgoing::Spawn(Box::new(spawn))) {
                Ok(_) => {
                    self.note_moved(req_id);
                    count += 1;
                }
                Err(_) => to.pending.remove(&req_id),
            }
        }
        count
    }

    fn lock_moved(&self) -> MutexGuard<'_, Option<Moved>> {
        self.moved_to.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session that took this one's roles over, while it exists.
    pub(super) fn taken_over_by(&self) -> Option<Arc<Session>> {
        if !self.taken_over.load(Ordering::Acquire) {
            return None;
        }
        self.lock_moved().as_ref().and_then(|m| m.to.upgrade())
    }

    /// Records that the spawn `req_id` now lives in the session that took
    /// this one over, so its cancel follows it there.
    pub(super) fn note_moved(&self, req_id: String) {
        if let Some(moved) = self.lock_moved().as_mut() {
            moved.req_ids.insert(req_id);
        }
    }

    /// The session the spawn `req_id` moved to, if it moved and that
    /// session still exists.
    pub(super) fn moved_spawn(&self, req_id: &str) -> Option<Arc<Session>> {
        self.lock_moved()
            .as_ref()
            .filter(|m| m.req_ids.contains(req_id))
            .and_then(|m| m.to.upgrade())
    }
}

/// Deletes the stored record of a session that is not in memory; nobody
/// waits for the write.
pub(super) fn forget_record(engine: &Engine, sid: SessionId) {
    drop(engine.delete_session(sid));
}

pub(super) fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
        let text = std::str::from_utf8(chunk).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

/// An MCP call popping a session's frames; the session counts as connected
/// while it lives.
#[derive(Debug)]
pub struct Polling(Arc<Session>);

impl Drop for Polling {
    fn drop(&mut self) {
        self.0.pollers.fetch_sub(1, Ordering::AcqRel);
    }
}
