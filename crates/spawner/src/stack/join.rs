//! `wrap_join`: a worker whose join is the inner join followed by (or
//! wrapped in) an async step, keeping the inner worker's id and cancel token.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use swarmd_engine::ids::WorkerId;
use swarmd_engine::{Worker, WorkerError};
use tokio_util::sync::CancellationToken;

/// A worker's pending completion.
pub type JoinFuture = Pin<Box<dyn Future<Output = Result<(), WorkerError>> + Send + 'static>>;

/// Runs `post` on the inner join's result once it completes; `post`'s result
/// is the wrapped worker's.
pub fn wrap_join<F, Fut>(worker: Box<dyn Worker>, post: F) -> Box<dyn Worker>
where
    F: FnOnce(Result<(), WorkerError>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), WorkerError>> + Send + 'static,
{
    around_join(worker, move |join| async move { post(join.await).await })
}

/// Hands the inner join to `around`, which decides when to await it (for a
/// layer that acts while the worker runs, such as `long_hold`).
pub fn around_join<F, Fut>(worker: Box<dyn Worker>, around: F) -> Box<dyn Worker>
where
    F: FnOnce(JoinFuture) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), WorkerError>> + Send + 'static,
{
    let id = worker.id();
    let cancel = worker.cancel_token();
    // `join` consumes the worker but does nothing until polled.
    let join = Box::pin(around(worker.join()));
    Box::new(Wrapped { id, cancel, join })
}

struct Wrapped {
    id: WorkerId,
    cancel: CancellationToken,
    join: JoinFuture,
}

impl fmt::Debug for Wrapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wrapped")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Worker for Wrapped {
    fn id(&self) -> WorkerId {
        self.id
    }

    fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    async fn join(self: Box<Self>) -> Result<(), WorkerError> {
        self.join.await
    }
}
