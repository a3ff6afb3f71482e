//! Black-box tests: the real `swarmd` binary, started on `127.0.0.1:0` with a
//! temporary state directory, driven over HTTP. One test binary (the
//! `blackbox` target of the server crate); `harness` starts and stops the
//! daemon, the other modules test one area each; `chaos` kills the daemon
//! under load and checks what survived.

#![allow(
    clippy::disallowed_methods,
    reason = "a test program passes its PATH to the daemon and reads its chaos knobs"
)]

mod blobs;
mod budget;
mod chaos;
mod children;
mod cli_streams;
mod cluster;
mod continuations;
mod daemon;
mod daily;
mod first_run;
mod flows;
mod flows_cli;
mod harness;
mod hostile;
mod http_api;
mod input_schema;
mod lifecycle;
mod limits;
mod logs;
mod mcp;
mod mse;
mod operator_worktrees;
mod outcome;
mod output_spill;
mod pools;
mod postgres;
mod postgres_secrets;
mod recovery;
mod routing;
mod security;
mod sse;
mod tools;
mod ui;
mod upstream;
mod usage;
mod worktree_bootstrap;
mod worktrees;
mod ws_flow;
