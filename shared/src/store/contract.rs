//! The one contract every [`TaskStore`] adapter must pass. Each adapter's tests call
//! [`run_all`] with a factory of fresh, empty stores: the memory and embedded adapters here, the
//! DynamoDB adapter against the emulator (`shared/tests/aws_dynamo/contracts.rs`).

use std::future::Future;

use serde_json::{Value, json};

use super::{StoreError, TaskKey, TaskStore};
use crate::task::{TaskId, TaskRecord, TaskStatus};
use crate::tenant::Tenant;

mod arguments;
mod places;
mod tenants;

/// A fresh `working` task of `tenant` (also for adapter-specific tests).
pub fn task(tenant: &str, ttl_ms: Option<u64>) -> TaskRecord {
    TaskRecord::new(
        tenant.into(),
        TaskId::generate(),
        "tool",
        ttl_ms,
        1000,
        json!({}),
    )
}

/// Task `task_id` of `tenant`, named apart from any record (the checks also ask for a task
/// as another tenant): `key(..).borrowed()` is what a store's call on one task takes, and the
/// key lives to the end of the statement that makes it.
fn key(tenant: &str, task_id: &str) -> TaskKey {
    TaskKey::new(
        Tenant::from(tenant),
        TaskId::parse(task_id).expect("a task id"),
    )
}

/// A record in (nearly) every field a running task may hold, with fixed times and a tenant
/// that needs escaping everywhere: what the stores' wire goldens encode.
pub fn golden_record() -> TaskRecord {
    let mut t = TaskRecord::new(
        "a#b%\"é\\".into(),
        TaskId::from_static("tsk_01J0GOLDEN"),
        "wait",
        Some(3_600_000),
        1000,
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    );
    t.status_message = Some("half way \"there\" ✓".into());
    t.require_input(std::collections::BTreeMap::from([(
        "k1".to_owned(),
        json!({"method": "elicitation/create", "params": {"message": "ok?"}}),
    )]))
    .unwrap();
    t.lease = Some(crate::task::Lease {
        owner: "w-1".into(),
        expires_at_ms: 1_700_000_060_000,
    });
    t.checkpoint = json!({"n": 1, "f": 0.5, "deep": {"a": [1, null, true, "x"]}});
    t.version = 7;
    t.attempts = 2;
    t.created_at_ms = 1_700_000_000_000;
    t.last_updated_at_ms = 1_700_000_000_500;
    t
}

/// Arguments for [`task`]s whose arguments do not matter.
pub fn args() -> Value {
    json!({"n": 1})
}

/// Runs every contract check, each on a fresh store from `make`.
pub async fn run_all<S, F, Fut>(mut make: F)
where
    S: TaskStore,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    create_then_get_round_trips(&make().await).await;
    create_twice_conflicts(&make().await).await;
    another_tenant_sees_nothing(&make().await).await;
    update_requires_the_read_version(&make().await).await;
    terminal_records_are_never_overwritten(&make().await).await;
    only_one_of_two_racing_writers_wins(&make().await).await;
    active_and_expired_listings_track_status_and_ttl(&make().await).await;
    active_listing_pages_cover_every_task_once(&make().await).await;
    quiet_listing_holds_only_quiet_working_tasks_in_pages(&make().await).await;
    a_sweep_cursor_is_kept_or_not_at_all(&make().await).await;
    tenants::tenant_listing_shows_only_that_tenants_active_tasks(&make().await).await;
    tenants::tenant_count_counts_only_that_tenants_active_tasks(&make().await).await;
    tenants::tenant_listing_tracks_updates_and_terminal_transitions(&make().await).await;
    tenants::tenant_listing_pages_cover_every_task_once_in_order(&make().await).await;
    oversized_records_are_refused_and_change_nothing(&make().await).await;
    delete_removes_and_is_idempotent(&make().await).await;
    arguments::arguments_are_written_once_and_read_back_exactly(&make().await).await;
    arguments::arguments_survive_every_record_write_and_go_with_delete(&make().await).await;
    arguments::oversized_arguments_are_refused_and_store_nothing(&make().await).await;
    places::racing_creations_never_pass_the_limit(&make().await).await;
    places::a_place_comes_back_however_the_task_ends(&make().await).await;
    places::places_belong_to_one_tenant(&make().await).await;
    places::a_failed_or_unlimited_create_counts_right(&make().await).await;
}

async fn create_then_get_round_trips(s: &impl TaskStore) {
    let t = task("a", Some(60_000));
    s.create(&t, &args()).await.unwrap();
    assert_eq!(
        s.get(key("a", &t.task_id).borrowed()).await.unwrap(),
        Some(t.clone())
    );
    assert_eq!(
        s.get(key("a", "tsk_missing").borrowed()).await.unwrap(),
        None
    );
}

async fn create_twice_conflicts(s: &impl TaskStore) {
    let t = task("a", None);
    s.create(&t, &args()).await.unwrap();
    assert!(matches!(
        s.create(&t, &args()).await,
        Err(StoreError::Conflict)
    ));
}

async fn another_tenant_sees_nothing(s: &impl TaskStore) {
    let t = task("a", None);
    s.create(&t, &args()).await.unwrap();
    assert_eq!(s.get(key("b", &t.task_id).borrowed()).await.unwrap(), None);
    let mut foreign = t.clone();
    foreign.tenant = "b".into();
    assert!(matches!(
        s.update(&foreign).await,
        Err(StoreError::Conflict)
    ));
    s.delete(key("b", &t.task_id).borrowed()).await.unwrap();
    assert!(
        s.get(key("a", &t.task_id).borrowed())
            .await
            .unwrap()
            .is_some()
    );
}

async fn update_requires_the_read_version(s: &impl TaskStore) {
    let t = task("a", None);
    s.create(&t, &args()).await.unwrap();
    let mut read = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    read.status_message = Some("step 1".into());
    let v = s.update(&read).await.unwrap();
    assert_eq!(v, read.version + 1);
    // The same stale version again loses.
    assert!(matches!(s.update(&read).await, Err(StoreError::Conflict)));
    let now = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.version, v);
    assert_eq!(now.status_message.as_deref(), Some("step 1"));
}

async fn terminal_records_are_never_overwritten(s: &impl TaskStore) {
    let t = task("a", None);
    s.create(&t, &args()).await.unwrap();
    let mut done = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    done.complete(json!({"content": []})).unwrap();
    s.update(&done).await.unwrap();
    let mut again = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    // Even a write that bypasses the status machine is refused by the store.
    again.status = TaskStatus::Working;
    assert!(matches!(s.update(&again).await, Err(StoreError::Conflict)));
    let now = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.status, TaskStatus::Completed);
}

async fn only_one_of_two_racing_writers_wins(s: &impl TaskStore) {
    let t = task("a", None);
    s.create(&t, &args()).await.unwrap();
    let read = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    let mut completes = read.clone();
    completes.complete(json!({"content": []})).unwrap();
    let mut cancels = read.clone();
    cancels.cancel().unwrap();
    let (a, b) = tokio::join!(s.update(&completes), s.update(&cancels));
    assert!(a.is_ok() != b.is_ok(), "exactly one writer wins");
    let now = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert!(now.status.is_terminal());
}

async fn active_and_expired_listings_track_status_and_ttl(s: &impl TaskStore) {
    let live = task("a", None);
    let short = task("b", Some(1));
    s.create(&live, &args()).await.unwrap();
    s.create(&short, &args()).await.unwrap();
    let active = s.list_active(None, 100).await.unwrap();
    assert_eq!(active.len(), 2);
    let mut done = s
        .get(key("a", &live.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    done.fail(crate::protocol::ErrorObject::internal("boom"))
        .unwrap();
    s.update(&done).await.unwrap();
    let active = s.list_active(None, 100).await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].task_id, short.task_id);
    assert_eq!(active[0].tenant, "b");
    let expired = s.list_expired(short.created_at_ms + 5, 100).await.unwrap();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].task_id, short.task_id);
    assert!(s.list_expired(0, 100).await.unwrap().is_empty());
}

async fn quiet_listing_holds_only_quiet_working_tasks_in_pages(s: &impl TaskStore) {
    let now = crate::clock::now_ms();
    let old = now - 10 * 60_000;
    let bound = now - 5 * 60_000;
    let mut want = std::collections::BTreeSet::new();
    for i in 0..11 {
        let mut t = task(["a", "b", "a#b"][i % 3], None);
        t.last_updated_at_ms = old;
        s.create(&t, &args()).await.unwrap();
        want.insert(t.task_id);
    }
    // Quiet as long, but none of them the sweep's: updated now, asleep past the bound,
    // waiting for input, finished.
    let fresh = task("a", None);
    s.create(&fresh, &args()).await.unwrap();
    let mut asleep = task("b", None);
    asleep.last_updated_at_ms = old;
    asleep.wake_at_ms = Some(now + 60_000);
    s.create(&asleep, &args()).await.unwrap();
    let mut parked = task("a", None);
    parked.last_updated_at_ms = old;
    s.create(&parked, &args()).await.unwrap();
    parked.transition(TaskStatus::InputRequired).unwrap();
    parked.last_updated_at_ms = old;
    s.update(&parked).await.unwrap();
    let mut done = task("b", None);
    done.last_updated_at_ms = old;
    s.create(&done, &args()).await.unwrap();
    done.fail(crate::protocol::ErrorObject::internal("boom"))
        .unwrap();
    s.update(&done).await.unwrap();

    let mut got = std::collections::BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let page = s.list_quiet(bound, after.as_deref(), 4).await.unwrap();
        assert_eq!(page.unreadable, 0);
        assert!(page.tasks.len() <= 4);
        for t in &page.tasks {
            assert_eq!(t.status, TaskStatus::Working);
            assert!(t.quiet_mark_ms().unwrap() <= bound);
            assert!(got.insert(t.task_id.clone()), "listed twice: {}", t.task_id);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(got, want);

    // A task that moves (a run took it) leaves the listing.
    let page = s.list_quiet(bound, None, 100).await.unwrap();
    let mut moved = page.tasks[0].clone();
    moved.touch();
    s.update(&moved).await.unwrap();
    let page = s.list_quiet(bound, None, 100).await.unwrap();
    assert_eq!(page.tasks.len(), want.len() - 1);
    assert!(page.tasks.iter().all(|t| t.task_id != moved.task_id));
}

async fn a_sweep_cursor_is_kept_or_not_at_all(s: &impl TaskStore) {
    let before = s.sweep_cursor().await.unwrap();
    assert_eq!(before, None, "a fresh store has no cursor");
    s.save_sweep_cursor(Some("somewhere")).await.unwrap();
    let kept = s.sweep_cursor().await.unwrap();
    assert!(
        kept.is_none() || kept.as_deref() == Some("somewhere"),
        "a store keeps the cursor it was given, or none: {kept:?}"
    );
    s.save_sweep_cursor(None).await.unwrap();
    assert_eq!(s.sweep_cursor().await.unwrap(), None);
}

async fn active_listing_pages_cover_every_task_once(s: &impl TaskStore) {
    let mut want = std::collections::BTreeSet::new();
    for i in 0..25 {
        let t = task(&format!("tenant{}", i % 3), None);
        s.create(&t, &args()).await.unwrap();
        want.insert(t.task_id);
    }
    let mut got = std::collections::BTreeSet::new();
    let mut after = None;
    let mut ended = false;
    loop {
        let page = s.list_active(after.as_ref(), 7).await.unwrap();
        assert!(page.len() <= 7);
        // Callers stop at the first short page (the engine's `all_active` does).
        assert!(!ended || page.is_empty(), "a short page was not the last");
        ended = page.len() < 7;
        for k in &page {
            assert!(got.insert(k.task_id.clone()), "listed twice: {k:?}");
        }
        match page.last() {
            Some(last) => after = Some(last.clone()),
            None => break,
        }
    }
    assert_eq!(got, want);

    // `after` may have left the listing since it was returned (finished, deleted).
    let first = s.list_active(None, 10).await.unwrap();
    let mut done = s.get(first[4].borrowed()).await.unwrap().unwrap();
    done.cancel().unwrap();
    s.update(&done).await.unwrap();
    s.delete(first[5].borrowed()).await.unwrap();
    assert_eq!(
        s.list_active(Some(&first[4]), 3).await.unwrap(),
        first[6..9].to_vec()
    );
    assert_eq!(
        s.list_active(Some(&first[5]), 3).await.unwrap(),
        first[6..9].to_vec()
    );
}

async fn oversized_records_are_refused_and_change_nothing(s: &impl TaskStore) {
    let t = task("a", None);
    s.create(&t, &args()).await.unwrap();
    let mut big = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    big.complete(
        json!({"content": [{"type": "text", "text": "x".repeat(super::MAX_RECORD_BYTES)}]}),
    )
    .unwrap();
    assert!(matches!(s.update(&big).await, Err(StoreError::TooLarge(_))));
    let now = s
        .get(key("a", &t.task_id).borrowed())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.status, TaskStatus::Working);
    let mut huge = task("a", None);
    huge.checkpoint = json!("y".repeat(super::MAX_RECORD_BYTES));
    assert!(matches!(
        s.create(&huge, &args()).await,
        Err(StoreError::TooLarge(_))
    ));
    assert_eq!(
        s.get(key("a", &huge.task_id).borrowed()).await.unwrap(),
        None
    );
    assert_eq!(
        s.arguments(key("a", &huge.task_id).borrowed())
            .await
            .unwrap(),
        None
    );
}

async fn delete_removes_and_is_idempotent(s: &impl TaskStore) {
    let t = task("a", Some(10));
    s.create(&t, &args()).await.unwrap();
    s.delete(key("a", &t.task_id).borrowed()).await.unwrap();
    s.delete(key("a", &t.task_id).borrowed()).await.unwrap();
    assert_eq!(s.get(key("a", &t.task_id).borrowed()).await.unwrap(), None);
    assert!(s.list_active(None, 10).await.unwrap().is_empty());
    assert!(s.list_expired(u64::MAX, 10).await.unwrap().is_empty());
}
