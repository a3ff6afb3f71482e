//! SSE event ids that name one life of one MCP session (docs/mcp.md,
//! Sessions across a restart): rmcp's session manager, with every event id
//! it mints prefixed by a tag of the session's current life.
//!
//! rmcp numbers a session's streams and their events from 0 in each session
//! worker, so a session restored after a restart (or after it was put away
//! idle) mints the ids its previous life minted, and an old `Last-Event-ID`
//! would resume a stream of the new life. Here each life of a session gets a
//! tag of its own (a value drawn once per daemon start, then a count of the
//! lives begun since), and an event id is `<tag>-<rmcp's id>`. A resume
//! whose id carries the session's current tag is rmcp's; one of a request's
//! stream from another life fails, and the route answers it `404` as a
//! stream that cannot be resumed; one of the session's own stream (`GET`
//! without a request, whose events name no request) from another life, or
//! of rmcp's untagged priming event, opens that stream afresh, so nothing
//! of another life is ever replayed.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId,
};

/// Between an event id's tag and rmcp's own id (which holds digits and `/`).
const SEPARATOR: char = '-';

/// rmcp's session manager, its event ids tagged with the session's life.
#[derive(Debug)]
pub(super) struct TaggedSessions {
    local: LocalSessionManager,
    /// Drawn once for this manager (one per daemon start).
    epoch: u64,
    /// The lives begun so far.
    lives: AtomicU64,
    /// The tag of each open session's current life.
    tags: Mutex<HashMap<SessionId, Arc<str>>>,
}

impl TaggedSessions {
    pub(super) fn new() -> TaggedSessions {
        TaggedSessions {
            local: LocalSessionManager::default(),
            epoch: random_epoch(),
            lives: AtomicU64::new(0),
            tags: Mutex::new(HashMap::new()),
        }
    }

    /// rmcp's manager, whose table lists the open sessions.
    pub(super) fn local(&self) -> &LocalSessionManager {
        &self.local
    }

    fn tags(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<str>>> {
        self.tags.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Begins a life of session `id` with a tag no other life has had.
    fn begin(&self, id: &SessionId) -> Arc<str> {
        let life = self.lives.fetch_add(1, Ordering::Relaxed);
        let tag: Arc<str> = Arc::from(format!("{:016x}.{life:x}", self.epoch));
        self.tags().insert(id.clone(), tag.clone());
        tag
    }

    /// Drops the tags of sessions rmcp closed on its own (an idle session's
    /// keep-alive ran out), so the table holds open sessions only.
    async fn forget_closed(&self) {
        let open = self.local.sessions.read().await;
        self.tags().retain(|id, _| open.contains_key(id));
    }

    /// The tag of session `id`'s current life (begun here when a request
    /// reaches a session before its life was recorded).
    fn tag(&self, id: &SessionId) -> Arc<str> {
        if let Some(tag) = self.tags().get(id) {
            return tag.clone();
        }
        self.begin(id)
    }
}

/// A value no earlier start of the daemon drew, in practice: the process's
/// randomly keyed hasher over the time and the process id.
fn random_epoch() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// `stream` with each event id prefixed by `tag`.
fn tagged(
    stream: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
    tag: Arc<str>,
) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
    stream.map(move |mut event| {
        if let Some(id) = event.event_id.take() {
            event.event_id = Some(format!("{tag}{SEPARATOR}{id}"));
        }
        event
    })
}

/// What a `Last-Event-ID` names for a session whose life is tagged `tag`.
#[derive(Debug, PartialEq, Eq)]
enum Named<'a> {
    /// An event of this life: rmcp's own id.
    Ours(&'a str),
    /// An event of a request's stream of another life.
    OtherRequest,
    /// An event of the session's own stream of another life, or rmcp's
    /// untagged priming event.
    SessionStream,
}

fn named<'a>(last_event_id: &'a str, tag: &str) -> Named<'a> {
    if let Some(own) = last_event_id
        .strip_prefix(tag)
        .and_then(|rest| rest.strip_prefix(SEPARATOR))
    {
        return Named::Ours(own);
    }
    let own = last_event_id
        .split_once(SEPARATOR)
        .map_or(last_event_id, |(_, own)| own);
    if own.contains('/') {
        Named::OtherRequest
    } else {
        Named::SessionStream
    }
}

impl SessionManager for TaggedSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.local.create_session().await?;
        self.forget_closed().await;
        self.begin(&id);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let ending = self.tags().get(id).cloned();
        let closed = self.local.close_session(id).await;
        // A life begun meanwhile (the session restored) keeps its tag.
        let mut tags = self.tags();
        if tags.get(id) == ending.as_ref() {
            tags.remove(id);
        }
        closed
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let tag = self.tag(id);
        let stream = self.local.create_stream(id, message).await?;
        Ok(tagged(stream, tag))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let tag = self.tag(id);
        let stream = self.local.create_standalone_stream(id).await?;
        Ok(tagged(stream, tag))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let tag = self.tag(id);
        let stream = match named(&last_event_id, &tag) {
            Named::Ours(own) => {
                let resumed = self.local.resume(id, own.to_owned()).await?;
                tagged(resumed, tag).left_stream()
            }
            Named::OtherRequest => {
                tracing::debug!(session = %id, %last_event_id, "resume of another life's stream refused");
                return Err(SessionError::InvalidEventId.into());
            }
            Named::SessionStream => {
                let fresh = self.local.create_standalone_stream(id).await?;
                tagged(fresh, tag).right_stream()
            }
        };
        Ok(stream)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let outcome = self.local.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            self.forget_closed().await;
            self.begin(&id);
        }
        Ok(outcome)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.local.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_of_this_life_is_rmcps_and_another_lifes_is_told_apart() {
        let tag = "00000000000000ab.3";
        assert_eq!(named("00000000000000ab.3-2/0", tag), Named::Ours("2/0"));
        assert_eq!(named("00000000000000ab.3-4", tag), Named::Ours("4"));
        for other in ["00000000000000ab.2-2/0", "00000000000000cd.3-2/0", "2/0"] {
            assert_eq!(named(other, tag), Named::OtherRequest, "{other}");
        }
        for stream in ["0", "00000000000000ab.2-5", "00000000000000ab.31-5"] {
            assert_eq!(named(stream, tag), Named::SessionStream, "{stream}");
        }
    }

    #[tokio::test]
    async fn every_life_of_a_session_has_a_tag_of_its_own() {
        let sessions = TaggedSessions::new();
        let id: SessionId = Arc::from("s-1");
        let first = sessions.begin(&id);
        assert_eq!(sessions.tag(&id), first);
        let second = sessions.begin(&id);
        assert_ne!(first, second);
        assert!(!second.contains(SEPARATOR) && !second.contains('/'));
        let other = TaggedSessions::new();
        assert_ne!(other.begin(&id), first, "another start draws another epoch");
        sessions.close_session(&id).await.unwrap();
        assert!(sessions.tags().get(&id).is_none());
    }

    #[tokio::test]
    async fn a_session_rmcp_closed_itself_loses_its_tag_at_the_next_creation() {
        let sessions = TaggedSessions::new();
        let (open, _transport) = sessions.create_session().await.unwrap();
        let gone: SessionId = Arc::from("closed-by-rmcp");
        sessions.begin(&gone);
        let (newer, _transport) = sessions.create_session().await.unwrap();
        let tags = sessions.tags();
        assert!(tags.get(&gone).is_none());
        assert!(tags.contains_key(&open) && tags.contains_key(&newer));
    }
}
