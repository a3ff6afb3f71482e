//! The open loop's clock: one OS thread that sleeps until each request's
//! scheduled time and hands that time to a session. tokio's timer fires on
//! whole milliseconds, so requests paced by it went out up to 1–2 ms late;
//! a thread sleep ends within the kernel's timer slack (~50 µs).

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

/// The schedule: request `k` is due at `first + k × period` and goes to
/// session `k mod sessions`, until `stop` (if any) or until every session
/// has hung up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub first: Instant,
    pub period: Duration,
    pub stop: Option<Instant>,
}

impl Schedule {
    /// When request `k` is due.
    fn due(&self, k: u32) -> Instant {
        self.first + self.period * k
    }
}

/// Starts the pacer thread; each session receives the due times of its
/// requests. The thread ends at the schedule's stop, or once no session is
/// listening.
pub(crate) fn start(
    schedule: Schedule,
    sessions: Vec<UnboundedSender<Instant>>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("bench-pacer".to_owned())
        .spawn(move || run(schedule, &sessions))
}

fn run(schedule: Schedule, sessions: &[UnboundedSender<Instant>]) {
    if sessions.is_empty() {
        return;
    }
    for k in 0..u32::MAX {
        let due = schedule.due(k);
        if schedule.stop.is_some_and(|stop| due >= stop) {
            return;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // A session that has finished (its quota sent) drops its receiver.
        let session = &sessions[k as usize % sessions.len()];
        if session.send(due).is_err() && sessions.iter().all(UnboundedSender::is_closed) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_go_round_robin_on_schedule_until_the_stop() {
        let first = Instant::now();
        let period = Duration::from_millis(1);
        let schedule = Schedule {
            first,
            period,
            stop: Some(first + Duration::from_micros(4_500)),
        };
        let (a_tx, mut a) = tokio::sync::mpsc::unbounded_channel();
        let (b_tx, mut b) = tokio::sync::mpsc::unbounded_channel();
        start(schedule, vec![a_tx, b_tx]).unwrap().join().unwrap();
        let drain = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Instant>| {
            let mut got = Vec::new();
            while let Ok(due) = rx.try_recv() {
                got.push(due.duration_since(first));
            }
            got
        };
        assert_eq!(drain(&mut a), [Duration::ZERO, period * 2, period * 4]);
        assert_eq!(drain(&mut b), [period * 1, period * 3]);
        assert!(
            Instant::now() >= first + period * 4,
            "it slept until the last one was due"
        );
    }

    #[test]
    fn it_ends_when_every_session_has_hung_up() {
        let schedule = Schedule {
            first: Instant::now(),
            period: Duration::from_micros(10),
            stop: None,
        };
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        drop(rx);
        start(schedule, vec![tx]).unwrap().join().unwrap();
    }
}
