//! Sessions across nodes, through the database alone: a session written by
//! a node is homed there and found by sid, token digest and role; mail
//! for a session is read by whichever node is its home, in order, and
//! replies by the node they are for; a move or an adoption returns the
//! previous home and the `task_done` watermark the record holds;
//! mail for a session that is gone is not written; a fenced node moves no
//! session and sends no mail.

use swarmd_engine::ids::SessionId;
use swarmd_engine::store::conformance::apply;
use swarmd_engine::store::{SessionKind, SessionRecord, WriteOp};
use swarmd_postgres::testing::{TestDatabase, fresh_database};
use swarmd_postgres::{NewMail, PgDb, PgTaskStore};
use uuid::Uuid;

fn record(digest: &str, roles: &[&str]) -> SessionRecord {
    SessionRecord {
        sid: SessionId::new(),
        token_digest: digest.to_owned(),
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        kind: SessionKind::MainAi,
        description: None,
        manifest: None,
        created_ms: 5,
        last_seen_ms: 5,
        done_through: None,
        dialect: None,
    }
}

fn frame(sid: SessionId, n: usize) -> NewMail {
    NewMail {
        sid,
        to_node: None,
        reply_to: None,
        kind: "text".into(),
        req_id: Some(format!("r-{n}")),
        body: format!("{n}"),
    }
}

/// Two registered nodes on a fresh database (kept while it is held).
async fn two_nodes() -> (TestDatabase, (Uuid, PgDb), (Uuid, PgDb)) {
    let database = fresh_database().await;
    let mut nodes = Vec::new();
    for url in ["http://a", "http://b"] {
        let id = Uuid::new_v4();
        let db = PgDb::open(database.options()).await.unwrap();
        db.cluster().register_node(id, url).await.unwrap();
        nodes.push((id, db));
    }
    let b = nodes.pop().unwrap();
    let a = nodes.pop().unwrap();
    (database, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_follows_the_session_home_in_order() {
    let (_database, (a_id, a_db), (b_id, b_db)) = two_nodes().await;

    // Written by node A, the session is homed on A, and B finds it.
    let session = record(&"ab".repeat(32), &["main-ai"]);
    let sid = session.sid;
    apply(
        &PgTaskStore::new(a_db.clone()),
        vec![WriteOp::PutSession(Box::new(session.clone()))],
    )
    .await;
    let found = b_db.cluster().session_by_sid(sid).await.unwrap().unwrap();
    assert_eq!((found.record, found.home), (session.clone(), Some(a_id)));
    let by_digest = b_db
        .cluster()
        .session_by_digest(&"ab".repeat(32))
        .await
        .unwrap();
    assert_eq!(by_digest.map(|h| h.record.sid), Some(sid));
    assert!(
        b_db.cluster()
            .session_by_digest(&"cd".repeat(32))
            .await
            .unwrap()
            .is_none()
    );
    let holders = b_db
        .cluster()
        .sessions_with_roles(&["senior".into(), "main-ai".into()])
        .await
        .unwrap();
    assert_eq!(
        holders.iter().map(|h| h.record.sid).collect::<Vec<_>>(),
        [sid]
    );
    assert_eq!(
        b_db.cluster()
            .sessions_created_after(4)
            .await
            .unwrap()
            .len(),
        1,
        "a login is seen by its created_ms"
    );
    assert!(
        b_db.cluster()
            .sessions_created_after(5)
            .await
            .unwrap()
            .is_empty()
    );

    // Frames from B wait for the session's home, A, in order; a reply
    // waits for the node it is for.
    let sent = b_db
        .cluster()
        .send_mail(&[frame(sid, 1), frame(sid, 2), frame(sid, 3)])
        .await
        .unwrap();
    assert_eq!(sent, 3);
    let reply = NewMail {
        to_node: Some(b_id),
        kind: "reply".into(),
        ..frame(sid, 9)
    };
    a_db.cluster().send_mail(&[reply]).await.unwrap();
    let bodies = |mail: Vec<swarmd_postgres::Mail>| -> Vec<String> {
        mail.into_iter().map(|m| m.body).collect()
    };
    assert_eq!(
        bodies(a_db.cluster().mail_for(a_id, 0, 100).await.unwrap()),
        ["1", "2", "3"]
    );
    assert_eq!(
        bodies(b_db.cluster().mail_for(b_id, 0, 100).await.unwrap()),
        ["9"]
    );
    let page = a_db.cluster().mail_for(a_id, 0, 2).await.unwrap();
    let after = page.last().unwrap().id;
    assert_eq!(
        bodies(a_db.cluster().mail_for(a_id, after, 2).await.unwrap()),
        ["3"]
    );

    // The session moves to B: its frames follow it.
    let moved = b_db
        .cluster()
        .move_session_home(sid, b_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((moved.sid, moved.previous), (sid, Some(a_id)));
    assert!(
        a_db.cluster()
            .mail_for(a_id, 0, 100)
            .await
            .unwrap()
            .is_empty()
    );
    let on_b = b_db.cluster().mail_for(b_id, 0, 100).await.unwrap();
    assert_eq!(bodies(on_b.clone()), ["1", "2", "3", "9"]);

    // Delivered and withdrawn mail goes; a session that is gone gets none.
    b_db.cluster().delete_mail(&[on_b[0].id]).await.unwrap();
    assert!(b_db.cluster().withdraw_mail(sid, "r-2").await.unwrap());
    assert_eq!(
        bodies(b_db.cluster().mail_for(b_id, 0, 100).await.unwrap()),
        ["3", "9"]
    );
    let gone = SessionId::new();
    assert_eq!(
        b_db.cluster().send_mail(&[frame(gone, 1)]).await.unwrap(),
        0
    );
    assert_eq!(
        b_db.cluster().move_session_home(gone, b_id).await.unwrap(),
        None
    );
    apply(
        &PgTaskStore::new(b_db.clone()),
        vec![WriteOp::DeleteSession(sid)],
    )
    .await;
    assert_eq!(
        a_db.query_i32("SELECT count(*)::int FROM session_mail")
            .await,
        [0],
        "mail goes with its session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_node_neither_moves_a_session_nor_sends_mail() {
    let (_database, (a_id, a_db), (b_id, b_db)) = two_nodes().await;
    let session = record(&"cd".repeat(32), &[]);
    let sid = session.sid;
    apply(
        &PgTaskStore::new(b_db.clone()),
        vec![WriteOp::PutSession(Box::new(session))],
    )
    .await;
    // Alive, A may take the session home and send it mail.
    let moved = a_db
        .cluster()
        .move_session_home(sid, a_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.previous, Some(b_id));
    assert_eq!(a_db.cluster().send_mail(&[frame(sid, 1)]).await.unwrap(), 1);

    // A's lease runs out and B takes it over: A is fenced.
    a_db.execute_sql(&format!(
        "UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = '{a_id}'"
    ))
    .await;
    assert_eq!(
        b_db.cluster()
            .take_over_expired(std::time::Duration::from_secs(2))
            .await
            .unwrap()
            .len(),
        1
    );
    let moved = b_db.cluster().move_session_home(sid, b_id).await.unwrap();
    assert_eq!(moved.map(|m| m.previous), Some(Some(a_id)));

    let refused = a_db
        .cluster()
        .move_session_home(sid, a_id)
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    assert!(a_db.cluster().is_fenced());
    let refused = a_db
        .cluster()
        .send_mail(&[frame(sid, 2)])
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    let refused = a_db
        .cluster()
        .adopt_orphan_sessions(a_id)
        .await
        .unwrap_err();
    assert!(refused.is_fenced(), "{refused}");
    // Nothing of A's late writes is there: the session stays on B, and
    // only the mail A sent while alive waits for it.
    let found = b_db.cluster().session_by_sid(sid).await.unwrap().unwrap();
    assert_eq!(found.home, Some(b_id));
    let mail = b_db.cluster().mail_for(b_id, 0, 10).await.unwrap();
    assert_eq!(
        mail.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        ["1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_home_reads_the_watermark_the_previous_home_stored() {
    let (_database, (a_id, a_db), (b_id, b_db)) = two_nodes().await;
    let mut session = record(&"ef".repeat(32), &[]);
    session.done_through = Some(41);
    let sid = session.sid;
    let store = PgTaskStore::new(a_db.clone());
    apply(&store, vec![WriteOp::PutSession(Box::new(session.clone()))]).await;
    let moved = b_db
        .cluster()
        .move_session_home(sid, b_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((moved.previous, moved.done_through), (Some(a_id), Some(41)));

    // B dies; A adopts the session with the watermark B's record holds.
    let mut later = session;
    later.done_through = Some(57);
    apply(
        &PgTaskStore::new(b_db.clone()),
        vec![WriteOp::PutSession(Box::new(later))],
    )
    .await;
    b_db.execute_sql(&format!(
        "UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = '{b_id}'"
    ))
    .await;
    a_db.cluster()
        .take_over_expired(std::time::Duration::from_secs(2))
        .await
        .unwrap();
    let adopted = a_db.cluster().adopt_orphan_sessions(a_id).await.unwrap();
    assert_eq!(
        adopted,
        [swarmd_postgres::Homed {
            sid,
            previous: Some(b_id),
            done_through: Some(57),
        }]
    );
    // A record without one reads as none.
    let bare = record(&"01".repeat(32), &[]);
    apply(&store, vec![WriteOp::PutSession(Box::new(bare.clone()))]).await;
    let moved = b_db.cluster().move_session_home(bare.sid, b_id).await;
    assert!(moved.unwrap_err().is_fenced(), "B was declared dead");
    let moved = a_db
        .cluster()
        .move_session_home(bare.sid, a_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.done_through, None);
}
