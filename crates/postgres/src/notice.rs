//! The payload of a write group's event notification: written by the
//! writer's numbering statement, read by the other nodes' listeners.
//!
//! It reads `FIRST NODE COUNT ACTED`: the group's first seq (the statement
//! prepends it, since only the commit numbers the events), the writing
//! node, how many events the group stored (seqs `FIRST` to
//! `FIRST + COUNT - 1`), and the stored bodies of those the node acts on
//! (`Event::ACTED_ON`) as a JSON array of `[offset, body]` pairs, or `-`
//! when they would not fit. So a node whose pump reads only those kinds
//! whole gets from the notification what the log would give it, without
//! a query; a payload that is unreadable, from another build, or without
//! the bodies is only a wake-up to read the log. Outside a cluster,
//! where nothing listens, the writer's part is `-` alone.

use swarmd_engine::event::{Event, EventRecord, Logged};
use swarmd_output_store::StoreError;

use crate::tasks_read::decode;

/// The most the `NODE COUNT ACTED` part may weigh (`weight`): PostgreSQL
/// refuses a payload of 8 000 bytes or more in the database's encoding,
/// and the statement adds the first seq (at most 20 digits) and a space
/// before it.
const MAX_PART: usize = 7_900;

/// An upper bound of `text`'s length in bytes in any server encoding
/// PostgreSQL has: ASCII is one byte in each, and a character of two to
/// four bytes in UTF-8 is at most four in any of them, so each byte
/// outside ASCII counts twice.
fn weight(text: &str) -> usize {
    text.len() + text.bytes().filter(|b| !b.is_ascii()).count()
}

/// The writer's part of the payload for a group storing `bodies`, whose
/// kinds are `kinds` (the same length, in seq order).
pub(crate) fn payload(node: &str, bodies: &[&str], kinds: &[&str]) -> String {
    let head = format!("{node} {}", bodies.len());
    // The head, the space after it and the array's closing bracket.
    let mut weight_so_far = weight(&head) + 2;
    let mut acted = String::from("[");
    for (offset, (body, kind)) in bodies.iter().zip(kinds).enumerate() {
        if !Event::ACTED_ON.contains(kind) {
            continue;
        }
        let pair = format!(
            "{}[{offset},{body}]",
            if acted.len() > 1 { "," } else { "" }
        );
        weight_so_far += weight(&pair);
        if weight_so_far > MAX_PART {
            return format!("{head} -");
        }
        acted.push_str(&pair);
    }
    acted.push(']');
    format!("{head} {acted}")
}

/// What a listener makes of a notification.
#[derive(Debug, PartialEq)]
pub(crate) enum Notice {
    /// This node's own commit: its bus has the events already.
    Own,
    /// Every seq of another node's group, the acted-on ones whole.
    Entries(Vec<Logged>),
    /// Another node committed; only the log says what.
    Wake,
}

/// Reads `payload` for the node `own`.
pub(crate) fn read(payload: &str, own: &str) -> Notice {
    let mut parts = payload.splitn(4, ' ');
    let (Some(first), Some(node), Some(count), Some(acted)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        // A payload of one part is another build's: the node alone.
        return if payload == own {
            Notice::Own
        } else {
            Notice::Wake
        };
    };
    if node == own {
        return Notice::Own;
    }
    match entries(first, count, acted) {
        Some(entries) => Notice::Entries(entries),
        None => Notice::Wake,
    }
}

/// The group's seqs in order, each acted-on one whole; `None` when the
/// payload does not say them all.
fn entries(first: &str, count: &str, acted: &str) -> Option<Vec<Logged>> {
    let first: u64 = first.parse().ok()?;
    let count: u64 = count.parse().ok()?;
    if count == 0 || acted == "-" {
        return None;
    }
    let pairs: Vec<(u64, &serde_json::value::RawValue)> = serde_json::from_str(acted).ok()?;
    let mut entries: Vec<Logged> = (first..first.checked_add(count)?)
        .map(Logged::Seq)
        .collect();
    for (offset, body) in pairs {
        let slot = entries.get_mut(usize::try_from(offset).ok()?)?;
        // Below `first + count`, which did not overflow.
        let seq = first + offset;
        // As the log reads it: a body that does not decode is its seq.
        match decode::<EventRecord>("events", &format!("seq:{seq}"), body.get()) {
            Ok(mut record) => {
                record.seq = seq;
                *slot = Logged::Whole(record);
            }
            Err(StoreError::Json(_)) => {}
            Err(_) => return None,
        }
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarmd_engine::ids::TaskId;

    fn body(event: &Event) -> String {
        serde_json::to_string(&EventRecord {
            seq: 0,
            ts_ms: 7,
            session: None,
            event: event.clone(),
        })
        .unwrap()
    }

    fn finished(task: TaskId) -> Event {
        Event::TaskFinished {
            task_id: task,
            attempt: 1,
            status: swarmd_engine::TaskStatus::Pass,
            result: None,
        }
    }

    fn finished_with(task: TaskId, text: &str) -> Event {
        Event::TaskFinished {
            task_id: task,
            attempt: 1,
            status: swarmd_engine::TaskStatus::Pass,
            result: Some(swarmd_engine::task::TaskResult {
                value: serde_json::json!(text),
                ok: true,
            }),
        }
    }

    #[test]
    fn a_group_reads_back_as_its_seqs_with_the_acted_on_events_whole() {
        let task = TaskId::new();
        let done = body(&finished(task));
        let created = body(&Event::TaskCreated {
            task_id: task,
            agent: "a".into(),
            parent: None,
        });
        let part = payload("n1", &[&created, &done], &["task_created", "task_finished"]);
        let notice = read(&format!("41 {part}"), "n2");
        let Notice::Entries(entries) = notice else {
            panic!("{notice:?}");
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], Logged::Seq(41));
        let Logged::Whole(record) = &entries[1] else {
            panic!("{:?}", entries[1]);
        };
        assert_eq!((record.seq, record.ts_ms), (42, 7));
        assert_eq!(record.event, finished(task));
    }

    #[test]
    fn its_own_group_and_another_builds_payload_are_told_apart() {
        let part = payload("n1", &["{}"], &["task_created"]);
        assert_eq!(read(&format!("5 {part}"), "n1"), Notice::Own);
        assert_eq!(read("n1", "n1"), Notice::Own);
        assert_eq!(read("n3", "n1"), Notice::Wake);
        assert_eq!(
            read(&format!("5 {part}"), "n2"),
            Notice::Entries(vec![Logged::Seq(5)])
        );
    }

    #[test]
    fn bodies_that_would_not_fit_leave_a_wake_up() {
        let task = TaskId::new();
        let done = body(&finished(task));
        let bodies: Vec<&str> = vec![done.as_str(); 200];
        let kinds = vec!["task_finished"; 200];
        let part = payload("n1", &bodies, &kinds);
        assert!(part.len() <= MAX_PART, "{}", part.len());
        assert_eq!(part, "n1 200 -");
        assert_eq!(read(&format!("9 {part}"), "n2"), Notice::Wake);
    }

    #[test]
    fn a_payload_stays_under_postgres_limit_at_the_edge_in_any_encoding() {
        let task = TaskId::new();
        let node = uuid::Uuid::new_v4().to_string();
        for fill in ["x", "é", "語", "😀"] {
            for n in (7_000..8_000).step_by(7) {
                let text: String = fill.repeat(n / fill.len());
                let done = body(&finished_with(task, &text));
                let part = payload(&node, &[&done, &done], &["task_finished", "task_created"]);
                // The statement puts the first seq (a bigint, the largest
                // here) and a space before the part.
                let whole = format!("{} {part}", i64::MAX - 2);
                // Four bytes for a character outside ASCII: the most any
                // server encoding takes for one.
                let worst: usize = whole
                    .chars()
                    .map(|c| if c.is_ascii() { 1 } else { 4 })
                    .sum();
                assert!(worst < 8_000, "{fill} x {n}: {worst}");
                if part.ends_with(" -") {
                    assert!(weight(&done) + node.len() > 7_800, "{fill} x {n} left out");
                } else {
                    let Notice::Entries(entries) = read(&whole, "other") else {
                        panic!("{fill} x {n}");
                    };
                    assert!(matches!(entries[0], Logged::Whole(_)), "{fill} x {n}");
                }
            }
        }
    }

    #[test]
    fn a_payload_that_does_not_add_up_is_a_wake_up() {
        for payload in [
            "x n1 1 []",
            "5 n1 x []",
            "5 n1 0 []",
            "5 n1 1 [[1,{}]]",
            "5 n1 1 [[18446744073709551615,{}]]",
            "5 n1 1 not json",
            "18446744073709551615 n1 2 []",
        ] {
            assert_eq!(read(payload, "n2"), Notice::Wake, "{payload}");
        }
    }

    #[test]
    fn a_body_that_does_not_decode_stays_a_seq() {
        assert_eq!(
            read("5 n1 1 [[0,{\"nope\":1}]]", "n2"),
            Notice::Entries(vec![Logged::Seq(5)])
        );
    }
}
