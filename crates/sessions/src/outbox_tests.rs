//! Outbox tests: order, the bound and its eviction order, reservations,
//! acknowledgement and socket replacement.

use std::time::Duration;

use swarmd_engine::ids::{AttemptId, TaskId};

use super::*;

fn text(class: FrameClass, body: &str) -> Outgoing {
    Outgoing::Text {
        class,
        text: Utf8Bytes::from(body),
    }
}

fn spawn(req_id: &str) -> Outgoing {
    Outgoing::Spawn(Box::new(ParkedSpawn {
        req_id: req_id.to_owned(),
        frame: SpawnFrame {
            attempt: AttemptId::new(TaskId::new(), 1),
            agent: "a".into(),
            credential: WorkerCredential::new("swc1.x".into(), "wh-x".into(), 10),
            worker_binding: None,
            directive: String::new(),
            base_url: String::new(),
            lease_deadline_ms: 0,
            worktree: None,
            continued_from: None,
            resume_session: None,
        },
    }))
}

/// The bodies (or spawn req_ids) of everything `peek` returns.
fn bodies(outbox: &Outbox) -> Vec<String> {
    outbox
        .peek(usize::MAX)
        .frames
        .into_iter()
        .map(|(_, f)| match f {
            Outgoing::Text { text, .. } => text.as_str().to_owned(),
            Outgoing::Spawn(s) => s.req_id,
        })
        .collect()
}

#[test]
fn frames_wait_in_order_until_acknowledged() {
    let outbox = Outbox::new(10);
    for body in ["a", "b", "c"] {
        outbox.push(text(FrameClass::Notice, body)).unwrap();
    }
    let batch = outbox.peek(2);
    assert_eq!(batch.frames.len(), 2);
    assert_eq!(bodies(&outbox), ["a", "b", "c"], "peek takes nothing away");
    outbox.ack(batch.frames.last().map(|(id, _)| *id), 0);
    assert_eq!(bodies(&outbox), ["c"]);
    // Acknowledging the same ids again changes nothing.
    outbox.ack(batch.frames.last().map(|(id, _)| *id), 0);
    assert_eq!(bodies(&outbox), ["c"]);
}

#[test]
fn a_full_outbox_evicts_task_events_then_notices_never_requests() {
    let outbox = Outbox::new(4);
    outbox.push(spawn("s1")).unwrap();
    outbox.push(text(FrameClass::Notice, "done1")).unwrap();
    outbox.push(text(FrameClass::Resumable, "ev1")).unwrap();
    outbox.push(text(FrameClass::Resumable, "ev2")).unwrap();

    outbox.push(text(FrameClass::Notice, "done2")).unwrap();
    assert_eq!(
        bodies(&outbox),
        ["s1", "done1", "ev2", "done2"],
        "oldest task_event first"
    );
    outbox.push(text(FrameClass::Request, "ask1")).unwrap();
    assert_eq!(bodies(&outbox), ["s1", "done1", "done2", "ask1"]);
    outbox.push(spawn("s2")).unwrap();
    assert_eq!(
        bodies(&outbox),
        ["s1", "done2", "ask1", "s2"],
        "then the oldest notice"
    );
    outbox.push(spawn("s3")).unwrap();
    assert_eq!(bodies(&outbox), ["s1", "ask1", "s2", "s3"]);

    // Only requests left: a new frame is refused, nothing is lost.
    assert_eq!(outbox.push(spawn("s4")), Err(OutboxFull(4)));
    assert_eq!(
        outbox.push(text(FrameClass::Notice, "late")),
        Err(OutboxFull(4))
    );
    assert_eq!(bodies(&outbox), ["s1", "ask1", "s2", "s3"]);
    // Every eviction and refusal is counted for the client's notice.
    let batch = outbox.peek(1);
    assert_eq!(batch.dropped, 6);
    outbox.ack(None, batch.dropped);
    assert_eq!(outbox.peek(1).dropped, 0);
}

#[test]
fn a_reservation_holds_its_place_and_blocks_what_follows() {
    let outbox = Outbox::new(10);
    outbox.push(text(FrameClass::Notice, "before")).unwrap();
    let slot = outbox.reserve();
    outbox.push(text(FrameClass::Resumable, "after")).unwrap();
    assert_eq!(bodies(&outbox), ["before"], "nothing passes an open slot");
    slot.fill(text(FrameClass::Notice, "accepted")).unwrap();
    assert_eq!(bodies(&outbox), ["before", "accepted", "after"]);

    // A slot dropped unfilled lets the rest through.
    let slot = outbox.reserve();
    outbox.push(text(FrameClass::Notice, "next")).unwrap();
    assert_eq!(bodies(&outbox).len(), 3);
    drop(slot);
    assert_eq!(bodies(&outbox), ["before", "accepted", "after", "next"]);
}

#[test]
fn a_queued_spawn_can_be_withdrawn_and_its_credential_replaced() {
    let outbox = Outbox::new(10);
    outbox.push(spawn("s1")).unwrap();
    outbox.push(spawn("s2")).unwrap();
    let (id, _) = outbox.peek(1).frames.remove(0);
    let fresh = WorkerCredential::new("swc1.fresh".into(), "wh-x".into(), 99);
    outbox.update_credential(id, &fresh);
    let Outgoing::Spawn(first) = outbox.peek(1).frames.remove(0).1 else {
        panic!("not a spawn");
    };
    assert_eq!(first.frame.credential.token(), "swc1.fresh");
    assert!(outbox.withdraw_spawn("s1"));
    assert!(!outbox.withdraw_spawn("s1"));
    assert_eq!(bodies(&outbox), ["s2"]);
}

#[test]
fn a_new_socket_replaces_the_old_one() {
    let outbox = Outbox::new(10);
    let first = outbox.attach();
    assert!(outbox.is_attached());
    let second = outbox.attach();
    assert_eq!(*first.close.borrow(), Some(CloseReason::Replaced));
    assert_eq!(*second.close.borrow(), None);
    assert!(
        !outbox.detach(first.conn),
        "the old socket no longer owns the session"
    );
    assert!(outbox.is_attached());
    outbox.close(CloseReason::Deleted);
    assert_eq!(*second.close.borrow(), Some(CloseReason::Deleted));
    assert!(outbox.detach(second.conn));
    assert!(!outbox.is_attached());
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_wakes_on_push_and_on_fill() {
    let outbox = std::sync::Arc::new(Outbox::new(10));
    let waiter = {
        let outbox = outbox.clone();
        tokio::spawn(async move { outbox.next_batch(8).await.frames.len() })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!waiter.is_finished());
    outbox.push(text(FrameClass::Notice, "x")).unwrap();
    assert_eq!(waiter.await.unwrap(), 1);

    outbox.ack(Some(u64::MAX), 0);
    let slot = outbox.reserve();
    outbox.push(text(FrameClass::Notice, "y")).unwrap();
    let waiter = {
        let outbox = outbox.clone();
        tokio::spawn(async move { outbox.next_batch(8).await.frames.len() })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!waiter.is_finished(), "blocked behind the open slot");
    slot.fill(text(FrameClass::Notice, "z")).unwrap();
    assert_eq!(waiter.await.unwrap(), 2);
}
