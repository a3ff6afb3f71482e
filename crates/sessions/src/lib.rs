//! The MainAI side of swarmd: operator sessions (docs/protocol.md, Operator
//! sessions; Disconnects and parking): login with exclusive role names,
//! bearer-secret authentication by digest, persistence through the engine's
//! store, idle expiry, and the `SessionDirectory` the layers see sessions
//! through, whose hooks, senior bridge and spawn channel are the session
//! itself (`bridge`). Each `Session` owns its outbox of server frames
//! (`outbox`, written by `frames`) and its pending requests (`pending`); the
//! daemon's WebSocket module attaches sockets to them and its MCP server
//! pops them: a socket's client frames are read, replies answered and
//! queued frames delivered through the session (`surface`), and MCP pops
//! and answers through the same calls. The `EventRouter` (`router`, over
//! the gap-free `EventFeed` of `feed`) hands the engine's events about a
//! session's tasks to its outbox. On a cluster, a session's home node and
//! the mail between nodes are `cluster`'s.
//!
//! The registry's maps sit behind one std `Mutex` that is never held across
//! an `.await`.

mod bridge;
mod cancel;
mod cluster;
mod delivery;
pub mod dialect;
mod error;
mod feed;
pub mod frames;
mod outbox;
mod pending;
mod router;
mod session;
mod surface;
mod sweep;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod takeover_tests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use swarmd_engine::Engine;
use swarmd_engine::auth::SessionSecret;
use swarmd_engine::clock::Clock;
use swarmd_engine::ids::{IdMap, SessionId};
use swarmd_engine::store::SessionKind;
use swarmd_engine::store::SessionRecord;
use swarmd_spawner::operator::{LiveSession, SessionDirectory};
use swarmd_types::cluster::NodeId;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::dialect::Dialect;

pub use cancel::{CancelError, Canceller, cancel_as};
pub use cluster::peers::{MailWake, RoleHold, SessionPeers};
pub use error::SessionError;
pub use feed::EventFeed;
pub use frames::Reply;
pub use outbox::{
    Attachment, Batch, CloseReason, FrameClass, Outbox, OutboxFull, Outgoing, ParkedSpawn,
    Reservation,
};
pub use pending::{Expects, Pending, Relayed, ReplyError, Waiter};
pub use router::EventRouter;
pub use session::{Polling, Session, SessionSummary};

/// The one internal-error path of HTTP and WebSocket answers: logs `error`
/// once with a fresh correlation id and returns the message for the client,
/// which repeats the id and nothing else.
pub fn report_internal(error: &dyn std::fmt::Display) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    tracing::error!(correlation_id = %id, %error, "internal error");
    format!("internal error (correlation id {id})")
}

/// Role names are routing names (`main-ai`, `senior`): short and plain.
const MAX_ROLE_LEN: usize = 64;
const MAX_ROLES: usize = 16;
const MAX_DESCRIPTION: usize = 4096;
/// The largest `capability_manifest`, as compact JSON: a session keeps it
/// in memory (and in the store) for as long as it lives.
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;

/// `POST /v1/operators` body. `desc` is the upstream client's name for
/// `description`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    #[serde(default)]
    pub roles: Vec<String>,
    #[serde(default)]
    pub kind: SessionKind,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub desc: Option<String>,
    /// Present even when null: the upstream client sends
    /// `"capability_manifest": null` when it has none, and the key itself
    /// marks its login's shape (docs/protocol.md, Upstream clients).
    #[serde(default, deserialize_with = "present")]
    pub capability_manifest: Option<Value>,
    /// How frames to the session are written; by default the documented
    /// wire, or the upstream dialect for a login shaped as the upstream
    /// client's (`desc` and `capability_manifest`, no roles).
    #[serde(default)]
    pub dialect: Option<Dialect>,
}

/// A field that is `Some` whenever its key is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl LoginRequest {
    /// The dialect asked for, or the one the login's shape implies.
    fn dialect(&self) -> Dialect {
        self.dialect.unwrap_or(
            if self.roles.is_empty() && self.desc.is_some() && self.capability_manifest.is_some() {
                Dialect::Upstream
            } else {
                Dialect::Standard
            },
        )
    }
}

/// `POST /v1/operators` answer. The token is shown once, here.
#[derive(Debug, Clone, Serialize)]
pub struct LoginResponse {
    pub sid: SessionId,
    pub token: String,
    pub roles: Vec<String>,
}

/// What the registry reads from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSettings {
    /// `ws.park_max`: frames an outbox holds.
    pub park_max: usize,
    /// `auth.session_idle_secs`: a session with no socket and no activity
    /// for this long expires.
    pub idle: Duration,
    /// `auth.role_takeover_secs`: a login may take over a role whose holder
    /// has had no socket and no activity for this long.
    pub takeover: Duration,
    /// `limits.max_operator_sessions`: sessions the registry holds at once;
    /// a login past it is refused.
    pub max_sessions: usize,
}

#[derive(Debug, Default)]
struct Maps {
    by_sid: IdMap<SessionId, Arc<Session>>,
    by_digest: IdMap<[u8; 32], SessionId>,
    roles: HashMap<String, SessionId>,
}

impl Maps {
    /// Drops `session` and every role it holds.
    fn remove(&mut self, session: &Session) {
        self.by_sid.remove(&session.sid);
        self.by_digest.remove(&session.token_digest);
        self.roles.retain(|_, holder| *holder != session.sid);
    }
}

/// All operator sessions of this daemon.
#[derive(Debug)]
pub struct SessionRegistry {
    maps: Mutex<Maps>,
    clock: Arc<dyn Clock>,
    settings: SessionSettings,
    /// Open sockets, so a drain can wait for their close frames to go out.
    sockets: TaskTracker,
    /// The seq of the last event the router routed (see `delivery`).
    routed: std::sync::atomic::AtomicU64,
    /// This node's part in a cluster's sessions (`homes`), reaching the
    /// other nodes through the `SessionPeers` it was built with.
    cluster: Option<Arc<cluster::postbox::SessionCluster>>,
}

impl SessionRegistry {
    /// An empty registry of a daemon that is not in a cluster; the daemon
    /// reads its settings from its configuration. It holds no engine: the
    /// operations that write a session are handed it, so the engine's
    /// resolver can hold this registry as its `SessionDirectory` without a
    /// cycle.
    pub fn new(settings: SessionSettings, clock: Arc<dyn Clock>) -> Arc<Self> {
        Self::build(settings, clock, None)
    }

    /// An empty registry of cluster node `node`, reaching the other nodes
    /// through `peers` (its mail queue starts here, so this runs inside the
    /// runtime). `join_cluster` reads the sessions' homes before `restore`.
    pub fn in_cluster(
        settings: SessionSettings,
        clock: Arc<dyn Clock>,
        peers: Arc<dyn SessionPeers>,
        node: NodeId,
    ) -> Arc<Self> {
        let cluster = cluster::postbox::SessionCluster::new(peers, node, clock.now_ms());
        Self::build(settings, clock, Some(Arc::new(cluster)))
    }

    fn build(
        settings: SessionSettings,
        clock: Arc<dyn Clock>,
        cluster: Option<Arc<cluster::postbox::SessionCluster>>,
    ) -> Arc<Self> {
        Arc::new(SessionRegistry {
            maps: Mutex::new(Maps::default()),
            clock,
            settings,
            sockets: TaskTracker::new(),
            routed: std::sync::atomic::AtomicU64::new(0),
            cluster,
        })
    }

    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    fn maps(&self) -> MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates a session holding `roles` exclusively and persists it.
    pub async fn login(
        &self,
        engine: &Engine,
        req: LoginRequest,
    ) -> Result<LoginResponse, SessionError> {
        validate_login(&req)?;
        let held = self.maps().by_sid.len();
        if held >= self.settings.max_sessions {
            return Err(SessionError::TooMany(self.settings.max_sessions));
        }
        let now = self.clock.now_ms();
        let secret = SessionSecret::generate();
        let digest = secret.digest();
        let dialect = req.dialect();
        let record = SessionRecord {
            sid: SessionId::new(),
            token_digest: session::hex(&digest),
            roles: dedup(req.roles),
            kind: req.kind,
            description: req.description.or(req.desc),
            manifest: req.capability_manifest.filter(|m| !m.is_null()),
            created_ms: now,
            last_seen_ms: now,
            done_through: Some(self.routed_through()),
            dialect: (dialect != Dialect::Standard).then(|| dialect.as_str().to_owned()),
        };
        let session = Session::new(&record, digest, self.settings.park_max);
        // On a cluster, held until the session is stored: a login of the
        // same role on another node waits, then sees this holder.
        let role_lock = self.lock_roles(&session.roles).await?;
        let admitted = self.admit(engine, &session, digest, now).await;
        // Released on a refusal too, so the lock's connection goes back to
        // the pool.
        if let Some(lock) = role_lock {
            lock.release().await;
        }
        admitted?;
        tracing::info!(sid = %session.sid, roles = ?session.roles, kind = ?session.kind, "session created");
        engine.wake_waiting();
        Ok(LoginResponse {
            sid: session.sid,
            token: secret.expose().to_owned(),
            roles: session.roles.clone(),
        })
    }

    /// Gives `session` its roles (taking them from stale holders) and
    /// stores it; refused when a live holder has one of them.
    async fn admit(
        &self,
        engine: &Engine,
        session: &Arc<Session>,
        digest: [u8; 32],
        now: u64,
    ) -> Result<(), SessionError> {
        self.load_role_holders(&session.roles).await?;
        let stale = {
            let mut maps = self.maps();
            let stale = self.stale_holders(&maps, &session.roles, now)?;
            for old in &stale {
                maps.remove(old);
            }
            for role in &session.roles {
                maps.roles.insert(role.clone(), session.sid);
            }
            maps.by_digest.insert(digest, session.sid);
            maps.by_sid.insert(session.sid, session.clone());
            stale
        };
        for old in stale {
            let moved = old.hand_over_spawns(session);
            tracing::info!(sid = %old.sid, by = %session.sid, moved, "a stale session's roles were taken over");
            if let Err(error) = old.end(engine, CloseReason::Expired).await {
                tracing::warn!(sid = %old.sid, %error, "cannot delete a taken-over session");
            }
        }
        if let Err(error) = session.persist(engine).await {
            self.forget(session.sid);
            return Err(SessionError::Engine(error));
        }
        Ok(())
    }

    /// The session a bearer secret belongs to, touched as active. A session
    /// idle past `auth.session_idle_secs` is refused even before the sweep
    /// removes it: a request never revives an expired session. A copy of a
    /// session homed on another node is judged by its home, which deletes
    /// its record when it expires.
    pub fn authenticate(&self, bearer: &str) -> Option<Arc<Session>> {
        let secret = SessionSecret::parse(bearer).ok()?;
        let digest = secret.digest();
        let session = {
            let maps = self.maps();
            let sid = maps.by_digest.get(&digest)?;
            maps.by_sid.get(sid)?.clone()
        };
        let now = self.clock.now_ms();
        if session.is_closed() || (session.is_home() && session.idle_at(now, self.settings.idle)) {
            return None;
        }
        session.touch(now);
        Some(session)
    }

    pub fn get(&self, sid: &SessionId) -> Option<Arc<Session>> {
        self.maps().by_sid.get(sid).cloned()
    }

    pub fn summary(&self, sid: &SessionId) -> Option<SessionSummary> {
        self.get(sid).map(|s| s.summary())
    }

    pub fn list(&self) -> Vec<SessionSummary> {
        let mut list: Vec<_> = self.all().iter().map(|s| s.summary()).collect();
        list.sort_by_key(|s| s.sid);
        list
    }

    fn all(&self) -> Vec<Arc<Session>> {
        self.maps().by_sid.values().cloned().collect()
    }

    /// Deletes a session: releases its roles, closes its socket, drops its
    /// pending requests and removes it from the store.
    pub async fn delete(&self, engine: &Engine, sid: &SessionId) -> Result<(), SessionError> {
        let session = self.forget(*sid).ok_or(SessionError::NotFound)?;
        tracing::info!(%sid, "session deleted");
        if self.tell_home_ended(&session).await {
            session.outbox.close(CloseReason::Deleted);
            session.pending.clear();
            return Ok(());
        }
        session
            .end(engine, CloseReason::Deleted)
            .await
            .map_err(SessionError::Engine)
    }

    fn forget(&self, sid: SessionId) -> Option<Arc<Session>> {
        let mut maps = self.maps();
        let session = maps.by_sid.get(&sid)?.clone();
        maps.remove(&session);
        Some(session)
    }

    /// The holders of `roles` a login may take them from: each must have had
    /// no socket and no activity for `auth.role_takeover_secs`. A live
    /// holder refuses the login, and so does one homed on another node
    /// (only its home knows whether it is live).
    fn stale_holders(
        &self,
        maps: &Maps,
        roles: &[String],
        now_ms: u64,
    ) -> Result<Vec<Arc<Session>>, SessionError> {
        let mut stale: Vec<Arc<Session>> = Vec::new();
        for role in roles {
            let Some(holder) = maps.roles.get(role).and_then(|sid| maps.by_sid.get(sid)) else {
                continue;
            };
            if !holder.is_home() || !holder.idle_at(now_ms, self.settings.takeover) {
                return Err(SessionError::RoleTaken(role.clone()));
            }
            if !stale.iter().any(|s| s.sid == holder.sid) {
                stale.push(holder.clone());
            }
        }
        Ok(stale)
    }

    /// Restores persisted sessions at boot, before the server reports ready.
    /// A stored role already held by a restored session is dropped. A
    /// session idle past `auth.session_idle_secs` (no socket survives a
    /// restart) is not restored: its record is deleted instead, unless it
    /// is homed on another node, which judges it (`homes`).
    pub fn restore(&self, engine: &Engine, records: Vec<SessionRecord>) {
        let now = self.clock.now_ms();
        let idle_ms = u64::try_from(self.settings.idle.as_millis()).unwrap_or(u64::MAX);
        let mut maps = self.maps();
        for mut record in records {
            let elsewhere = self.restored_home(&record.sid);
            if elsewhere.is_none() && now.saturating_sub(record.last_seen_ms) >= idle_ms {
                tracing::info!(sid = %record.sid, "not restoring a session that expired while the daemon was down");
                session::forget_record(engine, record.sid);
                continue;
            }
            let Some(digest) = session::unhex(&record.token_digest) else {
                tracing::warn!(sid = %record.sid, "skipping a stored session with a malformed digest");
                continue;
            };
            record.roles.retain(|role| !maps.roles.contains_key(role));
            let session = Session::new(&record, digest, self.settings.park_max);
            session.set_elsewhere(elsewhere);
            for role in &session.roles {
                maps.roles.insert(role.clone(), session.sid);
            }
            maps.by_digest.insert(digest, session.sid);
            maps.by_sid.insert(session.sid, session);
        }
    }

    /// Number of sessions with a socket attached.
    pub fn connected(&self) -> usize {
        self.all().iter().filter(|s| s.connected()).count()
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.maps().by_sid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the drain waiting while a socket is open (see `wait_sockets`).
    pub fn socket_token(&self) -> TaskTrackerToken {
        self.sockets.token()
    }

    /// Tells every attached socket to close (`1001 going away`). Sessions
    /// stay: clients reconnect after a restart with the same sid and token.
    pub fn close_sockets(&self) {
        for session in self.all() {
            session.outbox.close(CloseReason::ShuttingDown);
        }
    }

    /// Waits up to `grace` for every socket to finish closing.
    pub async fn wait_sockets(&self, grace: Duration) {
        self.sockets.close();
        let _ = tokio::time::timeout(grace, self.sockets.wait()).await;
    }

    /// What a layer sees of a session. Hooks only for kinds that take them;
    /// the spawn channel always (frames park while disconnected); the
    /// senior bridge only while connected (docs/tasks.md, Senior). A
    /// session homed on another node is reached through the mailbox
    /// (`relay`), its senior bridge whether connected or not.
    fn info(&self, session: &Arc<Session>) -> LiveSession {
        // A registry outside a cluster never relays.
        if let Some(cluster) = self.cluster().filter(|_| !session.is_home()) {
            return cluster::relay::relayed(cluster, session);
        }
        LiveSession {
            sid: session.sid,
            kind: session.kind,
            hooks: session
                .kind
                .takes_hooks()
                .then(|| session.clone() as Arc<dyn swarmd_spawner::operator::SpawnHook>),
            senior: session
                .connected()
                .then(|| session.clone() as Arc<dyn swarmd_spawner::operator::SeniorBridge>),
            spawn_channel: Some(session.clone()),
        }
    }
}

impl SessionDirectory for SessionRegistry {
    fn session(&self, sid: &SessionId) -> Option<LiveSession> {
        self.get(sid).map(|s| self.info(&s))
    }

    fn by_role(&self, role: &str) -> Option<LiveSession> {
        let session = {
            let maps = self.maps();
            let sid = maps.roles.get(role)?;
            maps.by_sid.get(sid).cloned()?
        };
        Some(self.info(&session))
    }

    /// Connected sessions first; among them the fewest pending requests and
    /// parked frames; then the one seen last. A disconnected session is
    /// chosen only when none is connected: its frame parks until it returns.
    fn least_loaded_main_ai(&self) -> Option<LiveSession> {
        let chosen = self
            .all()
            .into_iter()
            .filter(|s| s.kind.takes_hooks() && !s.is_closed())
            .min_by_key(|s| {
                (
                    !s.connected(),
                    s.pending_requests() + s.parked(),
                    std::cmp::Reverse(s.last_seen_ms()),
                )
            })?;
        Some(self.info(&chosen))
    }
}

fn validate_login(req: &LoginRequest) -> Result<(), SessionError> {
    if req.roles.len() > MAX_ROLES {
        return Err(SessionError::BadRequest(format!(
            "at most {MAX_ROLES} roles"
        )));
    }
    for role in &req.roles {
        let ok = !role.is_empty()
            && role.len() <= MAX_ROLE_LEN
            && role
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if !ok {
            return Err(SessionError::BadRequest(format!(
                "role `{role}` must be 1 to {MAX_ROLE_LEN} of [a-z0-9_-]"
            )));
        }
    }
    if req.description.is_some() && req.desc.is_some() {
        return Err(SessionError::BadRequest(
            "give `description` or `desc`, not both".to_owned(),
        ));
    }
    if req
        .description
        .as_ref()
        .or(req.desc.as_ref())
        .is_some_and(|d| d.len() > MAX_DESCRIPTION)
    {
        return Err(SessionError::BadRequest(format!(
            "description is longer than {MAX_DESCRIPTION} bytes"
        )));
    }
    let manifest = req.capability_manifest.as_ref().map_or(0, |m| {
        serde_json::to_vec(m).map_or(usize::MAX, |bytes| bytes.len())
    });
    if manifest > MAX_MANIFEST_BYTES {
        return Err(SessionError::BadRequest(format!(
            "capability_manifest is longer than {MAX_MANIFEST_BYTES} bytes as compact JSON"
        )));
    }
    Ok(())
}

fn dedup(mut roles: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    roles.retain(|r| seen.insert(r.clone()));
    roles
}
