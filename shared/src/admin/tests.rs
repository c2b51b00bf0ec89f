use super::*;
use crate::store::memory::MemoryStore;
use crate::task::TaskRef;
use crate::task::{Lease, TaskId};

async fn seeded(store: &MemoryStore, tenant: &str, n: usize) -> Vec<TaskId> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let t = TaskRecord::new(
            tenant.into(),
            TaskId::generate(),
            "wait",
            None,
            1000,
            json!({}),
        );
        store.create(&t, &json!({"secret": "s3"})).await.unwrap();
        ids.push(t.task_id);
    }
    ids.sort();
    ids
}

async fn all_pages(store: &MemoryStore, mut q: ListQuery) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let page = list(store, &q).await.unwrap();
        assert!(page.tasks.len() <= q.limit);
        seen.extend(page.tasks.into_iter().map(|t| t.task_id));
        match page.next {
            Some(n) => q.after = Some(n),
            None => return seen,
        }
    }
}

#[tokio::test]
async fn pages_cover_every_unfinished_task_once() {
    let store = MemoryStore::new();
    let a = seeded(&store, "a", 7).await;
    let b = seeded(&store, "a#b", 3).await;
    let q = ListQuery {
        tenant: Some("a".into()),
        limit: 3,
        ..ListQuery::default()
    };
    assert_eq!(all_pages(&store, q).await, a);
    let mut every = all_pages(
        &store,
        ListQuery {
            limit: 4,
            ..ListQuery::default()
        },
    )
    .await;
    every.sort();
    let mut want = [a, b].concat();
    want.sort();
    assert_eq!(every, want);
}

#[tokio::test]
async fn a_status_filter_fills_pages_from_later_store_pages() {
    let store = MemoryStore::new();
    let ids = seeded(&store, "t", 6).await;
    for id in [&ids[1], &ids[4]] {
        let mut t = store
            .get(TaskRef {
                tenant: &"t".into(),
                task_id: id,
            })
            .await
            .unwrap()
            .unwrap();
        t.require_input([("k".to_owned(), json!({}))].into())
            .unwrap();
        store.update(&t).await.unwrap();
    }
    let q = ListQuery {
        tenant: Some("t".into()),
        status: Some(TaskStatus::InputRequired),
        limit: 2,
        ..ListQuery::default()
    };
    let page = list(&store, &q).await.unwrap();
    let got: Vec<&str> = page.tasks.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(got, [ids[1].as_str(), ids[4].as_str()]);
}

#[tokio::test]
async fn cursors_only_continue_their_own_listing() {
    let store = MemoryStore::new();
    seeded(&store, "a", 3).await;
    let q = ListQuery {
        tenant: Some("a".into()),
        limit: 1,
        ..ListQuery::default()
    };
    let next = list(&store, &q).await.unwrap().next.unwrap();
    let other = ListQuery {
        tenant: Some("b".into()),
        after: Some(next.clone()),
        ..q.clone()
    };
    assert!(matches!(
        list(&store, &other).await,
        Err(AdminError::Invalid(_))
    ));
    let all = ListQuery {
        after: Some(next),
        ..ListQuery::default()
    };
    assert!(matches!(
        list(&store, &all).await,
        Err(AdminError::Invalid(_))
    ));
    for junk in ["", "!!", "dGVzdA", &"A".repeat(5000)] {
        let q = ListQuery {
            after: Some(junk.into()),
            ..ListQuery::default()
        };
        assert!(
            matches!(list(&store, &q).await, Err(AdminError::Invalid(_))),
            "{junk}"
        );
    }
}

#[test]
fn hostile_inputs_are_refused_with_the_input_escaped() {
    let e = check_tenant("a\x1b[2Jb").unwrap_err().to_string();
    assert!(e.contains("\\u{1b}") && !e.contains('\x1b'), "{e}");
    assert!(check_tenant("").is_err());
    assert!(check_tenant(&"x".repeat(MAX_TENANT_LEN + 1)).is_err());
    assert!(check_tenant("alice@example.com").is_ok());
    assert!(check_task_id("tsk_\n").is_err());
    assert!(check_task_id(&"x".repeat(129)).is_err());
    assert!(check_limit(0).is_err() && check_limit(MAX_LIMIT + 1).is_err());
    assert!(parse_status("completed").is_err() && parse_status("WORKING").is_err());
    let long = shown(&"y".repeat(1000));
    assert!(long.chars().count() < 70, "{long}");
}

#[tokio::test]
async fn show_leaves_the_arguments_out_unless_asked() {
    let store = MemoryStore::new();
    let id = seeded(&store, "t", 1).await.remove(0);
    let d = show(&store, TaskRef::new(&"t".into(), &id), false)
        .await
        .unwrap();
    assert!(!d.to_json().to_string().contains("s3"));
    let d = show(&store, TaskRef::new(&"t".into(), &id), true)
        .await
        .unwrap();
    assert_eq!(d.to_json()["arguments"], json!({"secret": "s3"}));
    assert!(matches!(
        show(&store, TaskRef::new(&"u".into(), &id), false).await,
        Err(AdminError::NotFound { .. })
    ));
}

#[tokio::test]
async fn cancel_goes_through_the_engine_and_refuses_finished_tasks() {
    let store = Arc::new(MemoryStore::new());
    let ids = seeded(&store, "t", 2).await;
    let engine = engine(store.clone(), None);
    // A dead server's lease: cancelled at once all the same.
    let mut t = store
        .get(TaskRef {
            tenant: &"t".into(),
            task_id: &ids[0],
        })
        .await
        .unwrap()
        .unwrap();
    t.lease = Some(Lease {
        owner: "gone".into(),
        expires_at_ms: u64::MAX / 2,
    });
    store.update(&t).await.unwrap();
    let done = cancel(
        &engine,
        &*store,
        TaskRef::new(&"t".into(), &ids[0]),
        CancelMode::AtOnce,
    )
    .await
    .unwrap();
    assert!(matches!(done, CancelOutcome::Cancelled(t) if t.status == TaskStatus::Cancelled));
    let again = cancel(
        &engine,
        &*store,
        TaskRef::new(&"t".into(), &ids[0]),
        CancelMode::AtOnce,
    )
    .await;
    assert!(
        matches!(
            again,
            Err(AdminError::Finished {
                status: TaskStatus::Cancelled,
                ..
            })
        ),
        "{again:?}"
    );
    // Cooperative, under a live lease: the flag, not yet the status.
    let mut t = store
        .get(TaskRef {
            tenant: &"t".into(),
            task_id: &ids[1],
        })
        .await
        .unwrap()
        .unwrap();
    t.lease = Some(Lease {
        owner: "alive".into(),
        expires_at_ms: now_ms() + 60_000,
    });
    store.update(&t).await.unwrap();
    let asked = cancel(
        &engine,
        &*store,
        TaskRef::new(&"t".into(), &ids[1]),
        CancelMode::Cooperative,
    )
    .await
    .unwrap();
    assert!(
        matches!(asked, CancelOutcome::Requested(t) if t.cancel_requested && t.status == TaskStatus::Working)
    );
}
