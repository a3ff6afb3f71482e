//! A one-paragraph description of the machine for the report: CPU model,
//! core count, memory, kernel, and the load average when it was written.

use crate::procfs::{load_average, status_kib};

/// `Machine: …` as a Markdown paragraph.
pub(crate) fn description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown CPU".to_owned(), |m| m.trim().to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = status_kib(&meminfo, "MemTotal:").map_or("?".to_owned(), |k| {
        format!("{:.1}", k as f64 / 1024.0 / 1024.0)
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("?".to_owned(), |k| k.trim().to_owned());
    let load = load_average().map_or("?".to_owned(), |l| format!("{l:.2}"));
    format!(
        "Machine: {model}, {cores} cores available, {memory} GiB RAM, Linux {kernel}; \
         load average {load} at the end of the run."
    )
}
