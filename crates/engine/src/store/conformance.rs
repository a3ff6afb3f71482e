//! The behaviour every `TaskStore` backend must show: one async function
//! per case, each given a fresh store, run against memory and SQLite by the
//! engine's tests and against PostgreSQL by `swarmd-postgres`'s, through
//! [`task_store_conformance!`](crate::task_store_conformance). The builders
//! are public for backend-specific tests.

mod list;
mod runs;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::json;

pub use list::{
    count_by_agent_counts_the_newest_of_a_status, list_page_ends_at_its_byte_budget,
    list_tasks_filters_by_session_parent_prompt_and_since, list_tasks_filters_by_status_and_agent,
    list_tasks_pages_newest_first,
};
pub use runs::{
    flow_docs_are_inserted_once, list_runs_filters_and_pages_newest_first,
    open_runs_excludes_terminal_ones, prune_removes_old_terminal_runs, put_run,
    run_keys_resolve_to_the_first_writer, run_record, runs_round_trip_and_overwrite,
};

use crate::audit::{AuditAction, AuditRecord};
use crate::event::{Event, EventRecord};
use crate::gate::Verb;
use crate::ids::{SessionId, TaskId};
use crate::store::{
    HandleRecord, SessionKind, SessionRecord, TaskFilter, TaskStore, WriteOp, commit,
};
use crate::task::{
    AttemptOutcome, AttemptRecord, Policy, SpawnerKind, Task, TaskResult, TaskSpec, TaskStatus,
};

/// One `#[tokio::test]` per conformance case, each on the store that
/// `$fresh` (an expression evaluating to a future of `(guard, Arc<dyn
/// TaskStore>)`, the guard kept alive for the test) makes.
#[macro_export]
macro_rules! task_store_conformance {
    ($fresh:expr) => {
        $crate::task_store_conformance!(@cases $fresh;
            tasks_round_trip_and_overwrite,
            attempts_upsert_and_sort_by_attempt,
            list_tasks_pages_newest_first,
            list_tasks_filters_by_status_and_agent,
            list_tasks_filters_by_session_parent_prompt_and_since,
            list_page_ends_at_its_byte_budget,
            count_by_agent_counts_the_newest_of_a_status,
            idempotency_keys_resolve_to_tasks,
            events_after_is_ascending_and_paged,
            audit_is_newest_first_with_assigned_ids,
            load_live_returns_what_recovery_needs,
            prune_removes_old_terminal_tasks_and_events,
            prune_works_through_large_backlogs,
            done_runs_in_submission_order_under_concurrent_submitters,
            healthcheck_answers,
            runs_round_trip_and_overwrite,
            run_keys_resolve_to_the_first_writer,
            list_runs_filters_and_pages_newest_first,
            open_runs_excludes_terminal_ones,
            flow_docs_are_inserted_once,
            prune_removes_old_terminal_runs,
        );
    };
    (@cases $fresh:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_guard, store) = $fresh.await;
                $crate::store::conformance::$case(store).await;
            }
        )*
    };
}

// ---- builders -------------------------------------------------------------

pub fn new_task(agent: &str, now_ms: u64) -> Task {
    let spec = TaskSpec {
        agent: agent.to_owned(),
        prompt: format!("prompt for {agent}"),
        input: Some(json!({"n": now_ms})),
        ..TaskSpec::default()
    };
    Task::new(TaskId::new(), spec, Policy::default(), 0, now_ms)
}

pub fn running(agent: &str, now_ms: u64) -> Task {
    let mut task = new_task(agent, now_ms);
    task.start_attempt(now_ms + 1).unwrap();
    task
}

pub fn finished(agent: &str, outcome: AttemptOutcome, finished_ms: u64) -> Task {
    let mut task = running(agent, finished_ms.saturating_sub(10));
    let result = TaskResult {
        value: json!("done"),
        ok: outcome == AttemptOutcome::Pass,
    };
    task.finish(outcome, Some(result), None, finished_ms)
        .unwrap();
    task
}

pub fn attempt(task_id: TaskId, attempt: u32, outcome: Option<AttemptOutcome>) -> AttemptRecord {
    AttemptRecord {
        task_id,
        attempt,
        started_ms: 10 * u64::from(attempt),
        lease_deadline_ms: 10 * u64::from(attempt) + 1_800_000,
        spawner: SpawnerKind::Process,
        outcome,
        reason: outcome.map(|o| format!("ended {}", o.as_str())),
        finished_ms: outcome.map(|_| 10 * u64::from(attempt) + 5),
        process_group: None,
        usage: Default::default(),
    }
}

pub fn handle(task_id: TaskId, attempt: u32, exp_secs: u64) -> HandleRecord {
    HandleRecord {
        task_id,
        attempt,
        verbs: vec![Verb::FetchPrompt, Verb::PostResult],
        exp_secs,
    }
}

pub fn digest(n: u8) -> [u8; 32] {
    [n; 32]
}

pub fn event(seq: u64, ts_ms: u64, task_id: TaskId) -> EventRecord {
    EventRecord {
        seq,
        ts_ms,
        session: None,
        event: Event::TaskQueued { task_id },
    }
}

pub fn session_event(seq: u64, ts_ms: u64, sid: SessionId) -> EventRecord {
    EventRecord {
        seq,
        ts_ms,
        session: Some(sid),
        event: Event::SessionAttached { sid },
    }
}

pub fn audit(task_id: TaskId, ts_ms: u64, action: AuditAction) -> AuditRecord {
    AuditRecord {
        id: 0,
        ts_ms,
        task_id,
        attempt: 1,
        agent: "a".to_owned(),
        session: None,
        action,
        detail: json!({"ts": ts_ms}),
    }
}

/// The seqs of the first `limit` events in `store`'s log.
pub async fn event_seqs(store: &dyn TaskStore, limit: usize) -> Vec<u64> {
    let events = store.events_after(0, limit).await.unwrap();
    events.iter().map(|e| e.seq).collect()
}

pub fn session(description: &str) -> SessionRecord {
    SessionRecord {
        sid: SessionId::new(),
        token_digest: "ab".repeat(32),
        roles: vec!["operator".to_owned()],
        kind: SessionKind::MainAi,
        description: Some(description.to_owned()),
        manifest: Some(json!({"agents": ["a"]})),
        created_ms: 1,
        last_seen_ms: 2,
        done_through: Some(7),
        dialect: Some("upstream".to_owned()),
    }
}

pub fn put(task: &Task) -> WriteOp {
    WriteOp::PutTask(Box::new(task.clone()))
}

pub fn all(status: Option<TaskStatus>, agent: Option<&str>, before: Option<TaskId>) -> TaskFilter {
    TaskFilter {
        status,
        agent: agent.map(str::to_owned),
        before,
        limit: usize::MAX,
        ..TaskFilter::default()
    }
}

pub fn ids(tasks: &[Task]) -> Vec<TaskId> {
    tasks.iter().map(|t| t.id).collect()
}

pub async fn apply(store: &dyn TaskStore, batch: Vec<WriteOp>) {
    commit(store, batch).await.unwrap();
}

// ---- conformance cases ----------------------------------------------------

pub async fn tasks_round_trip_and_overwrite(store: Arc<dyn TaskStore>) {
    let mut task = new_task("a", 100);
    apply(&*store, vec![put(&task)]).await;
    assert_eq!(store.task(task.id).await.unwrap(), Some(task.clone()));

    task.start_attempt(200).unwrap();
    apply(&*store, vec![put(&task)]).await;
    let stored = store.task(task.id).await.unwrap().unwrap();
    assert_eq!(stored, task);
    assert_eq!(stored.status(), TaskStatus::Running);
    assert_eq!(stored.attempt, 1);

    // The last write of a batch wins.
    let first = task.clone();
    task.finish(AttemptOutcome::Blocked, None, Some("no".into()), 300)
        .unwrap();
    apply(&*store, vec![put(&first), put(&task)]).await;
    assert_eq!(store.task(task.id).await.unwrap(), Some(task));

    assert_eq!(store.task(TaskId::new()).await.unwrap(), None);
    assert_eq!(store.attempts(TaskId::new()).await.unwrap(), vec![]);
}

pub async fn attempts_upsert_and_sort_by_attempt(store: Arc<dyn TaskStore>) {
    let task = running("a", 1);
    let other = running("a", 2);
    apply(
        &*store,
        vec![
            WriteOp::PutAttempt(attempt(task.id, 2, None)),
            WriteOp::PutAttempt(attempt(other.id, 1, None)),
        ],
    )
    .await;
    apply(
        &*store,
        vec![WriteOp::PutAttempt(attempt(task.id, 3, None))],
    )
    .await;
    apply(
        &*store,
        vec![WriteOp::PutAttempt(attempt(task.id, 1, None))],
    )
    .await;
    let second = attempt(task.id, 2, Some(AttemptOutcome::Failed));
    apply(&*store, vec![WriteOp::PutAttempt(second.clone())]).await;

    let list = store.attempts(task.id).await.unwrap();
    assert_eq!(
        list,
        vec![attempt(task.id, 1, None), second, attempt(task.id, 3, None)]
    );
    assert_eq!(
        store.attempts(other.id).await.unwrap(),
        vec![attempt(other.id, 1, None)]
    );
}

pub async fn idempotency_keys_resolve_to_tasks(store: Arc<dyn TaskStore>) {
    let first = new_task("a", 1);
    let second = new_task("a", 2);
    apply(
        &*store,
        vec![
            put(&first),
            WriteOp::IdempotencyKey {
                key: "k-1".into(),
                task_id: first.id,
            },
        ],
    )
    .await;
    assert_eq!(store.task_for_key("k-1").await.unwrap(), Some(first.id));
    assert_eq!(store.task_for_key("k-2").await.unwrap(), None);
    assert_eq!(store.task_for_key("").await.unwrap(), None);

    apply(
        &*store,
        vec![WriteOp::IdempotencyKey {
            key: "k-1".into(),
            task_id: second.id,
        }],
    )
    .await;
    assert_eq!(store.task_for_key("k-1").await.unwrap(), Some(second.id));
}

pub async fn events_after_is_ascending_and_paged(store: Arc<dyn TaskStore>) {
    let task = new_task("a", 1);
    let sid = SessionId::new();
    let first: Vec<EventRecord> = (1..=4).map(|seq| event(seq, seq * 10, task.id)).collect();
    let mut second: Vec<EventRecord> = (5..=9).map(|seq| event(seq, seq * 10, task.id)).collect();
    second.push(session_event(10, 100, sid));
    apply(&*store, vec![WriteOp::Events(first.clone())]).await;
    apply(
        &*store,
        vec![WriteOp::Events(vec![]), WriteOp::Events(second.clone())],
    )
    .await;
    let everything: Vec<EventRecord> = first.iter().chain(&second).cloned().collect();

    assert_eq!(store.events_after(0, 4).await.unwrap(), everything[..4]);
    assert_eq!(store.events_after(4, 100).await.unwrap(), everything[4..]);
    assert_eq!(store.events_after(7, 2).await.unwrap(), everything[7..9]);
    assert!(store.events_after(10, 100).await.unwrap().is_empty());
    assert!(store.events_after(0, 0).await.unwrap().is_empty());
    assert!(store.events_after(u64::MAX, 10).await.unwrap().is_empty());
    let last = store.events_after(9, 1).await.unwrap();
    assert_eq!(last, vec![session_event(10, 100, sid)]);
}

pub async fn audit_is_newest_first_with_assigned_ids(store: Arc<dyn TaskStore>) {
    let one = new_task("a", 1);
    let two = new_task("a", 2);
    let lines = [
        audit(one.id, 10, AuditAction::Spawned),
        audit(two.id, 20, AuditAction::Spawned),
        audit(one.id, 30, AuditAction::Completed),
        audit(two.id, 40, AuditAction::SpawnFailed),
        audit(one.id, 50, AuditAction::Spawned),
    ];
    apply(&*store, vec![WriteOp::Audit(lines[0].clone())]).await;
    apply(
        &*store,
        lines[1..].iter().cloned().map(WriteOp::Audit).collect(),
    )
    .await;

    let every = store.audit(None, 100).await.unwrap();
    assert_eq!(
        every.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![5, 4, 3, 2, 1]
    );
    for (got, (index, sent)) in every.iter().zip(lines.iter().enumerate().rev()) {
        let mut expected = sent.clone();
        expected.id = index as u64 + 1;
        assert_eq!(got, &expected);
    }
    let of_one = store.audit(Some(one.id), 2).await.unwrap();
    assert_eq!(
        of_one.iter().map(|r| (r.id, r.ts_ms)).collect::<Vec<_>>(),
        vec![(5, 50), (3, 30)]
    );
    assert_eq!(store.audit(Some(two.id), 100).await.unwrap().len(), 2);
    assert!(
        store
            .audit(Some(TaskId::new()), 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.audit(None, 0).await.unwrap().is_empty());
}

pub async fn load_live_returns_what_recovery_needs(store: Arc<dyn TaskStore>) {
    let empty = store.load_live(0).await.unwrap();
    assert!(empty.tasks.is_empty() && empty.attempts.is_empty() && empty.handles.is_empty());
    assert!(empty.sessions.is_empty());
    assert_eq!(empty.last_event_seq, 0);

    let queued = new_task("a", 1);
    let mut retried = running("a", 2);
    retried.start_attempt(3).unwrap();
    let done = finished("a", AttemptOutcome::Pass, 40);
    let cancelled = finished("b", AttemptOutcome::Cancelled, 41);
    let never_started = running("b", 5);
    let s1 = session("one");
    let s2 = session("two");
    let s3 = session("three");
    apply(
        &*store,
        vec![
            put(&retried),
            put(&queued),
            put(&done),
            put(&cancelled),
            put(&never_started),
            WriteOp::PutAttempt(attempt(retried.id, 2, None)),
            WriteOp::PutAttempt(attempt(retried.id, 1, Some(AttemptOutcome::Failed))),
            WriteOp::PutAttempt(attempt(done.id, 1, Some(AttemptOutcome::Pass))),
            WriteOp::PutHandle {
                digest: digest(1),
                record: handle(retried.id, 2, 100),
            },
            WriteOp::PutHandle {
                digest: digest(2),
                record: handle(retried.id, 1, 50),
            },
            WriteOp::PutHandle {
                digest: digest(3),
                record: handle(done.id, 1, 10),
            },
            WriteOp::PutHandle {
                digest: digest(4),
                record: handle(queued.id, 1, 51),
            },
            WriteOp::PutSession(Box::new(s1.clone())),
            WriteOp::PutSession(Box::new(s2.clone())),
            WriteOp::Events(vec![event(1, 1, queued.id), event(2, 2, queued.id)]),
        ],
    )
    .await;
    let mut s1_later = s1.clone();
    s1_later.last_seen_ms = 99;
    apply(
        &*store,
        vec![
            WriteOp::DeleteSession(s2.sid),
            WriteOp::PutSession(Box::new(s3.clone())),
            WriteOp::PutSession(Box::new(s1_later.clone())),
            WriteOp::DeleteSession(SessionId::new()),
            WriteOp::Events(vec![event(3, 3, done.id)]),
        ],
    )
    .await;

    let snap = store.load_live(50).await.unwrap();
    let mut live = vec![queued.clone(), retried.clone(), never_started.clone()];
    live.sort_by_key(|t| t.id);
    assert_eq!(snap.tasks, live);
    assert_eq!(snap.attempts, vec![attempt(retried.id, 2, None)]);
    let mut handles = snap.handles.clone();
    handles.sort_by_key(|(d, _)| *d);
    assert_eq!(
        handles,
        vec![
            (digest(1), handle(retried.id, 2, 100)),
            (digest(4), handle(queued.id, 1, 51)),
        ]
    );
    let mut sessions = vec![s1_later, s3];
    sessions.sort_by_key(|s| s.sid);
    assert_eq!(snap.sessions, sessions);
    assert_eq!(snap.last_event_seq, 3);

    // Expiry is strict: a handle expiring at `now` is gone.
    let later = store.load_live(100).await.unwrap();
    assert!(later.handles.is_empty());
}

pub async fn prune_removes_old_terminal_tasks_and_events(store: Arc<dyn TaskStore>) {
    let old_pass = finished("a", AttemptOutcome::Pass, 100);
    let old_failed = finished("b", AttemptOutcome::Failed, 150);
    let at_cutoff = finished("a", AttemptOutcome::Blocked, 200);
    let recent = finished("a", AttemptOutcome::Pass, 500);
    let live = running("a", 10);
    let queued = new_task("a", 11);
    let all_tasks = [&old_pass, &old_failed, &at_cutoff, &recent, &live, &queued];
    let mut batch: Vec<WriteOp> = Vec::new();
    for (n, task) in all_tasks.iter().enumerate() {
        batch.push(put(task));
        batch.push(WriteOp::PutAttempt(attempt(task.id, 1, None)));
        batch.push(WriteOp::PutHandle {
            digest: digest(n as u8),
            record: handle(task.id, 1, 1_000),
        });
        batch.push(WriteOp::IdempotencyKey {
            key: format!("key-{n}"),
            task_id: task.id,
        });
    }
    batch.push(WriteOp::Events(vec![
        event(1, 50, old_pass.id),
        event(2, 199, old_failed.id),
        event(3, 200, recent.id),
        event(4, 600, live.id),
    ]));
    batch.push(WriteOp::Audit(audit(
        old_pass.id,
        50,
        AuditAction::Completed,
    )));
    apply(&*store, batch).await;

    let mut expected = vec![old_pass.id, old_failed.id];
    expected.sort();
    assert_eq!(store.prune(200).await.unwrap(), expected);

    for gone in [&old_pass, &old_failed] {
        assert_eq!(store.task(gone.id).await.unwrap(), None);
        assert!(store.attempts(gone.id).await.unwrap().is_empty());
    }
    assert_eq!(store.task_for_key("key-0").await.unwrap(), None);
    assert_eq!(store.task_for_key("key-1").await.unwrap(), None);
    for (n, kept) in all_tasks.iter().enumerate().skip(2) {
        assert_eq!(store.task(kept.id).await.unwrap().as_ref(), Some(*kept));
        assert_eq!(store.attempts(kept.id).await.unwrap().len(), 1);
        assert_eq!(
            store.task_for_key(&format!("key-{n}")).await.unwrap(),
            Some(kept.id)
        );
    }
    let handles: BTreeSet<TaskId> = store
        .load_live(0)
        .await
        .unwrap()
        .handles
        .iter()
        .map(|(_, h)| h.task_id)
        .collect();
    let kept: BTreeSet<TaskId> = all_tasks[2..].iter().map(|t| t.id).collect();
    assert_eq!(handles, kept);
    let seqs: Vec<u64> = store
        .events_after(0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, vec![3, 4]);
    // Audit lines outlive their task.
    assert_eq!(store.audit(Some(old_pass.id), 10).await.unwrap().len(), 1);

    assert!(store.prune(200).await.unwrap().is_empty());
    assert_eq!(store.prune(u64::MAX).await.unwrap().len(), 2);
    assert!(store.events_after(0, 100).await.unwrap().is_empty());
    let left = store.list_tasks(&all(None, None, None)).await.unwrap();
    let mut left_ids = ids(&left);
    left_ids.sort();
    let mut live_ids = vec![live.id, queued.id];
    live_ids.sort();
    assert_eq!(left_ids, live_ids);
}

pub async fn prune_works_through_large_backlogs(store: Arc<dyn TaskStore>) {
    let old: Vec<Task> = (0..700)
        .map(|i| finished("a", AttemptOutcome::Pass, 100 + i))
        .collect();
    let mut batch: Vec<WriteOp> = old.iter().map(put).collect();
    batch.extend(
        old.iter()
            .map(|t| WriteOp::PutAttempt(attempt(t.id, 1, None))),
    );
    let task = old[0].id;
    batch.push(WriteOp::Events(
        (1..=9_000).map(|seq| event(seq, seq, task)).collect(),
    ));
    apply(&*store, batch).await;

    let gone = store.prune(10_000).await.unwrap();
    assert_eq!(gone, ids(&old));
    assert!(
        store
            .list_tasks(&all(None, None, None))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.events_after(0, 10).await.unwrap().is_empty());
    assert!(store.attempts(old[699].id).await.unwrap().is_empty());
}

pub async fn done_runs_in_submission_order_under_concurrent_submitters(store: Arc<dyn TaskStore>) {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 100;
    // Submitting under this lock defines the submission order, as the
    // engine's own ordering locks do.
    let next_ticket = Arc::new(Mutex::new(0u64));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let store = Arc::clone(&store);
            let next_ticket = Arc::clone(&next_ticket);
            let acked = Arc::clone(&acked);
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    let task = new_task("a", 1);
                    let mut ticket = next_ticket.lock().unwrap();
                    let seq = *ticket + 1;
                    let acked = Arc::clone(&acked);
                    let mine = *ticket;
                    store.submit(
                        vec![put(&task), WriteOp::Events(vec![event(seq, seq, task.id)])],
                        Box::new(move |outcome| {
                            acked.lock().unwrap().push((mine, outcome.is_ok()));
                        }),
                    );
                    *ticket += 1;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    // Acknowledgements come in order, so this one lands after all the others.
    apply(&*store, vec![]).await;

    let total = THREADS * PER_THREAD;
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked, (0..total).map(|t| (t, true)).collect::<Vec<_>>());
    let stored = store.list_tasks(&all(None, None, None)).await.unwrap();
    assert_eq!(stored.len() as u64, total);
    let seqs = event_seqs(&*store, usize::MAX).await;
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
}

pub async fn healthcheck_answers(store: Arc<dyn TaskStore>) {
    store.healthcheck().await.unwrap();
}
