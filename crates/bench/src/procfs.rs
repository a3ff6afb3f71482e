//! What the generator reads from `/proc`: a process's CPU time
//! (`/proc/<pid>/stat`), its resident memory (`/proc/<pid>/status`) and the
//! machine's load average. Linux only; elsewhere the readings are absent.

use std::process::Command;
use std::sync::OnceLock;

/// CPU time and memory of one process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcSample {
    /// User + system CPU seconds of the process itself.
    pub cpu_secs: f64,
    /// User + system CPU seconds of its waited-for children.
    pub children_cpu_secs: f64,
    /// Resident set size now, in KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size since start, in KiB (`VmHWM`).
    pub hwm_kib: u64,
}

impl ProcSample {
    /// Reads `/proc/<pid>`; `None` when the process or `/proc` is gone.
    pub(crate) fn read(pid: u32) -> Option<ProcSample> {
        Self::read_path(&format!("/proc/{pid}"))
    }

    /// Reads `/proc/self`.
    pub(crate) fn read_self() -> Option<ProcSample> {
        Self::read_path("/proc/self")
    }

    fn read_path(dir: &str) -> Option<ProcSample> {
        let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
        let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
        let ticks = parse_stat_ticks(&stat)?;
        let per_sec = clock_ticks_per_sec();
        Some(ProcSample {
            cpu_secs: (ticks.0 + ticks.1) as f64 / per_sec,
            children_cpu_secs: (ticks.2 + ticks.3) as f64 / per_sec,
            rss_kib: status_kib(&status, "VmRSS:").unwrap_or(0),
            hwm_kib: status_kib(&status, "VmHWM:").unwrap_or(0),
        })
    }
}

/// `utime, stime, cutime, cstime` (fields 14–17) of a `/proc/<pid>/stat`
/// line. The command name (field 2) may hold spaces and parentheses, so the
/// fields are counted from its last `)`.
pub(crate) fn parse_stat_ticks(stat: &str) -> Option<(u64, u64, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some((field(14)?, field(15)?, field(16)?, field(17)?))
}

/// The value in KiB of a `Key:   123 kB` line of `/proc/<pid>/status`.
pub(crate) fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// `getconf CLK_TCK`, else 100 (the value on every common Linux).
pub(crate) fn clock_ticks_per_sec() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|ticks| *ticks > 0.0)
            .unwrap_or(100.0)
    })
}

/// The 1-minute load average, if `/proc/loadavg` is readable.
pub(crate) fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let stat = "4242 (sw arm) d) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    150 25 7 3 20 0 12 0 5000 100000000 3000";
        assert_eq!(parse_stat_ticks(stat), Some((150, 25, 7, 3)));
    }

    #[test]
    fn a_truncated_stat_line_reads_as_nothing() {
        assert_eq!(parse_stat_ticks("1 (x) S 1 2 3"), None);
        assert_eq!(parse_stat_ticks("no parenthesis"), None);
    }

    #[test]
    fn status_values_are_read_in_kib() {
        let status = "Name:\tswarmd\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(102_400));
        assert_eq!(status_kib(status, "VmHWM:"), Some(204_800));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let sample = ProcSample::read_self().expect("/proc/self is readable on Linux");
        assert!(sample.rss_kib > 0 && sample.hwm_kib >= sample.rss_kib);
    }
}
