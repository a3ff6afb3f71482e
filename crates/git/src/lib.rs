//! The git work of an attempt (docs/branches.md): a worktree of its own on
//! a branch of its own (`worktree`: creation, the bootstrap's copies,
//! links, ports and setup command, the artifact and the branch an attempt
//! leaves, recovery after a crash, continuations), the branches those
//! attempts leave listed, diffed and applied (`worktree::branches`), and
//! the merge agent that joins several of them into a new one (`merge`).
//!
//! Every git command runs as a child with the daemon's environment
//! snapshot (`HostEnv`); nothing here holds global state. The spawners
//! that run attempts in worktrees, and the merge agent's place in a
//! stack, are the spawner crate's.

mod host_env;
pub mod merge;
pub mod worktree;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use host_env::HostEnv;
