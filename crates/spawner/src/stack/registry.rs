//! `LayerRegistry`: layer keys → layers. Base layers apply to every stack;
//! hint layers apply when the agent or the task names their key.

use std::collections::HashMap;
use std::sync::Arc;

use swarmd_engine::SpawnError;

use super::{SpawnerLayer, SpawnerStack};

/// Keys of the base layers, in stack order (outermost first).
pub const BASE_KEYS: [&str; 2] = ["audit", "long_hold"];

/// The layers a resolver links stacks from. Each entry is a factory of
/// wrappers: cheap configuration whose `wrap` builds one stack's wrapper.
#[derive(Debug, Clone, Default)]
pub struct LayerRegistry {
    base: Vec<(String, Arc<dyn SpawnerLayer>)>,
    hints: HashMap<String, Arc<dyn SpawnerLayer>>,
}

impl LayerRegistry {
    pub fn new() -> LayerRegistry {
        LayerRegistry::default()
    }

    /// Adds a base layer inside the ones added before it.
    pub fn with_base(mut self, key: &str, layer: Arc<dyn SpawnerLayer>) -> LayerRegistry {
        self.base.push((key.to_owned(), layer));
        self
    }

    /// Adds (or replaces) the hint layer named `key`.
    pub fn with_hint(mut self, key: &str, layer: Arc<dyn SpawnerLayer>) -> LayerRegistry {
        self.hints.insert(key.to_owned(), layer);
        self
    }

    pub fn has_hint(&self, key: &str) -> bool {
        self.hints.contains_key(key)
    }

    /// The hint keys of one stack: the agent's, then the task's, each once,
    /// in the order first named. Naming a base key is allowed and changes
    /// nothing.
    ///
    /// # Errors
    /// `UnknownLayer` naming `agent` and the first key no layer answers to.
    pub fn hint_keys(
        &self,
        agent: &str,
        agent_layers: &[String],
        task_layers: &[String],
    ) -> Result<Vec<String>, SpawnError> {
        let mut keys: Vec<String> = Vec::with_capacity(agent_layers.len() + task_layers.len());
        for key in agent_layers.iter().chain(task_layers) {
            if self.base.iter().any(|(base, _)| base == key) || keys.contains(key) {
                continue;
            }
            if !self.hints.contains_key(key) {
                return Err(SpawnError::UnknownLayer {
                    agent: agent.to_owned(),
                    key: key.clone(),
                });
            }
            keys.push(key.clone());
        }
        Ok(keys)
    }

    /// The stack for `hints` (already normalized by [`Self::hint_keys`]).
    pub fn stack(&self, agent: &str, hints: &[String]) -> Result<SpawnerStack, SpawnError> {
        let hints = hints
            .iter()
            .map(|key| match self.hints.get(key) {
                Some(layer) => Ok((key.clone(), Arc::clone(layer))),
                None => Err(SpawnError::UnknownLayer {
                    agent: agent.to_owned(),
                    key: key.clone(),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SpawnerStack::assemble(&self.base, hints))
    }
}
