//! Test support: real git repositories (`git`), for this crate's tests
//! and, through the `testing` feature, the spawner's.

pub mod git;
