//! The sessions' half of a cluster (docs/decisions.md, Cluster): every
//! session has a home node that alone delivers its frames, expires it and
//! writes its record; other nodes hold copies found in PostgreSQL and reach
//! it through the session mailbox. What this node knows as a node and its
//! outgoing mail (`postbox`), a session's home and its moves (`homes`), the
//! mail's bodies (`mail`) and the pump that reads it (`mail_pump`), a
//! session homed elsewhere as the layers see it (`relay`), role names
//! across nodes (`release`), and the guard on looking tokens up (`lookups`). All of it reaches the other nodes through one
//! interface, `SessionPeers` (`peers`), which the registry is given at
//! construction (`SessionRegistry::in_cluster`); `swarmd-cluster`, which
//! also runs a node's own life among its peers (lease, fencing, takeover,
//! the event pump, forwarding), implements it on PostgreSQL.

pub(crate) mod homes;
pub(crate) mod lookups;
pub(crate) mod mail;
pub(crate) mod mail_pump;
pub(crate) mod peers;
pub(crate) mod postbox;
pub(crate) mod relay;
pub(crate) mod release;

#[cfg(test)]
mod homes_tests;
#[cfg(test)]
mod peers_tests;
