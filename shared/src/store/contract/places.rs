//! The contract's places: a tenant's active tasks, counted in the step that stores or ends
//! each of them (see [`TaskStore`]'s contract).

use serde_json::json;

use super::{args, key, task};
use crate::store::{StoreError, TaskStore};

/// Stores a fresh task of `tenant` within `max`: whether it was stored.
async fn within(s: &impl TaskStore, tenant: &str, max: usize) -> bool {
    s.create_within(&task(tenant, None), &args(), max)
        .await
        .unwrap()
}

pub(super) async fn racing_creations_never_pass_the_limit(s: &impl TaskStore) {
    let tasks: Vec<_> = (0..32).map(|_| task("race", None)).collect();
    let outcomes = futures_util::future::join_all(
        tasks
            .iter()
            .map(|t| async move { s.create_within(t, &args(), 4).await.unwrap() }),
    )
    .await;
    assert_eq!(outcomes.iter().filter(|o| **o).count(), 4, "{outcomes:?}");
    let listed = s
        .list_tenant_active(&"race".into(), None, 100)
        .await
        .unwrap();
    assert_eq!(listed.len(), 4);
    // A refused task left nothing behind: no record, no arguments.
    for (t, stored) in tasks.iter().zip(&outcomes) {
        let record = s.get(key("race", &t.task_id).borrowed()).await.unwrap();
        let arguments = s
            .arguments(key("race", &t.task_id).borrowed())
            .await
            .unwrap();
        assert_eq!(record.is_some(), *stored);
        assert_eq!(arguments.is_some(), *stored);
    }
}

pub(super) async fn a_place_comes_back_however_the_task_ends(s: &impl TaskStore) {
    let ends = ["complete", "fail", "cancel", "delete"];
    let mut held = Vec::new();
    for _ in 0..ends.len() {
        let t = task("ends", None);
        assert!(s.create_within(&t, &args(), 4).await.unwrap());
        held.push(t);
    }
    assert!(!within(s, "ends", 4).await, "full");
    // A write that does not end the task gives nothing back.
    let mut moved = s.get(held[0].key()).await.unwrap().unwrap();
    moved.status_message = Some("half way".into());
    s.update(&moved).await.unwrap();
    assert!(!within(s, "ends", 4).await, "still full");
    for (t, end) in held.iter().zip(ends) {
        let mut read = s.get(t.key()).await.unwrap().unwrap();
        match end {
            "complete" => read.complete(json!({"content": []})).unwrap(),
            "fail" => read
                .fail(crate::protocol::ErrorObject::internal("boom"))
                .unwrap(),
            "cancel" => read.cancel().unwrap(),
            // The purge of a task that expired unfinished.
            _ => {
                s.delete(t.key()).await.unwrap();
                assert!(within(s, "ends", 4).await, "{end} gave its place back");
                assert!(!within(s, "ends", 4).await, "one place, not two");
                continue;
            }
        }
        s.update(&read).await.unwrap();
        assert!(within(s, "ends", 4).await, "{end} gave its place back");
        assert!(!within(s, "ends", 4).await, "one place, not two");
        // Nothing more comes back from the ended task: not a refused second end, not its purge.
        assert!(matches!(s.update(&read).await, Err(StoreError::Conflict)));
        s.delete(t.key()).await.unwrap();
        assert!(
            !within(s, "ends", 4).await,
            "{end}: a finished task's purge frees nothing"
        );
    }
}

pub(super) async fn places_belong_to_one_tenant(s: &impl TaskStore) {
    for _ in 0..2 {
        assert!(within(s, "a", 2).await);
    }
    assert!(!within(s, "a", 2).await);
    for other in ["ab", "a#b", "b"] {
        assert!(within(s, other, 1).await, "{other} is not a");
        assert!(!within(s, other, 1).await);
    }
    // The limit is the caller's: a larger one admits more.
    assert!(within(s, "a", 3).await);
}

pub(super) async fn a_failed_or_unlimited_create_counts_right(s: &impl TaskStore) {
    let t = task("once", None);
    assert!(s.create_within(&t, &args(), 2).await.unwrap());
    // The same task again (a retried creation): refused as a conflict, no second place.
    assert!(matches!(
        s.create_within(&t, &args(), 2).await,
        Err(StoreError::Conflict)
    ));
    assert!(matches!(
        s.create_within(&t, &json!({"other": true}), 2).await,
        Err(StoreError::Conflict)
    ));
    let big = json!("x".repeat(crate::store::MAX_RECORD_BYTES + 1));
    assert!(matches!(
        s.create_within(&task("once", None), &big, 2).await,
        Err(StoreError::TooLarge(_))
    ));
    assert!(within(s, "once", 2).await, "neither took a place");
    assert!(!within(s, "once", 2).await);
    // `create` takes a place too, whatever the limit.
    s.create(&task("plain", None), &args()).await.unwrap();
    s.create(&task("plain", None), &args()).await.unwrap();
    assert!(!within(s, "plain", 2).await);
    // A task stored already finished holds none.
    let mut done = task("plain-done", None);
    done.complete(json!({"content": []})).unwrap();
    s.create(&done, &args()).await.unwrap();
    assert!(within(s, "plain-done", 1).await);
}
