//! Flows as data: the IR a flow is declared in, its published JSON Schema,
//! the content hash a run is pinned to, the expressions that move values
//! between steps, and the lint that reports every problem of a flow at once.
//!
//! This crate knows no engine, store or transport; the daemon validates and
//! stores flows through it and runs them as ordinary tasks.

pub mod expr;
pub mod hash;
pub mod import;
pub mod ir;
pub mod lint;
pub mod mismatch;
pub mod path;
pub mod run;
pub mod template;

pub use expr::{Expr, ExprError};
pub use hash::content_hash;
pub use ir::{Flow, JoinMode, Limits, Node, Retry};
pub use lint::{Problem, lint};
