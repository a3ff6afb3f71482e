//! What the nodes of a cluster say to each other about sessions
//! (docs/decisions.md, Cluster): a node's id, the mail between a session's
//! home and the other nodes, and a session's move to a new home. The
//! PostgreSQL crate stores these rows; the sessions read and write them
//! through the interface they are given at construction.

use uuid::Uuid;

use crate::ids::SessionId;

/// A node's stable id (`<state_dir>/node_id` or `cluster.node_id`).
pub type NodeId = Uuid;

/// One piece of mail to send. `Debug` leaves the body out: a relayed
/// `spawn` carries a worker credential.
#[derive(Clone, PartialEq, Eq)]
pub struct NewMail {
    pub sid: SessionId,
    /// The node it is for; `None`: the session's home, whichever node that is when it is read.
    pub to_node: Option<NodeId>,
    /// Where the reply to a request goes.
    pub reply_to: Option<NodeId>,
    pub kind: String,
    pub req_id: Option<String>,
    pub body: String,
}

/// One piece of mail read. `Debug` leaves the body out, as `NewMail`'s.
#[derive(Clone, PartialEq, Eq)]
pub struct Mail {
    pub id: i64,
    pub sid: SessionId,
    /// `None`: for the session's home (this node, when read).
    pub to_node: Option<NodeId>,
    pub reply_to: Option<NodeId>,
    pub kind: String,
    pub req_id: Option<String>,
    pub body: String,
}

impl std::fmt::Debug for NewMail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewMail")
            .field("sid", &self.sid)
            .field("to_node", &self.to_node)
            .field("reply_to", &self.reply_to)
            .field("kind", &self.kind)
            .field("req_id", &self.req_id)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .finish()
    }
}

impl std::fmt::Debug for Mail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mail")
            .field("id", &self.id)
            .field("sid", &self.sid)
            .field("to_node", &self.to_node)
            .field("reply_to", &self.reply_to)
            .field("kind", &self.kind)
            .field("req_id", &self.req_id)
            .field("body", &format_args!("<{} bytes>", self.body.len()))
            .finish()
    }
}

/// A session just homed on a node: where it was homed before, and the
/// `task_done` watermark its stored record holds, from which the new home
/// routes its events again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Homed {
    pub sid: SessionId,
    pub previous: Option<NodeId>,
    /// `None` for a record written without one.
    pub done_through: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_is_debugged_without_its_body() {
        let new = NewMail {
            sid: SessionId::new(),
            to_node: None,
            reply_to: None,
            kind: "spawn".into(),
            req_id: Some("r1".into()),
            body: "swc1.secret".into(),
        };
        let shown = format!("{new:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("<11 bytes>"), "{shown}");
        let read = Mail {
            id: 1,
            sid: new.sid,
            to_node: None,
            reply_to: None,
            kind: new.kind.clone(),
            req_id: None,
            body: new.body.clone(),
        };
        let shown = format!("{read:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }
}
