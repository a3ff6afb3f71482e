//! Roles, verbs and the gate (docs/security.md, Roles and the gate): which role may perform which
//! verb.
//!
//! The gate is one constant table, `GATE`, indexed by verb then role. A request
//! passes only if its verb is among the verbs its credential carries **and** the
//! table allows that verb for the credential's role. Per-agent refinements (a
//! worker's `spawn_task` needs `allow_subtasks = true`) are checked by the
//! engine on top of the table, never inside it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Who a credential speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Operator,
    Worker,
    Observer,
    Senior,
    /// A worker pool on another machine: claims the attempts of the agents
    /// its token names and renews their leases (docs/protocol.md, Worker pools).
    WorkerPool,
}

/// What a request does. Every route and WebSocket frame maps to one verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    ManageOperators,
    SpawnTask,
    ReadTask,
    ReadOutput,
    Subscribe,
    CancelTask,
    Answer,
    FetchPrompt,
    EmitOutput,
    PostResult,
    Heartbeat,
    ClaimAttempts,
    RenewLeases,
}

/// A gate refusal, or a role/verb name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("the credential does not carry the verb `{verb}`")]
    VerbNotGranted { verb: Verb },
    #[error("role `{role}` may not `{verb}`")]
    RoleNotAllowed { role: Role, verb: Verb },
    #[error(
        "unknown role `{given}`, expected one of: admin, operator, worker, observer, senior, worker_pool"
    )]
    UnknownRole { given: String },
    #[error(
        "unknown verb `{given}`, expected one of: manage_operators, spawn_task, read_task, \
         read_output, subscribe, cancel_task, answer, fetch_prompt, emit_output, post_result, \
         heartbeat, claim_attempts, renew_leases"
    )]
    UnknownVerb { given: String },
}

/// The verbs of every worker token: a worker reads its prompt, streams output,
/// posts its result and keeps its lease alive, nothing else.
pub const WORKER_LEAF_VERBS: [Verb; 4] = [
    Verb::FetchPrompt,
    Verb::EmitOutput,
    Verb::PostResult,
    Verb::Heartbeat,
];

const Y: bool = true;
const N: bool = false;

/// The gate, one row per verb in declaration order, columns in `Role::ALL`
/// order: admin, operator, worker, observer, senior, worker_pool.
#[rustfmt::skip]
const GATE: [(Verb, [bool; Role::COUNT]); Verb::COUNT] = [
    //                        admin operator worker observer senior worker_pool
    (Verb::ManageOperators,  [Y,    N,       N,     N,       N,     N]),
    (Verb::SpawnTask,        [Y,    Y,       Y,     N,       N,     N]),
    (Verb::ReadTask,         [Y,    Y,       N,     Y,       Y,     N]),
    (Verb::ReadOutput,       [Y,    Y,       N,     Y,       Y,     N]),
    (Verb::Subscribe,        [Y,    Y,       N,     Y,       Y,     N]),
    (Verb::CancelTask,       [Y,    Y,       N,     N,       N,     N]),
    (Verb::Answer,           [Y,    Y,       N,     N,       Y,     N]),
    (Verb::FetchPrompt,      [N,    N,       Y,     N,       N,     N]),
    (Verb::EmitOutput,       [N,    N,       Y,     N,       N,     N]),
    (Verb::PostResult,       [N,    N,       Y,     N,       N,     N]),
    (Verb::Heartbeat,        [N,    N,       Y,     N,       N,     N]),
    (Verb::ClaimAttempts,    [N,    N,       N,     N,       N,     Y]),
    (Verb::RenewLeases,      [N,    N,       N,     N,       N,     Y]),
];

// Rows must be in `Verb` discriminant order, so that `GATE[verb as usize]` is
// that verb's row.
const _: () = {
    let mut i = 0;
    while i < Verb::COUNT {
        assert!(GATE[i].0 as usize == i);
        i += 1;
    }
};

/// Whether the table lets `role` perform `verb`.
pub fn allowed(role: Role, verb: Verb) -> bool {
    GATE[verb as usize].1[role as usize]
}

/// The verbs the table allows for `role`, in declaration order.
pub fn verbs_for(role: Role) -> impl Iterator<Item = Verb> {
    Verb::ALL
        .into_iter()
        .filter(move |verb| allowed(role, *verb))
}

/// The gate check, verification step 6 (docs/security.md): `verb` must be among `granted` (the
/// verbs the credential carries) and allowed for `role`.
///
/// Errors: `VerbNotGranted` or `RoleNotAllowed`, never the parse variants.
pub fn check(role: Role, granted: &[Verb], verb: Verb) -> Result<(), GateError> {
    if !granted.contains(&verb) {
        return Err(GateError::VerbNotGranted { verb });
    }
    if !allowed(role, verb) {
        return Err(GateError::RoleNotAllowed { role, verb });
    }
    Ok(())
}

impl Role {
    pub const COUNT: usize = 6;
    /// Every role, in table column order.
    pub const ALL: [Role; Role::COUNT] = [
        Role::Admin,
        Role::Operator,
        Role::Worker,
        Role::Observer,
        Role::Senior,
        Role::WorkerPool,
    ];

    /// The wire name (snake_case).
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Worker => "worker",
            Role::Observer => "observer",
            Role::Senior => "senior",
            Role::WorkerPool => "worker_pool",
        }
    }
}

impl Verb {
    pub const COUNT: usize = 13;
    /// Every verb, in table row order.
    pub const ALL: [Verb; Verb::COUNT] = [
        Verb::ManageOperators,
        Verb::SpawnTask,
        Verb::ReadTask,
        Verb::ReadOutput,
        Verb::Subscribe,
        Verb::CancelTask,
        Verb::Answer,
        Verb::FetchPrompt,
        Verb::EmitOutput,
        Verb::PostResult,
        Verb::Heartbeat,
        Verb::ClaimAttempts,
        Verb::RenewLeases,
    ];

    /// The wire name (snake_case).
    pub const fn as_str(self) -> &'static str {
        match self {
            Verb::ManageOperators => "manage_operators",
            Verb::SpawnTask => "spawn_task",
            Verb::ReadTask => "read_task",
            Verb::ReadOutput => "read_output",
            Verb::Subscribe => "subscribe",
            Verb::CancelTask => "cancel_task",
            Verb::Answer => "answer",
            Verb::FetchPrompt => "fetch_prompt",
            Verb::EmitOutput => "emit_output",
            Verb::PostResult => "post_result",
            Verb::Heartbeat => "heartbeat",
            Verb::ClaimAttempts => "claim_attempts",
            Verb::RenewLeases => "renew_leases",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = GateError;

    fn from_str(s: &str) -> Result<Self, GateError> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| GateError::UnknownRole {
                given: s.to_owned(),
            })
    }
}

impl FromStr for Verb {
    type Err = GateError;

    fn from_str(s: &str) -> Result<Self, GateError> {
        Verb::ALL
            .into_iter()
            .find(|verb| verb.as_str() == s)
            .ok_or_else(|| GateError::UnknownVerb {
                given: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate of docs/security.md, written out by hand: one line per verb, `x` where allowed.
    const SPEC_MATRIX: &str = "\
verb             admin operator worker observer senior worker_pool
manage_operators x     .        .      .        .      .
spawn_task       x     x        x      .        .      .
read_task        x     x        .      x        x      .
read_output      x     x        .      x        x      .
subscribe        x     x        .      x        x      .
cancel_task      x     x        .      .        .      .
answer           x     x        .      .        x      .
fetch_prompt     .     .        x      .        .      .
emit_output      .     .        x      .        .      .
post_result      .     .        x      .        .      .
heartbeat        .     .        x      .        .      .
claim_attempts   .     .        .      .        .      x
renew_leases     .     .        .      .        .      x
";

    /// Renders the gate in the layout of `SPEC_MATRIX`, from `allowed` only.
    fn render_gate() -> String {
        let mut out = format!("{:<17}", "verb");
        let header: Vec<&str> = Role::ALL.iter().map(|role| role.as_str()).collect();
        out.push_str(&header.join(" "));
        out.push('\n');
        for verb in Verb::ALL {
            out.push_str(&format!("{:<17}", verb.as_str()));
            let cells: Vec<String> = Role::ALL
                .iter()
                .map(|role| {
                    let mark = if allowed(*role, verb) { "x" } else { "." };
                    format!("{mark:<width$}", width = role.as_str().len())
                })
                .collect();
            out.push_str(cells.join(" ").trim_end());
            out.push('\n');
        }
        out
    }

    #[test]
    fn gate_table_matches_spec_matrix() {
        let rendered = render_gate();
        println!("{rendered}");
        assert_eq!(rendered, SPEC_MATRIX);
    }

    #[test]
    fn worker_leaf_verbs_are_exactly_the_worker_only_verbs() {
        for verb in WORKER_LEAF_VERBS {
            assert!(allowed(Role::Worker, verb));
            for role in [
                Role::Admin,
                Role::Operator,
                Role::Observer,
                Role::Senior,
                Role::WorkerPool,
            ] {
                assert!(!allowed(role, verb), "{role} {verb}");
            }
        }
        let worker: Vec<Verb> = verbs_for(Role::Worker).collect();
        assert_eq!(
            worker,
            [&[Verb::SpawnTask][..], &WORKER_LEAF_VERBS[..]].concat()
        );
    }

    #[test]
    fn check_needs_verb_in_token_and_role_permission() {
        let granted = [Verb::ReadTask, Verb::FetchPrompt];
        assert_eq!(check(Role::Observer, &granted, Verb::ReadTask), Ok(()));
        assert_eq!(
            check(Role::Observer, &granted, Verb::ReadOutput),
            Err(GateError::VerbNotGranted {
                verb: Verb::ReadOutput
            })
        );
        // In the token but not allowed for the role.
        assert_eq!(
            check(Role::Observer, &granted, Verb::FetchPrompt),
            Err(GateError::RoleNotAllowed {
                role: Role::Observer,
                verb: Verb::FetchPrompt
            })
        );
        assert!(check(Role::Admin, &[], Verb::ManageOperators).is_err());
        assert_eq!(
            check(Role::Worker, &WORKER_LEAF_VERBS, Verb::Heartbeat),
            Ok(())
        );
        assert!(check(Role::Worker, &WORKER_LEAF_VERBS, Verb::SpawnTask).is_err());
    }

    #[test]
    fn names_round_trip_through_display_fromstr_and_serde() {
        for role in Role::ALL {
            assert_eq!(role.to_string().parse::<Role>(), Ok(role));
            let json = serde_json::to_string(&role).unwrap();
            assert_eq!(json, format!("\"{role}\""));
            assert_eq!(serde_json::from_str::<Role>(&json).unwrap(), role);
        }
        for verb in Verb::ALL {
            assert_eq!(verb.to_string().parse::<Verb>(), Ok(verb));
            let json = serde_json::to_string(&verb).unwrap();
            assert_eq!(json, format!("\"{verb}\""));
            assert_eq!(serde_json::from_str::<Verb>(&json).unwrap(), verb);
        }
    }

    #[test]
    fn unknown_names_list_the_valid_values() {
        let err = "root".parse::<Role>().unwrap_err();
        assert_eq!(
            err,
            GateError::UnknownRole {
                given: "root".into()
            }
        );
        let text = err.to_string();
        for role in Role::ALL {
            assert!(text.contains(role.as_str()), "{text}");
        }
        let text = "Spawn_Task".parse::<Verb>().unwrap_err().to_string();
        for verb in Verb::ALL {
            assert!(text.contains(verb.as_str()), "{text}");
        }
        assert!(serde_json::from_str::<Role>("\"Admin\"").is_err());
    }
}
