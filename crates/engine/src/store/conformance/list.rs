//! `TaskStore::list_tasks` conformance: paging newest first, every
//! filter a list may combine, the byte budget of a page, counts by agent.

use super::*;

pub async fn list_tasks_pages_newest_first(store: Arc<dyn TaskStore>) {
    let tasks: Vec<Task> = (0..7).map(|i| new_task("a", i)).collect();
    // Insertion order must not matter: ids carry creation order.
    let mut shuffled: Vec<WriteOp> = tasks.iter().rev().map(put).collect();
    shuffled.swap(1, 5);
    apply(&*store, shuffled).await;
    let newest_first: Vec<TaskId> = tasks.iter().rev().map(|t| t.id).collect();

    let mut filter = TaskFilter {
        limit: 3,
        ..TaskFilter::default()
    };
    let mut pages = Vec::new();
    loop {
        let page = store.list_tasks(&filter).await.unwrap();
        if page.is_empty() {
            break;
        }
        filter.before = page.last().map(|t| t.id);
        pages.push(ids(&page));
    }
    assert_eq!(
        pages,
        vec![
            newest_first[0..3].to_vec(),
            newest_first[3..6].to_vec(),
            newest_first[6..].to_vec(),
        ]
    );

    let full = store.list_tasks(&all(None, None, None)).await.unwrap();
    assert_eq!(full, tasks.iter().rev().cloned().collect::<Vec<_>>());
    // `before` is exclusive, and an id newer than everything excludes nothing.
    let before_fourth = store
        .list_tasks(&all(None, None, Some(tasks[3].id)))
        .await
        .unwrap();
    assert_eq!(
        ids(&before_fourth),
        vec![tasks[2].id, tasks[1].id, tasks[0].id]
    );
    let later = TaskId::new();
    let before_later = store
        .list_tasks(&all(None, None, Some(later)))
        .await
        .unwrap();
    assert_eq!(ids(&before_later), newest_first);
    let nothing = TaskFilter {
        limit: 0,
        ..TaskFilter::default()
    };
    assert!(store.list_tasks(&nothing).await.unwrap().is_empty());
}

pub async fn list_tasks_filters_by_status_and_agent(store: Arc<dyn TaskStore>) {
    let a_queued = new_task("a", 1);
    let b_running = running("b", 2);
    let a_pass = finished("a", AttemptOutcome::Pass, 30);
    let b_pass = finished("b", AttemptOutcome::Pass, 40);
    let a_running = running("a", 5);
    let a_failed = finished("a", AttemptOutcome::Failed, 60);
    let everything = [
        &a_queued, &b_running, &a_pass, &b_pass, &a_running, &a_failed,
    ];
    apply(&*store, everything.iter().map(|t| put(t)).collect()).await;

    let by_status = store
        .list_tasks(&all(Some(TaskStatus::Pass), None, None))
        .await
        .unwrap();
    assert_eq!(ids(&by_status), vec![b_pass.id, a_pass.id]);
    let by_agent = store.list_tasks(&all(None, Some("a"), None)).await.unwrap();
    assert_eq!(
        ids(&by_agent),
        vec![a_failed.id, a_running.id, a_pass.id, a_queued.id]
    );
    let both = store
        .list_tasks(&all(Some(TaskStatus::Running), Some("a"), None))
        .await
        .unwrap();
    assert_eq!(ids(&both), vec![a_running.id]);
    let paged = store
        .list_tasks(&TaskFilter {
            status: None,
            agent: Some("a".into()),
            before: Some(a_running.id),
            limit: 1,
            ..TaskFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&paged), vec![a_pass.id]);
    let none = store
        .list_tasks(&all(Some(TaskStatus::Cancelled), None, None))
        .await
        .unwrap();
    assert!(none.is_empty());
    assert!(
        store
            .list_tasks(&all(None, Some("zzz"), None))
            .await
            .unwrap()
            .is_empty()
    );

    // A status change moves the task between filters.
    let mut moved = a_queued.clone();
    moved.start_attempt(100).unwrap();
    apply(&*store, vec![put(&moved)]).await;
    let queued = store
        .list_tasks(&all(Some(TaskStatus::Queued), None, None))
        .await
        .unwrap();
    assert!(queued.is_empty());
    let running_a = store
        .list_tasks(&all(Some(TaskStatus::Running), Some("a"), None))
        .await
        .unwrap();
    assert_eq!(ids(&running_a), vec![a_running.id, moved.id]);
}

pub async fn list_tasks_filters_by_session_parent_prompt_and_since(store: Arc<dyn TaskStore>) {
    let sid = SessionId::new();
    let mut owned = new_task("a", 1);
    owned.session = Some(sid);
    owned.prompt = "Fix the FLAKY test".into();
    let mut child = new_task("a", 2);
    child.parent = Some(owned.id);
    child.session = Some(sid);
    let mut other = new_task("b", 3);
    other.continued_from = Some(owned.id);
    apply(&*store, [&owned, &child, &other].map(put).to_vec()).await;
    let list = |filter: TaskFilter| {
        let store = store.clone();
        async move {
            let filter = TaskFilter {
                limit: 100,
                ..filter
            };
            ids(&store.list_tasks(&filter).await.unwrap())
        }
    };

    let by_session = list(TaskFilter {
        session: Some(sid),
        ..TaskFilter::default()
    });
    assert_eq!(by_session.await, vec![child.id, owned.id]);
    let by_parent = list(TaskFilter {
        parent: Some(owned.id),
        ..TaskFilter::default()
    });
    assert_eq!(by_parent.await, vec![child.id]);
    let continuations = list(TaskFilter {
        continued_from: Some(owned.id),
        ..TaskFilter::default()
    });
    assert_eq!(continuations.await, vec![other.id]);
    // ASCII letters match in either case.
    let by_text = list(TaskFilter {
        prompt_contains: Some("flaky TEST".into()),
        ..TaskFilter::default()
    });
    assert_eq!(by_text.await, vec![owned.id]);
    let no_text = list(TaskFilter {
        prompt_contains: Some("nowhere".into()),
        ..TaskFilter::default()
    });
    assert!(no_text.await.is_empty());
    // `since` is inclusive, `before` exclusive: a range of ids, so of times.
    let since = list(TaskFilter {
        since: Some(child.id),
        ..TaskFilter::default()
    });
    assert_eq!(since.await, vec![other.id, child.id]);
    let window = list(TaskFilter {
        since: Some(owned.id),
        before: Some(other.id),
        ..TaskFilter::default()
    });
    assert_eq!(window.await, vec![child.id, owned.id]);
    let empty = list(TaskFilter {
        since: Some(other.id),
        before: Some(owned.id),
        ..TaskFilter::default()
    });
    assert!(empty.await.is_empty());
    let both = list(TaskFilter {
        session: Some(sid),
        prompt_contains: Some("prompt for".into()),
        ..TaskFilter::default()
    });
    assert_eq!(both.await, vec![child.id]);
}

pub async fn list_page_ends_at_its_byte_budget(store: Arc<dyn TaskStore>) {
    // Six tasks of 64 KiB prompts; a budget of 150 KiB is reached by the
    // third, so a page holds three and says it was cut.
    let big = |n: u64| {
        let mut task = new_task("a", n);
        task.prompt = "x".repeat(64 << 10);
        task
    };
    let tasks: Vec<Task> = (0..6).map(big).collect();
    apply(&*store, tasks.iter().map(put).collect()).await;
    let newest_first: Vec<TaskId> = tasks.iter().rev().map(|t| t.id).collect();
    let budget = 150 << 10;

    let mut filter = all(None, None, None);
    let mut pages = Vec::new();
    loop {
        let page = store.list_page(&filter, budget).await.unwrap();
        pages.push((ids(&page.tasks), page.cut));
        if !page.cut {
            break;
        }
        filter.before = page.tasks.last().map(|t| t.id);
    }
    assert_eq!(
        pages,
        vec![
            (newest_first[0..3].to_vec(), true),
            (newest_first[3..6].to_vec(), false),
        ]
    );
    // A budget smaller than one task still returns one; an unbounded one
    // returns them all, uncut; the limit, not the budget, ends a page of
    // exactly `limit` tasks.
    let one = store.list_page(&all(None, None, None), 1).await.unwrap();
    assert_eq!(
        (ids(&one.tasks), one.cut),
        (newest_first[..1].to_vec(), true)
    );
    let whole = store
        .list_page(&all(None, None, None), usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        (ids(&whole.tasks), whole.cut),
        (newest_first.clone(), false)
    );
    let limited = TaskFilter {
        limit: 2,
        ..TaskFilter::default()
    };
    let two = store.list_page(&limited, budget).await.unwrap();
    assert_eq!(
        (ids(&two.tasks), two.cut),
        (newest_first[..2].to_vec(), false)
    );
    // A page that reaches its budget is cut only while tasks are left.
    let last_two = TaskFilter {
        before: Some(tasks[2].id),
        limit: 1000,
        ..TaskFilter::default()
    };
    let end = store.list_page(&last_two, 1).await.unwrap();
    assert_eq!((ids(&end.tasks), end.cut), (vec![tasks[1].id], true));
    let tail = TaskFilter {
        before: Some(tasks[1].id),
        ..last_two
    };
    let end = store.list_page(&tail, 1).await.unwrap();
    assert_eq!((ids(&end.tasks), end.cut), (vec![tasks[0].id], false));
}

pub async fn count_by_agent_counts_the_newest_of_a_status(store: Arc<dyn TaskStore>) {
    let mut batch = Vec::new();
    for (i, agent) in ["a", "b", "a", "c", "a"].into_iter().enumerate() {
        batch.push(put(&new_task(agent, i as u64)));
    }
    batch.push(put(&running("a", 10)));
    batch.push(put(&running("b", 11)));
    apply(&*store, batch).await;

    let queued = store
        .count_by_agent(TaskStatus::Queued, 1000)
        .await
        .unwrap();
    let expect = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
        pairs.iter().map(|(a, n)| ((*a).to_owned(), *n)).collect()
    };
    assert_eq!(queued, expect(&[("a", 3), ("b", 1), ("c", 1)]));
    let running = store
        .count_by_agent(TaskStatus::Running, 1000)
        .await
        .unwrap();
    assert_eq!(running, expect(&[("a", 1), ("b", 1)]));
    // The window takes the newest: the last two queued are "c" and "a".
    let newest = store.count_by_agent(TaskStatus::Queued, 2).await.unwrap();
    assert_eq!(newest, expect(&[("a", 1), ("c", 1)]));
    let none = store.count_by_agent(TaskStatus::Pass, 1000).await.unwrap();
    assert!(none.is_empty());
}
