//! A small pool of dedicated OS threads for Lua, so that no script ever runs on
//! an async executor thread. Built once in `main` and passed in.
//!
//! Jobs travel over one std channel; the threads share its receiver behind a
//! std `Mutex` that is held only while waiting for the next job. A panicking
//! job is caught and reported to its caller; the thread keeps serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{LuaError, LuaLimits};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Extra time the async side waits past a run's own deadline before giving up
/// on its thread (a single long C call, such as a huge `string.rep`, does not
/// reach the hook until it returns).
const DEADLINE_SLACK: Duration = Duration::from_secs(1);

/// Handle on the Lua threads; clones share them. The threads stop when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct LuaPool {
    jobs: mpsc::Sender<Job>,
    limits: LuaLimits,
}

impl LuaPool {
    /// Starts `threads` (at least one) Lua threads whose runs obey `limits`.
    pub fn new(threads: usize, limits: LuaLimits) -> Result<LuaPool, LuaError> {
        let (jobs, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for n in 0..threads.max(1) {
            let receiver = Arc::clone(&receiver);
            std::thread::Builder::new()
                .name(format!("swarmd-lua-{n}"))
                .spawn(move || serve(&receiver))
                .map_err(LuaError::Threads)?;
        }
        Ok(LuaPool { jobs, limits })
    }

    pub fn limits(&self) -> LuaLimits {
        self.limits
    }

    /// Runs `job` on a Lua thread and waits for its result, at most the run
    /// timeout plus a little slack.
    pub(super) async fn execute<R, F>(&self, job: F) -> Result<R, LuaError>
    where
        F: FnOnce() -> Result<R, LuaError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            let result = catch_unwind(AssertUnwindSafe(job)).unwrap_or(Err(LuaError::Panicked));
            let _ = reply.send(result);
        });
        self.jobs.send(job).map_err(|_| LuaError::PoolClosed)?;
        match tokio::time::timeout(self.limits.timeout + DEADLINE_SLACK, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(LuaError::PoolClosed),
            Err(_) => Err(LuaError::TimedOut(self.limits.timeout)),
        }
    }
}

fn serve(receiver: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = {
            let Ok(guard) = receiver.lock() else { return };
            match guard.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        job();
    }
}
