//! The daemon's environment snapshot, which every child it runs draws
//! from: git for worktrees and merges, and a process agent's allow-list.

use std::collections::BTreeMap;
use std::fmt;

/// A snapshot of the daemon's environment, taken in `main` and passed in, from
/// which `EnvVar::Pass` entries are copied. `Debug` prints names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostEnv {
    vars: BTreeMap<String, String>,
}

impl HostEnv {
    pub fn from_pairs<I, K, V>(pairs: I) -> HostEnv
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        HostEnv {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

impl fmt::Debug for HostEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.vars.keys()).finish()
    }
}
