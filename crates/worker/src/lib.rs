//! `swarmd-worker`: what runs SubAgents on a machine of its own, over
//! `swarmd-client`'s HTTP calls: the worker wrapper (`swarmd worker -- CMD`,
//! `wrapper`), which turns any command into the SubAgent of one attempt,
//! and worker pools (`swarmd worker pool`, `pool`), which claim a remote
//! agent's attempts and run them as the daemon runs a process agent.
//!
//! Both run children through the spawner's process runner and worktrees,
//! so this crate links the spawner (and through it the engine); a program
//! that only calls the daemon's API takes `swarmd-client` alone.

mod command;
pub mod pool;
mod wrapper;

pub use wrapper::{WorkerOptions, run_worker};

#[cfg(test)]
mod tests;
