//! The swarmd vocabulary as plain data (docs/ARCHITECTURE.md, Code map): the
//! ids the daemon issues (`ids`), a task's statuses, policy and result
//! (`task`), a flow run's status and record (`run`), a MainAI session's
//! kind (`session`), what attempts cost (`usage`), the error codes of
//! every error body (`error_code`), the events of the event log (`event`),
//! a worker's output events (`output`) and what a cluster's nodes say to
//! each other about sessions (`cluster`).
//!
//! It has no runtime, no store and no transport, so the wire protocol and
//! any client can name what the engine names without linking the engine.
//! The engine re-exports these modules and the output store its output
//! events; the wire uses them directly. The rules that act on them
//! (transitions applied to a stored task, dispatch, storage) stay in the
//! engine.

pub mod cluster;
pub mod error_code;
pub mod event;
pub mod ids;
pub mod output;
pub mod run;
pub mod session;
pub mod task;
pub mod usage;

pub use error_code::ErrorCode;
pub use event::{Event, EventRecord};
pub use ids::{ReqId, RunId, SessionId, TaskId};
pub use output::{ContentRef, OutputEvent, OutputRecord};
pub use run::RunStatus;
pub use session::SessionKind;
pub use task::{AttemptOutcome, PolicyOverrides, TaskResult, TaskStatus};
