//! A small pool of dedicated OS threads for Lua, so that no script ever runs on
//! an async executor thread. Built once in `main` and passed in.
//!
//! Jobs travel over one std channel; the threads share its receiver behind a
//! std `Mutex` that is held only while waiting for the next job. A panicking
//! job is caught and reported to its caller; the thread keeps serving.
//!
//! A run the hook cannot stop (one long C call, such as a huge `string.rep`
//! under a large memory limit, never reaches the hook until it returns)
//! would hold its thread, and with it a share of the pool, for as long as
//! the call lasts. So when a caller gives up on a job, a
//! replacement thread starts at once and the job's thread exits as soon as
//! the job returns, keeping the pool at its size. Threads stuck in such
//! calls count against a cap of `MAX_THREADS_PER_SLOT` times the pool size;
//! at the cap no replacement starts, the stuck thread serves on once its
//! call returns, and until then the pool runs short. A run that waits its
//! whole queue time for a thread fails as [`LuaError::NoThread`], naming how
//! many threads are held by runs past their deadline. Pattern calls that
//! could backtrack for long are refused by the sandbox before they run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{LuaError, LuaLimits};

/// A job, run on a pool thread; returns whether that thread keeps serving.
type Job = Box<dyn FnOnce() -> bool + Send + 'static>;

/// Extra time the async side waits past a run's own deadline before giving up
/// on its thread (a single long C call does not reach the hook until it
/// returns).
const DEADLINE_SLACK: Duration = Duration::from_secs(1);

/// Stack of each Lua thread: values crossing the boundary are bounded in
/// depth before any recursive conversion, and this margin (eight times
/// Rust's default, reserved but only touched as used) is the second line of
/// defence, since a stack overflow aborts the whole daemon.
const LUA_THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Threads, stuck ones included, allowed per thread the pool was built with.
const MAX_THREADS_PER_SLOT: usize = 4;

/// Handle on the Lua threads; clones share them. The threads stop when the
/// last clone is dropped.
#[derive(Debug, Clone)]
pub struct LuaPool {
    jobs: mpsc::Sender<Job>,
    limits: LuaLimits,
    threads: Arc<Threads>,
}

/// The pool's threads: the shared job receiver and how many threads exist.
#[derive(Debug)]
struct Threads {
    receiver: Mutex<mpsc::Receiver<Job>>,
    live: AtomicUsize,
    /// Threads whose job was given up on and has not returned yet.
    stuck: AtomicUsize,
    max: usize,
    names: AtomicUsize,
}

impl LuaPool {
    /// Starts `threads` (at least one) Lua threads whose runs obey `limits`.
    pub fn new(threads: usize, limits: LuaLimits) -> Result<LuaPool, LuaError> {
        let size = threads.max(1);
        let (jobs, receiver) = mpsc::channel::<Job>();
        let threads = Arc::new(Threads {
            receiver: Mutex::new(receiver),
            live: AtomicUsize::new(0),
            stuck: AtomicUsize::new(0),
            max: size * MAX_THREADS_PER_SLOT,
            names: AtomicUsize::new(0),
        });
        for _ in 0..size {
            threads.reserve();
            Threads::spawn_reserved(&threads).map_err(LuaError::Threads)?;
        }
        Ok(LuaPool {
            jobs,
            limits,
            threads,
        })
    }

    pub fn limits(&self) -> LuaLimits {
        self.limits
    }

    /// Threads that exist now, those stuck in an abandoned job included.
    pub fn threads(&self) -> usize {
        self.threads.live.load(Ordering::Acquire)
    }

    /// Threads held by a job that was given up on and has not returned.
    pub(super) fn stuck_threads(&self) -> usize {
        self.threads.stuck.load(Ordering::Acquire)
    }

    /// Runs `job` on a Lua thread and waits for its result: up to
    /// `QUEUE_WAITS` run timeouts for a thread to take it (past that it is
    /// never run and fails as [`LuaError::NoThread`]), then the run timeout plus a little slack from when one
    /// did; past that the job is abandoned (see the module docs).
    pub(super) async fn execute<R, F>(&self, job: F) -> Result<R, LuaError>
    where
        F: FnOnce() -> Result<R, LuaError> + Send + 'static,
        R: Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let (began, started) = oneshot::channel::<()>();
        let fate = Arc::new(AtomicU8::new(PENDING));
        let job_fate = Arc::clone(&fate);
        let threads = Arc::clone(&self.threads);
        let job: Job = Box::new(move || {
            // Given up on while it waited in the queue: nothing to run, and
            // this thread serves on.
            if job_fate
                .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return true;
            }
            let _ = began.send(());
            let result = catch_unwind(AssertUnwindSafe(job)).unwrap_or(Err(LuaError::Panicked));
            let _ = reply.send(result);
            match job_fate.compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(fate) => {
                    threads.stuck.fetch_sub(1, Ordering::AcqRel);
                    fate != REPLACED
                }
            }
        });
        self.jobs.send(job).map_err(|_| LuaError::PoolClosed)?;
        // The run's own time starts when a thread takes it: a burst queued
        // behind busy threads waits its turn, up to `QUEUE_WAITS` run
        // times, and a run given up in the queue holds no thread.
        let queue_limit = self.limits.timeout.saturating_mul(QUEUE_WAITS);
        match tokio::time::timeout(queue_limit, started).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(LuaError::PoolClosed),
            Err(_) => {
                if fate
                    .compare_exchange(PENDING, DROPPED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    let error = LuaError::NoThread {
                        waited: queue_limit,
                        stuck: self.stuck_threads(),
                        threads: self.threads(),
                    };
                    tracing::warn!(%error, "a Lua run was not run");
                    return Err(error);
                }
                // It started just now.
            }
        }
        match tokio::time::timeout(self.limits.timeout + DEADLINE_SLACK, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(LuaError::PoolClosed),
            Err(_) => {
                self.abandon(&fate);
                Err(LuaError::TimedOut(self.limits.timeout))
            }
        }
    }

    /// Gives up on a job: its thread is replaced, and exits once the job
    /// returns, unless the pool is at its cap (then the thread serves on).
    fn abandon(&self, fate: &AtomicU8) {
        let reserved = self.threads.reserve();
        let gave_up = if reserved { REPLACED } else { ABANDONED };
        // Counted before the job can see its fate, so that its return
        // never uncounts a thread not yet counted.
        self.threads.stuck.fetch_add(1, Ordering::AcqRel);
        let pending = fate
            .compare_exchange(RUNNING, gave_up, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !pending {
            self.threads.stuck.fetch_sub(1, Ordering::AcqRel);
        }
        match (pending, reserved) {
            (true, true) => {
                tracing::warn!(
                    timeout_secs = self.limits.timeout.as_secs_f64(),
                    "a Lua run outlived its deadline inside one call; its thread is replaced"
                );
                if let Err(error) = Threads::spawn_reserved(&self.threads) {
                    tracing::error!(%error, "cannot start a Lua thread");
                }
            }
            (true, false) => tracing::error!(
                threads = self.threads(),
                "Lua threads are stuck in calls that cannot be interrupted; not replacing another"
            ),
            // The job returned just now: its thread serves on.
            (false, true) => self.threads.unreserve(),
            (false, false) => {}
        }
    }
}

/// A job's fate: queued, running, returned, given up on while running
/// with a replacement thread started (its thread must exit) or not (its
/// thread serves on), or given up on while still queued (never run).
const PENDING: u8 = 0;
const DONE: u8 = 1;
const REPLACED: u8 = 2;
const ABANDONED: u8 = 3;
const RUNNING: u8 = 4;
const DROPPED: u8 = 5;

/// How many of its run times a job may wait in the queue for a thread.
const QUEUE_WAITS: u32 = 4;

impl Threads {
    /// Counts one more thread if the cap allows; `spawn_reserved` starts it.
    fn reserve(&self) -> bool {
        self.live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |live| {
                (live < self.max).then_some(live + 1)
            })
            .is_ok()
    }

    fn unreserve(&self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }

    fn spawn_reserved(threads: &Arc<Threads>) -> std::io::Result<()> {
        let n = threads.names.fetch_add(1, Ordering::Relaxed);
        let serving = Arc::clone(threads);
        let started = std::thread::Builder::new()
            .name(format!("swarmd-lua-{n}"))
            .stack_size(LUA_THREAD_STACK_BYTES)
            .spawn(move || {
                serving.serve();
                serving.unreserve();
            });
        if started.is_err() {
            threads.unreserve();
        }
        started.map(drop)
    }

    /// Runs jobs until the pool is dropped or a job was abandoned.
    fn serve(&self) {
        loop {
            let job = {
                let Ok(guard) = self.receiver.lock() else {
                    return;
                };
                match guard.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            };
            if !job() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(timeout: Duration) -> LuaLimits {
        LuaLimits {
            timeout,
            ..LuaLimits::default()
        }
    }

    async fn until_threads(pool: &LuaPool, wanted: usize) {
        for _ in 0..500 {
            if pool.threads() == wanted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the pool has {} threads, not {wanted}", pool.threads());
    }

    /// A job that holds its thread past the deadline (as one long C call
    /// does) does not hold the pool: the next run gets a replacement thread,
    /// and the stuck thread leaves once its job returns.
    #[tokio::test]
    async fn a_job_stuck_past_its_deadline_gets_its_thread_replaced() {
        let pool = LuaPool::new(1, limits(Duration::from_millis(50))).unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let stuck = pool
            .execute(move || {
                let _ = held.recv();
                Ok(())
            })
            .await;
        assert!(matches!(stuck, Err(LuaError::TimedOut(_))), "{stuck:?}");
        assert_eq!(pool.threads(), 2);

        let next = pool.execute(|| Ok(7)).await;
        assert_eq!(next.unwrap(), 7, "the replacement thread serves");

        release.send(()).unwrap();
        until_threads(&pool, 1).await;
        let after = pool.execute(|| Ok(8)).await;
        assert_eq!(after.unwrap(), 8);
    }

    #[tokio::test]
    async fn stuck_threads_are_capped() {
        let pool = LuaPool::new(1, limits(Duration::from_millis(10))).unwrap();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        for run in 0..MAX_THREADS_PER_SLOT + 2 {
            let held = Arc::clone(&held);
            let stuck = pool
                .execute(move || {
                    let _ = held.lock().unwrap().recv();
                    Ok(())
                })
                .await;
            if run < MAX_THREADS_PER_SLOT {
                assert!(matches!(stuck, Err(LuaError::TimedOut(_))), "{stuck:?}");
            } else {
                // Every thread is held: the run never started, and says why.
                let Err(error @ LuaError::NoThread { stuck, threads, .. }) = stuck else {
                    panic!("{stuck:?}");
                };
                assert_eq!(
                    (stuck, threads),
                    (MAX_THREADS_PER_SLOT, MAX_THREADS_PER_SLOT)
                );
                assert!(
                    error
                        .to_string()
                        .starts_with("no Lua thread came free in 0.04s (4 of 4"),
                    "{error}"
                );
            }
        }
        assert_eq!(pool.threads(), MAX_THREADS_PER_SLOT);
        assert_eq!(pool.stuck_threads(), MAX_THREADS_PER_SLOT);

        drop(release);
        until_threads(&pool, 1).await;
        // The thread that serves on counts itself unstuck once its job
        // returns, which may be just after the others have left.
        for _ in 0..500 {
            if pool.stuck_threads() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.stuck_threads(), 0);
        assert_eq!(pool.execute(|| Ok(1)).await.unwrap(), 1);
    }
}
