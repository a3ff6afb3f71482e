//! Verbs that run to their end whatever their caller does. An HTTP
//! handler is dropped when its client goes away (a peer that forwarded the
//! request and died, a client that timed out), and a verb dropped between
//! its change in memory and what must follow it (its write, retiring the
//! task, telling its claimant) would leave the engine in a state nothing
//! brings back. Such a verb runs in a task of its own; its caller awaits
//! the task and, if dropped, leaves it running.

use std::future::Future;

use crate::error::EngineError;

/// Runs `verb` in a task of its own and returns what it returns; a panic
/// in it goes on in the caller. `Draining` when the runtime is shutting
/// down and the task was dropped before it ended.
pub async fn detached<T, E>(
    verb: impl Future<Output = Result<T, E>> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<EngineError> + Send + 'static,
{
    match tokio::spawn(verb).await {
        Ok(done) => done,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(_) => Err(EngineError::Draining.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_verb_whose_caller_goes_away_runs_to_its_end() {
        let ended = Arc::new(AtomicBool::new(false));
        let verb = {
            let ended = ended.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                ended.store(true, Ordering::SeqCst);
                Ok::<_, EngineError>(())
            }
        };
        // The caller gives up long before the verb ends.
        let cut = tokio::time::timeout(Duration::from_millis(1), detached(verb)).await;
        assert!(cut.is_err());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(ended.load(Ordering::SeqCst));
    }

    #[tokio::test]
    #[should_panic(expected = "the verb's own panic")]
    async fn a_panic_in_the_verb_goes_on_in_the_caller() {
        let _ = detached(async { panic!("the verb's own panic") as Result<(), EngineError> }).await;
    }
}
