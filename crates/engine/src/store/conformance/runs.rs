//! Flow run and flow document conformance: round trips, keys, listings,
//! open runs, content-addressed documents and retention.

use serde_json::Value;

use super::*;
use crate::ids::RunId;
use crate::run::{FlowDoc, RunFilter, RunRecord, RunStatus, RunSummary};

pub fn run_record(flow: &str, status: RunStatus, updated_ms: u64) -> RunRecord {
    RunRecord {
        id: RunId::new(),
        flow: flow.to_owned(),
        flow_hash: format!("sha256:{}", "0f".repeat(32)),
        status,
        session: None,
        owner: Some("operator".to_owned()),
        idempotency_key: None,
        input: json!({"flow": flow}),
        created_ms: updated_ms.saturating_sub(1),
        updated_ms,
        version: 1,
        state: json!({"nodes": {"a": {"status": "running", "deep": [[["x"]]]}}}),
        result: None,
        error: None,
    }
}

pub fn put_run(run: &RunRecord) -> WriteOp {
    WriteOp::PutRun(Box::new(run.clone()))
}

fn run_ids(runs: &[RunRecord]) -> Vec<RunId> {
    runs.iter().map(|r| r.id).collect()
}

fn listed_ids(runs: &[RunSummary]) -> Vec<RunId> {
    runs.iter().map(|r| r.id).collect()
}

fn runs_where(status: Option<RunStatus>, flow: Option<&str>) -> RunFilter {
    RunFilter {
        status,
        flow: flow.map(str::to_owned),
        limit: usize::MAX,
        ..RunFilter::default()
    }
}

pub async fn runs_round_trip_and_overwrite(store: Arc<dyn TaskStore>) {
    let mut run = run_record("review", RunStatus::Running, 10);
    assert_eq!(store.run(run.id).await.unwrap(), None);
    apply(&*store, vec![put_run(&run)]).await;
    assert_eq!(store.run(run.id).await.unwrap(), Some(run.clone()));

    run.status = RunStatus::Passed;
    run.version = 2;
    run.updated_ms = 20;
    run.session = Some(SessionId::new());
    run.result = Some(json!({"ok": true}));
    run.error = Some("none".to_owned());
    run.state = Value::Null;
    // Two writes of one run in a batch: the last stands.
    let mut stale = run.clone();
    stale.version = 1;
    apply(&*store, vec![put_run(&stale), put_run(&run)]).await;
    assert_eq!(store.run(run.id).await.unwrap(), Some(run.clone()));
    let listed = store.list_runs(&runs_where(None, None)).await.unwrap();
    // A listing shows the run's summary: its error, never its journal.
    assert_eq!(listed, vec![RunSummary::from(&run)]);
    assert_eq!(listed[0].error.as_deref(), Some("none"));
}

pub async fn run_keys_resolve_to_the_first_writer(store: Arc<dyn TaskStore>) {
    let mut first = run_record("review", RunStatus::Running, 10);
    first.idempotency_key = Some("k-1".to_owned());
    apply(&*store, vec![put_run(&first)]).await;
    assert_eq!(store.run_for_key("k-1").await.unwrap(), Some(first.id));
    assert_eq!(store.run_for_key("k-2").await.unwrap(), None);
    // A run key is not a task key, nor the other way round.
    assert_eq!(store.task_for_key("k-1").await.unwrap(), None);

    // Another run written with the same key leaves the key to the first,
    // and is itself stored whole.
    let mut second = run_record("review", RunStatus::Running, 11);
    second.idempotency_key = Some("k-1".to_owned());
    apply(&*store, vec![put_run(&second)]).await;
    assert_eq!(store.run_for_key("k-1").await.unwrap(), Some(first.id));
    assert_eq!(store.run(second.id).await.unwrap(), Some(second.clone()));

    // Rewriting the first keeps its key; so does a batch holding both.
    first.version = 2;
    second.version = 2;
    apply(&*store, vec![put_run(&second), put_run(&first)]).await;
    assert_eq!(store.run_for_key("k-1").await.unwrap(), Some(first.id));

    // Two new runs with one key in one batch: the first op keeps it.
    let mut third = run_record("review", RunStatus::Running, 12);
    third.idempotency_key = Some("k-3".to_owned());
    let mut fourth = run_record("review", RunStatus::Running, 13);
    fourth.idempotency_key = Some("k-3".to_owned());
    apply(&*store, vec![put_run(&third), put_run(&fourth)]).await;
    assert_eq!(store.run_for_key("k-3").await.unwrap(), Some(third.id));
    assert_eq!(store.run(fourth.id).await.unwrap(), Some(fourth));
}

pub async fn list_runs_filters_and_pages_newest_first(store: Arc<dyn TaskStore>) {
    let sid = SessionId::new();
    let mut runs: Vec<RunRecord> = (0..6)
        .map(|i| {
            let status = if i % 2 == 0 {
                RunStatus::Running
            } else {
                RunStatus::Failed
            };
            run_record(if i < 3 { "a" } else { "b" }, status, 10 + i)
        })
        .collect();
    runs[1].session = Some(sid);
    runs[4].session = Some(sid);
    // Insertion order must not matter: ids carry creation order.
    apply(&*store, runs.iter().rev().map(put_run).collect()).await;
    let newest_first: Vec<RunId> = runs.iter().rev().map(|r| r.id).collect();

    let mut filter = RunFilter {
        limit: 4,
        ..RunFilter::default()
    };
    let page = store.list_runs(&filter).await.unwrap();
    assert_eq!(listed_ids(&page), newest_first[..4]);
    filter.before = page.last().map(|r| r.id);
    let page = store.list_runs(&filter).await.unwrap();
    assert_eq!(listed_ids(&page), newest_first[4..]);
    filter.before = Some(runs[0].id);
    assert!(store.list_runs(&filter).await.unwrap().is_empty());

    let full = store.list_runs(&runs_where(None, None)).await.unwrap();
    assert_eq!(
        full,
        runs.iter().rev().map(RunSummary::from).collect::<Vec<_>>()
    );
    let failed = store
        .list_runs(&runs_where(Some(RunStatus::Failed), None))
        .await
        .unwrap();
    assert_eq!(
        listed_ids(&failed),
        vec![runs[5].id, runs[3].id, runs[1].id]
    );
    let failed_a = store
        .list_runs(&runs_where(Some(RunStatus::Failed), Some("a")))
        .await
        .unwrap();
    assert_eq!(listed_ids(&failed_a), vec![runs[1].id]);
    let of_b = store.list_runs(&runs_where(None, Some("b"))).await.unwrap();
    assert_eq!(listed_ids(&of_b), vec![runs[5].id, runs[4].id, runs[3].id]);
    let of_session = RunFilter {
        session: Some(sid),
        before: Some(runs[5].id),
        limit: 1,
        ..RunFilter::default()
    };
    let page = store.list_runs(&of_session).await.unwrap();
    assert_eq!(listed_ids(&page), vec![runs[4].id]);
    let none = store
        .list_runs(&runs_where(Some(RunStatus::Waiting), None))
        .await
        .unwrap();
    assert!(none.is_empty());
}

pub async fn open_runs_excludes_terminal_ones(store: Arc<dyn TaskStore>) {
    let runs: Vec<RunRecord> = RunStatus::ALL
        .into_iter()
        .chain([RunStatus::Running])
        .enumerate()
        .map(|(i, status)| run_record("f", status, i as u64))
        .collect();
    apply(&*store, runs.iter().rev().map(put_run).collect()).await;
    let open = store.open_runs().await.unwrap();
    // Running, waiting and the last running one, oldest first.
    assert_eq!(
        open,
        vec![runs[0].clone(), runs[1].clone(), runs[5].clone()]
    );

    // A run that ends leaves the open set.
    let mut ended = runs[1].clone();
    ended.status = RunStatus::Passed;
    apply(&*store, vec![put_run(&ended)]).await;
    assert_eq!(
        run_ids(&store.open_runs().await.unwrap()),
        vec![runs[0].id, runs[5].id]
    );
}

pub async fn flow_docs_are_inserted_once(store: Arc<dyn TaskStore>) {
    let hash = format!("sha256:{}", "ab".repeat(32));
    let doc = FlowDoc {
        hash: hash.clone(),
        name: "review".to_owned(),
        doc: json!({"name": "review", "nodes": [{"id": "a", "deep": [[[1]]]}]}),
    };
    assert_eq!(store.flow_doc(&hash).await.unwrap(), None);
    apply(&*store, vec![WriteOp::PutFlow(Box::new(doc.clone()))]).await;
    assert_eq!(store.flow_doc(&hash).await.unwrap(), Some(doc.clone()));

    // Content-addressed: a second document under the hash changes nothing,
    // in a later batch or in the same one.
    let other = FlowDoc {
        name: "other".to_owned(),
        doc: json!({"changed": true}),
        ..doc.clone()
    };
    apply(&*store, vec![WriteOp::PutFlow(Box::new(other.clone()))]).await;
    assert_eq!(store.flow_doc(&hash).await.unwrap(), Some(doc));
    let fresh = FlowDoc {
        hash: format!("sha256:{}", "cd".repeat(32)),
        ..other.clone()
    };
    let shadow = FlowDoc {
        name: "shadow".to_owned(),
        ..fresh.clone()
    };
    apply(
        &*store,
        vec![
            WriteOp::PutFlow(Box::new(fresh.clone())),
            WriteOp::PutFlow(Box::new(shadow)),
        ],
    )
    .await;
    assert_eq!(store.flow_doc(&fresh.hash).await.unwrap(), Some(fresh));
}

pub async fn prune_removes_old_terminal_runs(store: Arc<dyn TaskStore>) {
    let mut old_passed = run_record("f", RunStatus::Passed, 100);
    old_passed.idempotency_key = Some("old".to_owned());
    let old_cancelled = run_record("f", RunStatus::Cancelled, 150);
    let at_cutoff = run_record("f", RunStatus::Failed, 200);
    let recent = run_record("f", RunStatus::Passed, 500);
    let old_waiting = run_record("f", RunStatus::Waiting, 10);
    let old_running = run_record("f", RunStatus::Running, 10);
    let all_runs = [
        &old_passed,
        &old_cancelled,
        &at_cutoff,
        &recent,
        &old_waiting,
        &old_running,
    ];
    let doc = FlowDoc {
        hash: old_passed.flow_hash.clone(),
        name: "f".to_owned(),
        doc: json!({}),
    };
    let mut batch: Vec<WriteOp> = all_runs.iter().map(|r| put_run(r)).collect();
    batch.push(WriteOp::PutFlow(Box::new(doc.clone())));
    apply(&*store, batch).await;

    store.prune(200).await.unwrap();
    assert_eq!(store.run(old_passed.id).await.unwrap(), None);
    assert_eq!(store.run(old_cancelled.id).await.unwrap(), None);
    assert_eq!(store.run_for_key("old").await.unwrap(), None);
    for kept in [&at_cutoff, &recent, &old_waiting, &old_running] {
        assert_eq!(store.run(kept.id).await.unwrap().as_ref(), Some(kept));
    }
    assert_eq!(store.flow_doc(&doc.hash).await.unwrap(), Some(doc));

    // The key of a pruned run is free for a new one.
    let mut reused = run_record("f", RunStatus::Running, 600);
    reused.idempotency_key = Some("old".to_owned());
    apply(&*store, vec![put_run(&reused)]).await;
    assert_eq!(store.run_for_key("old").await.unwrap(), Some(reused.id));
}
