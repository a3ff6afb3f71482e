//! The SpawnerStack (docs/tasks.md, Layers): the `SpawnerLayer` trait, the one
//! function that decides the order of a linked stack, the registry of layer
//! keys, and `wrap_join`.

mod join;
mod outcome;
mod registry;

use std::fmt;
use std::sync::Arc;

use swarmd_engine::SpawnerAdapter;

pub use join::{JoinFuture, around_join, wrap_join};
pub use outcome::Observed;
pub use registry::{BASE_KEYS, LayerRegistry};
pub use swarmd_engine::outcome::content_value;

/// Middleware over spawners, like tower's `Layer`: cheap configuration that
/// wraps an inner adapter in an adapter of its own, which delegates to it.
pub trait SpawnerLayer: Send + Sync + fmt::Debug {
    fn wrap(&self, inner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter>;
}

/// The layers of one linked stack, outermost first.
///
/// # Order
///
/// Like tower's `ServiceBuilder`, the first layer is the outermost:
///
/// ```text
///  engine ─► audit ─► long_hold ─► hint 1 ─► … ─► hint n ─► base spawner
///            └──── base layers ───┘└─ in the order named ─┘  (process, lua, operator)
/// ```
///
/// `spawn` runs left to right, so `audit` sees every attempt first and the
/// base spawner starts the worker last. A worker's completion unwinds right
/// to left: the base spawner's join ends first, then each layer's post-step,
/// so an override Final appended by a hint (`senior_escalation`, `lua:*`) is
/// already in the tail when `long_hold` stops and `audit` records the outcome.
#[derive(Debug, Clone, Default)]
pub struct SpawnerStack {
    layers: Vec<(String, Arc<dyn SpawnerLayer>)>,
}

impl SpawnerStack {
    /// The one place where a stack's order is decided: `base` layers (always
    /// applied, in registry order: `audit`, then `long_hold`), then `hints`
    /// in the order the agent and then the task named them.
    pub fn assemble(
        base: &[(String, Arc<dyn SpawnerLayer>)],
        hints: Vec<(String, Arc<dyn SpawnerLayer>)>,
    ) -> SpawnerStack {
        let mut layers = base.to_vec();
        layers.extend(hints);
        SpawnerStack { layers }
    }

    /// The layer keys, outermost first.
    pub fn keys(&self) -> Vec<&str> {
        self.layers.iter().map(|(key, _)| key.as_str()).collect()
    }

    /// Wraps `spawner` in every layer: the last layer wraps it first, so the
    /// first layer ends up outermost.
    pub fn link(&self, spawner: Arc<dyn SpawnerAdapter>) -> Arc<dyn SpawnerAdapter> {
        self.layers
            .iter()
            .rev()
            .fold(spawner, |inner, (_, layer)| layer.wrap(inner))
    }
}

#[cfg(test)]
mod tests;
