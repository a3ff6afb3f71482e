//! Router-level tests of the WebSocket protocol and the operator routes: a
//! real axum server on `127.0.0.1:0` and a tokio-tungstenite client.

mod flows;
mod operators;
mod protocol;
mod run_done;
pub(crate) mod support;
