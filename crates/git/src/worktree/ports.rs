//! Ports for live attempts (docs/tasks.md, Worktrees, Ports): each attempt of an
//! agent with `worktree.ports` gets `count` distinct ports from the range
//! that no other live attempt holds and that were free to bind when handed
//! out, as `SWARM_PORT` (the first) and `SWARM_PORT_0` … `SWARM_PORT_<n-1>`
//! (all of them). They are held in memory by [`PortPool`] until the
//! attempt's worktree is released, whatever ended it.
//!
//! The scan starts where the previous one stopped, so a port just released
//! (possibly still in `TIME_WAIT` for the worker's own sockets) is the last
//! to be handed out again.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::str::FromStr;
use std::sync::Mutex;

/// `ports = { range = "first-last", count }` of an agent's `worktree`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortsSpec {
    first: u16,
    last: u16,
    count: u16,
}

impl PortsSpec {
    /// `count` ports per attempt from `range` (`"20000-20999"`, both ends
    /// included).
    ///
    /// # Errors
    /// The range is not `first-last`, is empty or inverted, starts at 0, or
    /// holds fewer than `count` ports; `count` is 0.
    pub fn new(range: &str, count: u16) -> Result<PortsSpec, String> {
        let (first, last) = range
            .split_once('-')
            .ok_or_else(|| format!("range `{range}` is not `first-last`"))?;
        let port = |text: &str| {
            u16::from_str(text.trim())
                .map_err(|_| format!("range `{range}`: `{}` is not a port", text.trim()))
        };
        let (first, last) = (port(first)?, port(last)?);
        if first == 0 {
            return Err(format!("range `{range}` starts at port 0"));
        }
        if last < first {
            return Err(format!("range `{range}` is inverted"));
        }
        if count == 0 {
            return Err("count must be at least 1".to_owned());
        }
        let size = u32::from(last) - u32::from(first) + 1;
        if u32::from(count) > size {
            return Err(format!(
                "range `{range}` holds {size} ports, fewer than count = {count}"
            ));
        }
        Ok(PortsSpec { first, last, count })
    }

    pub fn first(&self) -> u16 {
        self.first
    }

    pub fn last(&self) -> u16 {
        self.last
    }

    pub fn count(&self) -> u16 {
        self.count
    }
}

/// Why no ports could be handed out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "no {count} free ports in {first}-{last}: {held} held by live attempts, the rest in use on the host"
)]
pub struct PortsExhausted {
    pub first: u16,
    pub last: u16,
    pub count: u16,
    pub held: usize,
}

/// The ports live attempts hold, shared by every agent of the daemon (two
/// agents with overlapping ranges never get the same port).
#[derive(Debug, Default)]
pub struct PortPool {
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    held: HashSet<u16>,
    /// Where the next scan starts.
    cursor: Option<u16>,
}

impl PortPool {
    /// `spec.count()` ports from its range, held until [`PortPool::release`].
    ///
    /// # Errors
    /// Fewer than `count` ports of the range are neither held nor in use.
    pub fn take(&self, spec: &PortsSpec) -> Result<Vec<u16>, PortsExhausted> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let size = u32::from(spec.last) - u32::from(spec.first) + 1;
        let start = match state.cursor {
            Some(c) if (spec.first..=spec.last).contains(&c) => u32::from(c - spec.first),
            _ => 0,
        };
        let mut taken = Vec::with_capacity(usize::from(spec.count));
        for step in 0..size {
            let offset = (start + step) % size;
            let Ok(port) = u16::try_from(u32::from(spec.first) + offset) else {
                continue;
            };
            if state.held.contains(&port) || !bindable(port) {
                continue;
            }
            taken.push(port);
            if taken.len() == usize::from(spec.count) {
                state.held.extend(&taken);
                state.cursor = port.checked_add(1);
                return Ok(taken);
            }
        }
        Err(PortsExhausted {
            first: spec.first,
            last: spec.last,
            count: spec.count,
            held: state
                .held
                .iter()
                .filter(|p| (spec.first..=spec.last).contains(*p))
                .count(),
        })
    }

    /// Gives `ports` back.
    pub fn release(&self, ports: &[u16]) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for port in ports {
            state.held.remove(port);
        }
    }

    /// How many ports are held.
    pub fn held(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.held.len()
    }
}

/// Whether nothing listens on `port` of the loopback or any address: bound
/// briefly and let go.
fn bindable(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok()
}

/// The variables a worker gets for `ports`: `SWARM_PORT` (the first) and
/// `SWARM_PORT_<i>` for each, from 0.
pub fn port_env(ports: &[u16]) -> Vec<(String, String)> {
    let mut env = Vec::with_capacity(ports.len() + 1);
    if let Some(first) = ports.first() {
        env.push(("SWARM_PORT".to_owned(), first.to_string()));
    }
    for (i, port) in ports.iter().enumerate() {
        env.push((format!("SWARM_PORT_{i}"), port.to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_must_be_first_dash_last_non_empty_and_hold_count_ports() {
        let spec = PortsSpec::new("20000-20999", 2).unwrap();
        assert_eq!((spec.first(), spec.last(), spec.count()), (20000, 20999, 2));
        assert!(PortsSpec::new("20000-20000", 1).is_ok());
        for (range, count, problem) in [
            ("20999-20000", 1, "inverted"),
            ("20000", 1, "not `first-last`"),
            ("a-b", 1, "not a port"),
            ("1-70000", 1, "not a port"),
            ("0-10", 1, "port 0"),
            ("100-101", 3, "fewer than count"),
            ("100-101", 0, "at least 1"),
        ] {
            let error = PortsSpec::new(range, count).unwrap_err();
            assert!(error.contains(problem), "{range}/{count}: {error}");
        }
    }

    /// A range of `n` ports on the loopback that are free now.
    fn free_range(n: u16) -> PortsSpec {
        for first in (41000..60000).step_by(97) {
            if (first..first + n).all(bindable) {
                return PortsSpec::new(&format!("{first}-{}", first + n - 1), 1).unwrap();
            }
        }
        panic!("no free range");
    }

    #[test]
    fn live_attempts_get_distinct_ports_until_the_range_runs_out_and_releases_refill_it() {
        let range = free_range(4);
        let two = PortsSpec::new(&format!("{}-{}", range.first(), range.last()), 2).unwrap();
        let pool = PortPool::default();
        let a = pool.take(&two).unwrap();
        let b = pool.take(&two).unwrap();
        assert_eq!(a.len(), 2);
        let all: HashSet<u16> = a.iter().chain(&b).copied().collect();
        assert_eq!(all.len(), 4, "{a:?} {b:?}");
        assert!(
            all.iter()
                .all(|p| (range.first()..=range.last()).contains(p))
        );
        let error = pool.take(&two).unwrap_err();
        assert_eq!(error.held, 4);
        pool.release(&a);
        assert_eq!(pool.held(), 2);
        let c = pool.take(&two).unwrap();
        assert_eq!(
            c.iter().copied().collect::<HashSet<_>>(),
            a.iter().copied().collect()
        );
    }

    #[test]
    fn a_port_in_use_on_the_host_is_skipped() {
        let range = free_range(3);
        let busy = TcpListener::bind((Ipv4Addr::UNSPECIFIED, range.first())).unwrap();
        let pool = PortPool::default();
        let spec = PortsSpec::new(&format!("{}-{}", range.first(), range.last()), 2).unwrap();
        let ports = pool.take(&spec).unwrap();
        assert!(!ports.contains(&range.first()), "{ports:?}");
        drop(busy);
    }

    #[test]
    fn the_first_port_is_swarm_port_and_all_are_numbered_from_zero() {
        assert_eq!(
            port_env(&[20001, 20002]),
            [
                ("SWARM_PORT".to_owned(), "20001".to_owned()),
                ("SWARM_PORT_0".to_owned(), "20001".to_owned()),
                ("SWARM_PORT_1".to_owned(), "20002".to_owned()),
            ]
        );
        assert!(port_env(&[]).is_empty());
    }
}
