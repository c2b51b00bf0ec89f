//! The contract's tenant listings: one tenant's active tasks, whatever the names of the
//! others, counted and paged in task-id order.

use serde_json::json;

use super::{args, key, task};
use crate::store::TaskStore;
use crate::task::TaskRecord;
use crate::tenant::Tenant;

/// Tenant names that are prefixes of each other, contain the adapters' separators and escape
/// characters, or are unusual (blank, non-ASCII). The authenticator refuses only empty and
/// control-character names; the store must keep every other pair apart.
const TRICKY_TENANTS: [&str; 14] = [
    "a",
    "ab",
    "a#",
    "a#b",
    "a%23b",
    "a%",
    "%",
    "#",
    " ",
    "a b",
    "é",
    "e\u{301}",
    "テナント",
    "a\u{ff1f}",
];

pub(super) async fn tenant_listing_shows_only_that_tenants_active_tasks(s: &impl TaskStore) {
    let mut want = std::collections::BTreeMap::new();
    for tenant in TRICKY_TENANTS {
        let mut ids = Vec::new();
        for _ in 0..2 {
            let t = task(tenant, None);
            s.create(&t, &args()).await.unwrap();
            ids.push(t.task_id);
        }
        // A finished task of the same tenant is not listed.
        let mut done = task(tenant, None);
        s.create(&done, &args()).await.unwrap();
        done.complete(json!({"content": []})).unwrap();
        s.update(&done).await.unwrap();
        ids.sort();
        want.insert(tenant, ids);
    }
    for (tenant, ids) in &want {
        let listed = s
            .list_tenant_active(&Tenant::from(*tenant), None, 100)
            .await
            .unwrap();
        let got: Vec<&str> = listed.iter().map(|t| t.task_id.as_str()).collect();
        assert_eq!(got, *ids, "tenant {tenant:?}");
        for t in &listed {
            assert_eq!(t.tenant, *tenant);
            assert_eq!(
                s.get(key(tenant, &t.task_id).borrowed())
                    .await
                    .unwrap()
                    .as_ref(),
                Some(t)
            );
        }
    }
    for absent in ["", "b", "a#b#", "A", "u", "テ"] {
        assert!(
            s.list_tenant_active(&Tenant::from(absent), None, 100)
                .await
                .unwrap()
                .is_empty(),
            "tenant {absent:?}"
        );
    }
}

pub(super) async fn tenant_count_counts_only_that_tenants_active_tasks(s: &impl TaskStore) {
    for _ in 0..5 {
        s.create(&task("count-a", None), &args()).await.unwrap();
    }
    for _ in 0..3 {
        s.create(&task("count-ab", None), &args()).await.unwrap();
    }
    let mut done = task("count-a", None);
    s.create(&done, &args()).await.unwrap();
    done.complete(json!({"content": []})).unwrap();
    s.update(&done).await.unwrap();
    assert_eq!(
        s.count_tenant_active(&"count-a".into(), 100).await.unwrap(),
        5
    );
    assert_eq!(
        s.count_tenant_active(&"count-a".into(), 3).await.unwrap(),
        3,
        "stops at at_most"
    );
    assert_eq!(
        s.count_tenant_active(&"count-ab".into(), 100)
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        s.count_tenant_active(&"count-none".into(), 100)
            .await
            .unwrap(),
        0
    );
}

pub(super) async fn tenant_listing_tracks_updates_and_terminal_transitions(s: &impl TaskStore) {
    let mut ids = Vec::new();
    for _ in 0..4 {
        let t = task("t", None);
        s.create(&t, &args()).await.unwrap();
        ids.push(t.task_id);
    }
    ids.sort();
    // A non-terminal change keeps the task listed, as it now reads.
    let mut moved = s.get(key("t", &ids[0]).borrowed()).await.unwrap().unwrap();
    moved.status_message = Some("half way".into());
    s.update(&moved).await.unwrap();
    let mut cancelled = s.get(key("t", &ids[1]).borrowed()).await.unwrap().unwrap();
    cancelled.cancel().unwrap();
    s.update(&cancelled).await.unwrap();
    let mut failed = s.get(key("t", &ids[2]).borrowed()).await.unwrap().unwrap();
    failed
        .fail(crate::protocol::ErrorObject::internal("boom"))
        .unwrap();
    s.update(&failed).await.unwrap();
    let listed = s.list_tenant_active(&"t".into(), None, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed[0],
        s.get(key("t", &ids[0]).borrowed()).await.unwrap().unwrap()
    );
    assert_eq!(listed[0].status_message.as_deref(), Some("half way"));
    assert_eq!(listed[1].task_id, ids[3]);
    s.delete(key("t", &ids[3]).borrowed()).await.unwrap();
    let listed = s.list_tenant_active(&"t".into(), None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].task_id, ids[0]);
}

pub(super) async fn tenant_listing_pages_cover_every_task_once_in_order(s: &impl TaskStore) {
    let mut want = Vec::new();
    for i in 0..23 {
        let t = task("p", None);
        s.create(&t, &args()).await.unwrap();
        want.push(t.task_id);
        // Neighbours by name, interleaved.
        s.create(&task(["p#", "pp", "p#p"][i % 3], None), &args())
            .await
            .unwrap();
    }
    want.sort();
    let mut got: Vec<String> = Vec::new();
    let mut ended = false;
    loop {
        let page = s
            .list_tenant_active(&"p".into(), got.last().map(String::as_str), 5)
            .await
            .unwrap();
        assert!(page.len() <= 5);
        assert!(!ended || page.is_empty(), "a short page was not the last");
        ended = page.len() < 5;
        if page.is_empty() {
            break;
        }
        got.extend(page.into_iter().map(|t| t.task_id.to_string()));
    }
    assert_eq!(got, want, "every task once, in task-id order");
    assert!(
        s.list_tenant_active(&"p".into(), None, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.list_tenant_active(&"p".into(), Some(&want[22]), 5)
            .await
            .unwrap()
            .is_empty()
    );

    // `after` may have left the listing since it was returned (finished, deleted), or be an
    // id that never was the tenant's.
    let mut done = s.get(key("p", &want[4]).borrowed()).await.unwrap().unwrap();
    done.cancel().unwrap();
    s.update(&done).await.unwrap();
    s.delete(key("p", &want[5]).borrowed()).await.unwrap();
    let ids = |page: Vec<TaskRecord>| page.into_iter().map(|t| t.task_id).collect::<Vec<_>>();
    let after_done = s
        .list_tenant_active(&"p".into(), Some(&want[4]), 3)
        .await
        .unwrap();
    assert_eq!(ids(after_done), want[6..9].to_vec());
    let after_deleted = s
        .list_tenant_active(&"p".into(), Some(&want[5]), 3)
        .await
        .unwrap();
    assert_eq!(ids(after_deleted), want[6..9].to_vec());
    let before_all = s
        .list_tenant_active(&"p".into(), Some("tsk_"), 2)
        .await
        .unwrap();
    assert_eq!(ids(before_all), want[0..2].to_vec());

    // Generated ids start with a ULID: tasks made a millisecond or more apart list in the
    // order they were made.
    let first = task("q", None);
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    let second = task("q", None);
    s.create(&second, &args()).await.unwrap();
    s.create(&first, &args()).await.unwrap();
    let listed = ids(s.list_tenant_active(&"q".into(), None, 10).await.unwrap());
    assert_eq!(listed, vec![first.task_id, second.task_id]);
}
