//! A registry built in a cluster, driven through a stand-in of the
//! `SessionPeers` it is given: a login locks its roles across nodes until
//! its session is stored, and a role another node's session holds is taken
//! only once that node has ended its session; a home that keeps its
//! session says so, and the login is refused at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use swarmd_engine::clock::{Clock, SystemClock};
use swarmd_engine::ids::SessionId;
use swarmd_engine::store::{HomedSession, SessionKind, SessionRecord};
use swarmd_output_store::StoreError;
use swarmd_types::cluster::{Homed, Mail, NewMail, NodeId};

use super::mail::{KEPT, RELEASE};
use super::peers::{MailWake, RoleHold, SessionPeers};
use crate::testing::{Harness, default_settings};
use crate::tests::roles;
use crate::{SessionError, SessionRegistry};

const HERE: NodeId = uuid::Uuid::from_u128(1);
const THERE: NodeId = uuid::Uuid::from_u128(2);

/// The shared rows as one other node keeps them: its stored sessions, the
/// mail sent to it, and what was locked and released, in order.
#[derive(Debug, Default)]
struct Rows {
    stored: Mutex<Vec<HomedSession>>,
    /// Whether the other node ends its session when asked to release it.
    ends_when_asked: bool,
    sent: Mutex<Vec<NewMail>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Rows {
    fn note(&self, line: String) {
        self.log.lock().unwrap().push(line);
    }

    fn find(&self, pick: impl Fn(&HomedSession) -> bool) -> Vec<HomedSession> {
        self.stored
            .lock()
            .unwrap()
            .iter()
            .filter(|s| pick(s))
            .cloned()
            .collect()
    }
}

#[async_trait]
impl SessionPeers for Rows {
    async fn session_by_sid(&self, sid: SessionId) -> Result<Option<HomedSession>, StoreError> {
        Ok(self.find(|s| s.record.sid == sid).pop())
    }

    async fn session_by_digest(&self, digest: &str) -> Result<Option<HomedSession>, StoreError> {
        self.note("by digest".into());
        Ok(self.find(|s| s.record.token_digest == digest).pop())
    }

    async fn sessions_created_after(&self, after_ms: i64) -> Result<Vec<HomedSession>, StoreError> {
        Ok(self.find(|s| i64::try_from(s.record.created_ms).unwrap() > after_ms))
    }

    async fn sessions_with_roles(&self, roles: &[String]) -> Result<Vec<HomedSession>, StoreError> {
        self.note(format!("holders of {}", roles.join(",")));
        Ok(self.find(|s| s.record.roles.iter().any(|r| roles.contains(r))))
    }

    async fn session_homes(&self) -> Result<Vec<(SessionId, Option<NodeId>)>, StoreError> {
        Ok(self
            .find(|_| true)
            .into_iter()
            .map(|s| (s.record.sid, s.home))
            .collect())
    }

    async fn adopt_orphan_sessions(&self, _node: NodeId) -> Result<Vec<Homed>, StoreError> {
        Ok(Vec::new())
    }

    async fn move_session_home(
        &self,
        sid: SessionId,
        node: NodeId,
    ) -> Result<Option<Homed>, StoreError> {
        let mut stored = self.stored.lock().unwrap();
        Ok(stored.iter_mut().find(|s| s.record.sid == sid).map(|s| {
            let previous = s.home.replace(node);
            Homed {
                sid,
                previous,
                done_through: s.record.done_through,
            }
        }))
    }

    async fn send_mail(&self, mail: &[NewMail]) -> Result<u64, StoreError> {
        for one in mail {
            self.note(format!("mail {} to {:?}", one.kind, one.to_node));
            if one.kind == RELEASE && self.ends_when_asked {
                self.stored
                    .lock()
                    .unwrap()
                    .retain(|s| s.record.sid != one.sid);
            }
        }
        self.sent.lock().unwrap().extend_from_slice(mail);
        Ok(mail.len() as u64)
    }

    async fn mail_for(
        &self,
        _node: NodeId,
        _after: i64,
        _limit: i64,
    ) -> Result<Vec<Mail>, StoreError> {
        Ok(Vec::new())
    }

    async fn delete_mail(&self, _ids: &[i64]) -> Result<(), StoreError> {
        Ok(())
    }

    async fn withdraw_mail(&self, _sid: SessionId, _req_id: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    async fn listen_mail(&self) -> Result<Box<dyn MailWake>, StoreError> {
        Err(StoreError::Busy("no wake-ups in this test".into()))
    }

    async fn lock_roles(&self, roles: &[String]) -> Result<Box<dyn RoleHold>, StoreError> {
        self.note(format!("lock {}", roles.join(",")));
        Ok(Box::new(Hold(self.log.clone())))
    }
}

struct Hold(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl RoleHold for Hold {
    async fn release(self: Box<Self>) {
        self.0.lock().unwrap().push("release".into());
    }
}

/// A session of node `THERE` holding `role`, active a moment ago.
fn held_there(role: &str) -> HomedSession {
    let now = SystemClock.now_ms();
    HomedSession {
        record: SessionRecord {
            sid: SessionId::new(),
            token_digest: "ab".repeat(32),
            roles: vec![role.to_owned()],
            kind: SessionKind::MainAi,
            description: None,
            manifest: None,
            created_ms: now,
            last_seen_ms: now,
            done_through: None,
            dialect: None,
        },
        home: Some(THERE),
    }
}

fn node_here(rows: Arc<Rows>) -> Harness {
    let clock = Arc::new(SystemClock);
    let registry = SessionRegistry::in_cluster(default_settings(), clock.clone(), rows, HERE);
    Harness::around(registry, clock, "http://127.0.0.1:9")
}

#[tokio::test]
async fn a_login_locks_its_roles_across_nodes_until_its_session_is_stored() {
    let rows = Arc::new(Rows::default());
    let harness = node_here(rows.clone());
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    assert_eq!(login.roles, ["main-ai"]);
    assert_eq!(
        *rows.log.lock().unwrap(),
        ["lock main-ai", "holders of main-ai", "release"]
    );
    // A login without roles neither locks nor reads anything.
    rows.log.lock().unwrap().clear();
    harness
        .registry
        .login(&harness.engine, roles(&[]))
        .await
        .unwrap();
    assert!(rows.log.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_role_held_on_another_node_is_taken_once_that_node_ends_its_session() {
    let rows = Arc::new(Rows {
        ends_when_asked: true,
        ..Rows::default()
    });
    let holder = held_there("main-ai");
    rows.stored.lock().unwrap().push(holder.clone());
    let harness = node_here(rows.clone());
    let login = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap();
    assert_eq!(login.roles, ["main-ai"]);
    let sent = rows.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].kind, RELEASE);
    assert_eq!(sent[0].sid, holder.record.sid);
    assert_eq!(sent[0].to_node, Some(THERE));
    assert_eq!(sent[0].reply_to, Some(HERE));
    assert!(harness.registry.get(&holder.record.sid).is_none());
    assert_eq!(rows.log.lock().unwrap().last().unwrap(), "release");
}

#[tokio::test(start_paused = true)]
async fn a_role_held_on_a_node_that_keeps_its_session_is_refused_after_the_wait() {
    let rows = Arc::new(Rows::default());
    rows.stored.lock().unwrap().push(held_there("main-ai"));
    let harness = node_here(rows.clone());
    let started = tokio::time::Instant::now();
    let refused = harness
        .registry
        .login(&harness.engine, roles(&["main-ai"]))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SessionError::RoleTaken(ref r) if r == "main-ai"),
        "{refused}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited for the home's answer"
    );
    // The lock is released on a refusal too.
    assert_eq!(rows.log.lock().unwrap().last().unwrap(), "release");
}

#[tokio::test(start_paused = true)]
async fn a_role_held_live_on_another_node_is_refused_as_soon_as_its_home_says_so() {
    let rows = Arc::new(Rows::default());
    let holder = held_there("main-ai");
    rows.stored.lock().unwrap().push(holder.clone());
    let harness = Arc::new(node_here(rows.clone()));
    let started = tokio::time::Instant::now();
    let login = {
        let harness = harness.clone();
        tokio::spawn(async move {
            harness
                .registry
                .login(&harness.engine, roles(&["main-ai"]))
                .await
        })
    };
    while rows.sent.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The home's answer, as its mail pump hands it over.
    let kept = Mail {
        id: 1,
        sid: holder.record.sid,
        to_node: Some(HERE),
        reply_to: None,
        kind: KEPT.to_owned(),
        req_id: None,
        body: "{}".to_owned(),
    };
    assert!(
        harness
            .registry
            .handle_addressed(&harness.engine, &kept)
            .await
    );
    let refused = login.await.unwrap().unwrap_err();
    assert!(
        matches!(refused, SessionError::RoleTaken(ref r) if r == "main-ai"),
        "{refused}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "refused without waiting out the release: {:?}",
        started.elapsed()
    );
    assert_eq!(rows.log.lock().unwrap().last().unwrap(), "release");
}

#[tokio::test(start_paused = true)]
async fn a_token_found_to_be_nobodys_is_not_looked_up_again_at_once() {
    let rows = Arc::new(Rows::default());
    let harness = node_here(rows.clone());
    let made_up = swarmd_engine::auth::SessionSecret::generate();
    for _ in 0..3 {
        harness.registry.load_bearer(made_up.expose()).await;
    }
    assert_eq!(*rows.log.lock().unwrap(), ["by digest"]);
    // Two seconds on it is looked up again: it may be a session by then.
    tokio::time::advance(Duration::from_secs(2)).await;
    harness.registry.load_bearer(made_up.expose()).await;
    assert_eq!(*rows.log.lock().unwrap(), ["by digest", "by digest"]);
}

#[tokio::test]
async fn an_answer_filled_after_a_move_is_handed_over_to_the_new_home() {
    let rows = Arc::new(Rows::default());
    let harness = node_here(rows.clone());
    let registry = &harness.registry;
    let login = registry.login(&harness.engine, roles(&[])).await.unwrap();
    let session = registry.get(&login.sid).unwrap();

    // Frames before and after a `spawn_task`'s slot; the session moves
    // away while the slot is open.
    let text = |t: &str| crate::Outgoing::Text {
        class: crate::FrameClass::Notice,
        text: t.into(),
    };
    session.outbox.push(text("before")).unwrap();
    let slot = session.outbox.reserve();
    session.outbox.push(text("after")).unwrap();
    registry.moved_away(&session, THERE);
    assert_eq!(
        session.outbox.len(),
        1,
        "what follows the slot waits for it"
    );
    slot.fill(text("task_accepted")).unwrap();
    registry.hand_over_stranded(&session).await;
    assert!(registry.flush_mail(Duration::from_secs(5)).await);

    assert_eq!(session.outbox.len(), 0, "nothing left waiting here");
    let sent = rows.sent.lock().unwrap();
    let handed: Vec<&str> = sent
        .iter()
        .filter(|m| m.sid == login.sid && m.kind == super::mail::TEXT)
        .map(|m| m.body.as_str())
        .collect();
    let position = |t: &str| {
        handed
            .iter()
            .position(|b| b.contains(&format!("\"{t}\"")))
            .unwrap()
    };
    assert!(
        position("before") < position("task_accepted")
            && position("task_accepted") < position("after"),
        "the slot's order is kept: {handed:?}"
    );
}
