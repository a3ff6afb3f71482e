//! The mail pump (docs/decisions.md, Cluster): reads this node's mail in
//! `id` order whenever a `NOTIFY swarmd_mail` arrives, a session moves
//! here, and at least every `POLL` (a notification is lossy). Mail for a
//! session homed here goes into its outbox like a local frame (a request's
//! waiter sends the reply back as mail) and its row goes once the outbox
//! acknowledged the frame: at least once, in order. Replies complete the
//! waiter of this node's copy of the session; a `moved` hands the
//! session over to its new home. Every `SESSION_SYNC` it also keeps copies
//! of the sessions other nodes logged in, so layers here find them by role.

use std::sync::Arc;
use std::time::Duration;

use swarmd_engine::Engine;
use swarmd_engine::ids::AttemptId;
use swarmd_spawner::operator::{HookRequest, SpawnChannel, SpawnHook};
use swarmd_types::cluster::{Mail, NodeId};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::mail::{self, AskBody, CancelBody, HookAfterBody, TextBody};
use super::peers::MailWake;
use super::postbox::{Postbox, SessionCluster};
use crate::SessionRegistry;
use crate::frames::ServerFrame;
use crate::outbox::{Outgoing, ParkedSpawn};
use crate::pending::{Expects, Relayed, Waiter};
use crate::session::Session;

/// The longest the pump goes without reading its mail.
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// How often a node looks for sessions other nodes logged in.
const SESSION_SYNC: Duration = Duration::from_secs(1);
/// Mail read per query; a full page is followed by the next at once.
const PAGE: i64 = 256;

impl SessionRegistry {
    /// Runs the mail pump on `tasks` until `shutdown` (on a cluster only).
    pub fn start_mail_pump(
        self: &Arc<Self>,
        engine: Engine,
        shutdown: CancellationToken,
        tasks: &TaskTracker,
    ) {
        let Some(cluster) = self.cluster().cloned() else {
            return;
        };
        let registry = self.clone();
        tasks.spawn(async move {
            let mut wake: Option<Box<dyn MailWake>> = None;
            let mut poll = tokio::time::interval(POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sync = tokio::time::interval(SESSION_SYNC);
            sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                if wake.is_none() {
                    match cluster.peers.listen_mail().await {
                        Ok(listening) => wake = Some(listening),
                        Err(error) => {
                            tracing::warn!(%error, "cannot listen for session mail; polling")
                        }
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    woken = async {
                        match wake.as_mut() {
                            Some(wake) => wake.recv().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        if woken.is_none() {
                            wake = None;
                        }
                    }
                    () = cluster.wake.notified() => {}
                    _ = poll.tick() => {}
                    _ = sync.tick() => {
                        registry.sync_new_sessions().await;
                        continue;
                    }
                }
                registry.pump_mail(&engine, &cluster).await;
            }
            tracing::debug!("mail pump stopped");
        });
    }

    /// Reads and handles every piece of mail for this node, then deletes
    /// what was delivered.
    pub(crate) async fn pump_mail(&self, engine: &Engine, cluster: &SessionCluster) {
        let mut done = Vec::new();
        let mut after = 0;
        loop {
            let page = match cluster.peers.mail_for(cluster.node, after, PAGE).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, "cannot read session mail");
                    break;
                }
            };
            for mail in &page {
                if self.handle(engine, cluster, mail).await {
                    done.push(mail.id);
                }
            }
            match page.last() {
                Some(last) if page.len() as i64 == PAGE => after = last.id,
                _ => break,
            }
        }
        done.extend(cluster.settled(self));
        if let Err(error) = cluster.peers.delete_mail(&done).await {
            tracing::warn!(%error, "cannot delete delivered session mail");
        }
    }

    /// Handles one piece of mail; whether its row can go now.
    async fn handle(&self, engine: &Engine, cluster: &SessionCluster, mail: &Mail) -> bool {
        if mail.to_node.is_some() {
            return self.handle_addressed(engine, mail).await;
        }
        if cluster.is_inflight(mail.id) {
            return false;
        }
        let Some(session) = self.find(&mail.sid).await else {
            return true;
        };
        // The mailbox says this node is the session's home.
        session.set_elsewhere(None);
        // A cancelled spawn leaves the mailbox with its cancel, so a later
        // move does not send it again.
        if let (mail::CANCEL, Some(req_id)) = (mail.kind.as_str(), mail.req_id.as_deref())
            && let Err(error) = cluster.peers.withdraw_mail(session.sid, req_id).await
        {
            tracing::warn!(sid = %session.sid, %error, "cannot withdraw a cancelled spawn's mail");
        }
        match deliver(&cluster.post, cluster.node, &session, mail) {
            Some(outbox_id) => {
                cluster.track(mail.id, session.sid, outbox_id);
                false
            }
            None => true,
        }
    }

    /// Mail for this node: a reply to one of its waiters, a move, the end
    /// of a session deleted on another node, a release asked of this node
    /// as a session's home, or a home's answer that it keeps a session.
    pub(super) async fn handle_addressed(&self, engine: &Engine, mail: &Mail) -> bool {
        if mail.kind == mail::KEPT {
            if let Some(cluster) = self.cluster() {
                cluster.kept(mail.sid);
            }
            return true;
        }
        let Some(session) = self.get(&mail.sid) else {
            return true;
        };
        match mail.kind.as_str() {
            mail::REPLY => {
                let (Some(req_id), Some(reply)) =
                    (mail.req_id.as_deref(), mail::decode_reply(&mail.body))
                else {
                    tracing::warn!(sid = %mail.sid, "malformed reply mail dropped");
                    return true;
                };
                if let Err(error) = session.answer(req_id, reply) {
                    tracing::debug!(sid = %mail.sid, %error, "relayed reply completed nothing");
                }
            }
            mail::MOVED => {
                if let Some(to) = mail.reply_to {
                    self.moved_mail(&session, to).await;
                }
            }
            mail::RELEASE => self.release_if_stale(engine, &session, mail.reply_to).await,
            mail::SEEN => {
                if let Ok(seen_ms) = mail.body.parse::<u64>() {
                    session.touch(seen_ms.min(self.clock.now_ms()));
                }
            }
            mail::ENDED => {
                if self.forget(session.sid).is_some() {
                    tracing::info!(sid = %session.sid, "session deleted on another node");
                    if let Err(error) = session.end(engine, crate::CloseReason::Deleted).await {
                        tracing::warn!(sid = %session.sid, %error, "cannot end a deleted session");
                    }
                }
            }
            other => tracing::warn!(kind = other, "unknown session mail dropped"),
        }
        true
    }
}

/// Puts session mail into the outbox of its home (this node); the outbox
/// id of the frame to wait for, or `None` when nothing waits for delivery.
pub(super) fn deliver(
    post: &Postbox,
    here: NodeId,
    session: &Arc<Session>,
    mail: &Mail,
) -> Option<u64> {
    // A request this node sent itself (handed back to it by a move) keeps
    // its own waiter.
    let relayed = |expects| {
        mail.reply_to.filter(|to| *to != here).map(|reply_to| {
            Waiter::Relay(Relayed {
                expects,
                sid: session.sid,
                reply_to,
                post: post.clone(),
            })
        })
    };
    let request = |req_id: &str, expects, frame: Outgoing| {
        if let Some(waiter) = relayed(expects) {
            session.pending.insert(req_id.to_owned(), waiter);
        }
        match session.outbox.push(frame) {
            Ok(id) => Some(id),
            Err(full) => {
                session.pending.remove(req_id);
                tracing::warn!(sid = %session.sid, error = %full, "relayed request dropped");
                None
            }
        }
    };
    let req_id = mail.req_id.as_deref();
    match (mail.kind.as_str(), req_id) {
        (mail::SPAWN, Some(req_id)) => {
            let frame = mail::decode_spawn(&mail.body)?;
            let spawn = Outgoing::Spawn(Box::new(ParkedSpawn {
                req_id: req_id.to_owned(),
                frame,
            }));
            request(req_id, Expects::Spawn, spawn)
        }
        (mail::ASK, Some(req_id)) => {
            let body: AskBody = mail::decode(&mail.body)?;
            let frame = session.request_text(&ServerFrame::Ask {
                req_id: req_id.to_owned(),
                task_id: body.task_id,
                question: body.question,
            });
            request(req_id, Expects::Answer, frame)
        }
        (mail::HOOK_BEFORE, Some(req_id)) => {
            let body: HookRequest = mail::decode(&mail.body)?;
            let frame = session.request_text(&ServerFrame::HookBefore {
                req_id: req_id.to_owned(),
                task_id: body.task_id,
                agent: body.agent,
                attempt: body.attempt,
            });
            request(req_id, Expects::Hook, frame)
        }
        (mail::WAITER, Some(req_id)) => {
            // Its reply may have come already, on this node's socket.
            let expects: Expects = mail::decode(&mail.body)?;
            session
                .pending
                .insert_or_complete(req_id.to_owned(), relayed(expects));
            None
        }
        (mail::HOOK_AFTER, _) => {
            let body: HookAfterBody = mail::decode(&mail.body)?;
            SpawnHook::after(&**session, body.req, body.result);
            None
        }
        (mail::CANCEL, Some(req_id)) => {
            let body: CancelBody = mail::decode(&mail.body)?;
            let attempt = AttemptId {
                task: body.task_id,
                n: body.attempt,
            };
            SpawnChannel::cancel(&**session, req_id, attempt, &body.reason);
            None
        }
        (mail::TEXT, _) => {
            let body: TextBody = mail::decode(&mail.body)?;
            session
                .outbox
                .push(Outgoing::Text {
                    class: body.class.into(),
                    text: body.text.into(),
                })
                .ok()
        }
        (kind, _) => {
            tracing::warn!(kind, "unknown session mail dropped");
            None
        }
    }
}
