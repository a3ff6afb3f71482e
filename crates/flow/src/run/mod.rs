//! Running a flow, without I/O: a run's durable state is its `Journal`;
//! `evaluate` replays the pinned flow over it and says what the run needs
//! now (steps to start, waits to open, steps no longer wanted) and where it
//! is. The daemon's runner records outcomes in the journal, commits it, and
//! does what the evaluation asks; nothing here knows tasks or stores.

mod budget;
mod control;
mod eval;
mod fanout;
mod journal;
mod merge;

pub use eval::{
    Evaluation, MAX_CALL_DEPTH, MAX_LOOP_ITERATIONS, MAX_NODE_INSTANCES, NodeState, NodeStatus,
    Progress, StepStart, WaitOpen, evaluate,
};
pub use journal::{Journal, Outcome, RecordError, Spend, StepEntry, StepFacts, WaitEntry};

#[cfg(test)]
#[path = "eval_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "budget_tests.rs"]
mod budget_tests;

#[cfg(test)]
#[path = "merge_tests.rs"]
mod merge_tests;
