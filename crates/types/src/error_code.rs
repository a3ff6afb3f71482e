//! Every machine code the daemon answers with, in one table: the `code` of
//! an HTTP error body and of a WebSocket `error` frame, its wire string and
//! its HTTP status. This crate names statuses as numbers so it stays free of
//! HTTP types; the server turns them into its own once.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares `ErrorCode` from one table of `Variant = "wire" => status`, so a
/// code cannot exist without its string and its status.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $wire:literal => $status:literal,)*) => {
        /// A machine code (docs/protocol.md, Errors, plus the WebSocket-only ones).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, in table order.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as it goes on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $wire,)*
                }
            }

            /// The HTTP status an answer with this code carries.
            pub fn http_status(self) -> u16 {
                match self {
                    $(ErrorCode::$variant => $status,)*
                }
            }
        }
    };
}

error_codes! {
    /// Malformed JSON, a missing or bad field, a bad id.
    BadRequest = "bad_request" => 400,
    /// A task's `input` does not match its agent's `input_schema`.
    InvalidInput = "invalid_input" => 400,
    /// A credential missing or refused (the body never says why).
    Unauthorized = "unauthorized" => 401,
    /// An expired token.
    TokenExpired = "token_expired" => 401,
    /// The credential's role or verbs do not allow the request.
    Forbidden = "forbidden" => 403,
    /// The credential is bound to another task.
    TaskMismatch = "task_mismatch" => 403,
    /// An unknown task, session, agent or route.
    NotFound = "not_found" => 404,
    /// A route that exists under another method.
    MethodNotAllowed = "method_not_allowed" => 405,
    /// A reply to a request the session does not wait for (WebSocket).
    UnknownRequest = "unknown_request" => 404,
    /// A write for an attempt another one replaced.
    AttemptSuperseded = "attempt_superseded" => 409,
    /// A second, different result for the attempt.
    AlreadyFinal = "already_final" => 409,
    /// A role another live session holds.
    RoleTaken = "role_taken" => 409,
    /// An idempotency key reused with a different request.
    IdempotencyConflict = "idempotency_conflict" => 409,
    /// An MCP pop of a session whose frames go to its attached WebSocket.
    SocketAttached = "socket_attached" => 409,
    /// A task's branch that cannot be applied as asked: it conflicts with
    /// the target, the target is checked out (or has uncommitted changes),
    /// or it moved meanwhile.
    BranchConflict = "branch_conflict" => 409,
    /// A flow that does not pass lint; the body lists every problem.
    InvalidFlow = "invalid_flow" => 400,
    /// A flow run that already ended (cancel, answer).
    RunTerminal = "run_terminal" => 409,
    /// No open wait of that name in the run, or several.
    WaitNotOpen = "wait_not_open" => 409,
    /// The task is over.
    TaskTerminal = "task_terminal" => 410,
    /// `continue_from` names a task that is not finished yet.
    TaskNotFinished = "task_not_finished" => 409,
    /// A worker handle past its expiry.
    HandleExpired = "handle_expired" => 410,
    /// A write to a cluster node that was declared dead: another node owns
    /// the task now, and this one refuses every write until it exits.
    NodeFenced = "node_fenced" => 410,
    /// A body over `limits.max_body_bytes`.
    PayloadTooLarge = "payload_too_large" => 413,
    /// An output past the attempt's output budget.
    OutputBudgetExceeded = "output_budget_exceeded" => 413,
    /// A body in a media type the route does not take.
    UnsupportedMediaType = "unsupported_media_type" => 415,
    /// A new MCP session past the credential's share
    /// (`mcp.max_sessions_per_credential`) or the operators' table
    /// (`mcp.max_sessions`), the answer carrying `Retry-After`; or a login
    /// past `limits.max_operator_sessions`.
    TooManySessions = "too_many_sessions" => 429,
    /// A live stream past the caller's share (`limits.streams_per_caller`)
    /// or the daemon's (`limits.max_streams`); the answer carries
    /// `Retry-After`.
    TooManyStreams = "too_many_streams" => 429,
    /// A new flow run while a node holds its most open runs
    /// (`swarmd_flow_run::MAX_OPEN_RUNS`), or its caller its share of them
    /// (`MAX_OPEN_RUNS_PER_OWNER`); one ending makes room.
    TooManyRuns = "too_many_runs" => 429,
    /// A write past the credential's rate (`limits.write_rate_per_sec`) or
    /// a login past the peer's (`limits.login_rate_per_min`); the answer
    /// carries `Retry-After`.
    RateLimited = "rate_limited" => 429,
    /// A request whose `Host` is not one the daemon answers to
    /// (`server.allowed_hosts`): the guard against DNS rebinding.
    HostNotAllowed = "host_not_allowed" => 421,
    /// A request from a browser page of a foreign origin
    /// (`server.allowed_origins`).
    OriginNotAllowed = "origin_not_allowed" => 403,
    /// A request body that did not arrive within `server.body_timeout_secs`.
    RequestTimeout = "request_timeout" => 408,
    /// A connection over `server.max_connections` or
    /// `server.max_connections_per_peer`, answered at accept and closed.
    TooManyConnections = "too_many_connections" => 503,
    /// The daemon is shutting down.
    Draining = "draining" => 503,
    /// The store is unavailable.
    NotReady = "not_ready" => 503,
    /// Frames were dropped from a full outbox (WebSocket): the daemon could
    /// not keep up, hence the status of an overloaded service.
    FramesDropped = "frames_dropped" => 503,
    /// The daemon cannot be reached: `swarmd mcp` answers a call with it
    /// when the daemon stays away longer than the call may wait.
    Unavailable = "unavailable" => 503,
    /// A cluster node cannot reach the node that holds the task live (dead,
    /// unreachable or being taken over); the answer carries `Retry-After`.
    OwnerUnavailable = "owner_unavailable" => 503,
    /// A bug: logged once with a correlation id that the answer repeats.
    Internal = "internal" => 500,
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is no machine code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code `{0}`")]
pub struct UnknownErrorCode(pub String);

impl FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == s)
            .ok_or_else(|| UnknownErrorCode(s.to_owned()))
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_code_round_trips_and_has_a_status() {
        let mut wires = HashSet::new();
        for &code in ErrorCode::ALL {
            let wire = code.as_str();
            assert!(wires.insert(wire), "{wire} appears twice");
            assert!(
                wire.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{wire} is not snake_case"
            );
            assert_eq!(wire.parse::<ErrorCode>(), Ok(code));
            assert_eq!(code.to_string(), wire);
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::from(wire));
            assert_eq!(serde_json::from_value::<ErrorCode>(json).unwrap(), code);
            let status = code.http_status();
            assert!((400..600).contains(&status), "{wire}: {status}");
        }
    }

    #[test]
    fn the_spec_table_keeps_its_strings_and_statuses() {
        let table = [
            ("bad_request", 400),
            ("invalid_input", 400),
            ("unauthorized", 401),
            ("token_expired", 401),
            ("forbidden", 403),
            ("task_mismatch", 403),
            ("not_found", 404),
            ("method_not_allowed", 405),
            ("unknown_request", 404),
            ("attempt_superseded", 409),
            ("already_final", 409),
            ("role_taken", 409),
            ("idempotency_conflict", 409),
            ("socket_attached", 409),
            ("branch_conflict", 409),
            ("invalid_flow", 400),
            ("run_terminal", 409),
            ("wait_not_open", 409),
            ("task_terminal", 410),
            ("task_not_finished", 409),
            ("handle_expired", 410),
            ("node_fenced", 410),
            ("payload_too_large", 413),
            ("output_budget_exceeded", 413),
            ("unsupported_media_type", 415),
            ("too_many_sessions", 429),
            ("too_many_runs", 429),
            ("too_many_streams", 429),
            ("rate_limited", 429),
            ("host_not_allowed", 421),
            ("origin_not_allowed", 403),
            ("request_timeout", 408),
            ("too_many_connections", 503),
            ("draining", 503),
            ("not_ready", 503),
            ("frames_dropped", 503),
            ("unavailable", 503),
            ("owner_unavailable", 503),
            ("internal", 500),
        ];
        assert_eq!(table.len(), ErrorCode::ALL.len());
        for (wire, status) in table {
            let code: ErrorCode = wire.parse().unwrap();
            assert_eq!(code.http_status(), status, "{wire}");
        }
    }

    #[test]
    fn unknown_strings_are_refused() {
        for text in ["", "Bad_Request", "bad-request", "internal ", "teapot"] {
            assert_eq!(
                text.parse::<ErrorCode>(),
                Err(UnknownErrorCode(text.to_owned()))
            );
        }
        assert!(serde_json::from_str::<ErrorCode>("\"teapot\"").is_err());
    }
}
