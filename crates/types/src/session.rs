//! What kind of client an operator session is (docs/protocol.md, Operator
//! sessions): the one session fact a client names when it logs in.

use serde::{Deserialize, Serialize};

/// What kind of client an operator session is (docs/protocol.md, Operator sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    #[default]
    MainAi,
    Automate,
    Composite,
}

impl SessionKind {
    /// Sessions that receive `hook_before` / `hook_after` (the `main_ai` layer).
    pub fn takes_hooks(self) -> bool {
        matches!(self, SessionKind::MainAi | SessionKind::Composite)
    }
}
