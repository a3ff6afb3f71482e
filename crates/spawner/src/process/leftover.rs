//! Process groups that may outlive the daemon: what identifies one on disk
//! (its id, its leader's start time, the boot it ran in), and killing one
//! still alive at recovery. A pid is reused once its process is gone, even
//! more so after a reboot, so a group is killed only while its leader is the
//! same process: same boot, same start time, still leading the group.

use std::sync::OnceLock;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A process group as recorded with its attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupIdentity {
    pub pgid: i32,
    /// Field 22 of `/proc/<pgid>/stat`: clock ticks after boot.
    pub leader_start_ticks: u64,
    /// `/proc/sys/kernel/random/boot_id` when the group was started.
    pub boot_id: String,
}

impl GroupIdentity {
    /// The group `pgid` as its leader (process `pgid`) stands now; `None`
    /// when `/proc` cannot tell.
    pub fn of_leader(pgid: i32) -> Option<GroupIdentity> {
        let (pgrp, leader_start_ticks) = stat(pgid)?;
        if pgrp != pgid {
            return None;
        }
        Some(GroupIdentity {
            pgid,
            leader_start_ticks,
            boot_id: boot_id()?.to_owned(),
        })
    }

    /// Kills the whole group with SIGKILL if its recorded leader is still
    /// there (a zombie leader counts: its pid cannot be reused yet). Returns
    /// whether it did.
    pub fn kill_if_alive(&self) -> bool {
        if self.pgid <= 1 || boot_id() != Some(self.boot_id.as_str()) {
            return false;
        }
        match stat(self.pgid) {
            Some((pgrp, start)) if pgrp == self.pgid && start == self.leader_start_ticks => {
                killpg(Pid::from_raw(self.pgid), Signal::SIGKILL).is_ok()
            }
            _ => false,
        }
    }
}

/// The process group and start time of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is parenthesised and may hold anything; fields resume after
    // its last `)` at field 3 (state), so field N is at index N - 3.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let pgrp = fields.get(2)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((pgrp, start))
}

/// This boot's id, read once.
fn boot_id() -> Option<&'static str> {
    static BOOT_ID: OnceLock<Option<String>> = OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty())
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::{Duration, Instant};

    use std::os::unix::process::CommandExt;

    use super::*;

    fn sleeper() -> std::process::Child {
        Command::new("/bin/sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_recorded_group_is_killed_only_while_its_leader_is_the_same_process() {
        let mut child = sleeper();
        let pgid = i32::try_from(child.id()).unwrap();
        let identity = GroupIdentity::of_leader(pgid).expect("the leader is readable");
        assert_eq!(identity.pgid, pgid);

        // Another process under the same pid (a later start) is left alone,
        // and so is one from another boot.
        let later = GroupIdentity {
            leader_start_ticks: identity.leader_start_ticks + 1,
            ..identity.clone()
        };
        let other_boot = GroupIdentity {
            boot_id: "another boot".to_owned(),
            ..identity.clone()
        };
        assert!(!later.kill_if_alive());
        assert!(!other_boot.kill_if_alive());
        assert_eq!(child.try_wait().unwrap(), None, "still running");

        assert!(identity.kill_if_alive());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the group was not killed");
            std::thread::sleep(Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
        // Gone (and reaped): nothing is killed any more.
        assert!(!identity.kill_if_alive());
    }

    #[test]
    fn a_process_that_does_not_lead_its_group_has_no_identity() {
        let mut child = Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert_eq!(GroupIdentity::of_leader(pid), None);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
