//! The HTTP side of the cluster (docs/decisions.md, Cluster): the
//! middleware that serves a request here, forwards it to the node that
//! holds its task or queue, or answers `503` (`forward`), and the call of
//! an owner's route for an MCP tool (`call`). Where a request goes is
//! decided by `swarmd-cluster` (`route`, `Forwarder`), which also runs
//! the node itself.

mod call;
mod forward;

pub use call::{PeerCall, call_owner};
pub use forward::forward;
pub use swarmd_cluster::{Forwarder, Subject, worker_subject};

#[cfg(test)]
mod tests {
    #[test]
    fn the_pool_and_the_node_name_one_header() {
        assert_eq!(
            swarmd_cluster::NODE_HEADER,
            swarmd_client::wire::NODE_HEADER
        );
    }
}
