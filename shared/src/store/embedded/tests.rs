use super::*;
use crate::task::TaskRef;
use crate::task::{TaskStatus, new_task_id};
use serde_json::json;

#[tokio::test]
async fn embedded_store_passes_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let n = std::sync::atomic::AtomicUsize::new(0);
    let dir_path = dir.path().to_owned();
    super::super::contract::run_all(|| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir_path.join(format!("t{i}.redb"));
        async move { EmbeddedStore::open(&path).unwrap() }
    })
    .await;
}

/// With a cache too small to hold anything (every record skipped) and one that holds a
/// few records (constant eviction), the contract holds as with the full cache.
#[tokio::test]
async fn the_contract_holds_whatever_the_cache_size() {
    for cap in [0, 4 * 1024 * 16] {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        let dir_path = dir.path().to_owned();
        super::super::contract::run_all(|| {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = dir_path.join(format!("t{i}.redb"));
            async move { EmbeddedStore::open_with_cache(&path, cap, true).unwrap() }
        })
        .await;
    }
}

/// Readers racing writers on the same task never see a version go back, and once the
/// writes are done every reader sees the last one — with the cache at full size, tiny
/// (constant eviction, so reads keep going to the database and re-filling it) and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_racing_writes_never_go_back() {
    for cap in [CACHE_BYTES, 2 * 1024 * 16, 0] {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_with_cache(&dir.path().join("t.redb"), cap, true).unwrap();
        let tasks: Vec<TaskRecord> = (0..4)
            .map(|_| TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({})))
            .collect();
        for t in &tasks {
            store.create(t, &json!({})).await.unwrap();
        }
        let writes = 200u64;
        let mut set = tokio::task::JoinSet::new();
        for t in tasks.clone() {
            let store = store.clone();
            set.spawn(async move {
                let mut cur = t;
                for i in 0..writes {
                    cur.checkpoint = json!(i);
                    cur.version = store.update(&cur).await.unwrap();
                }
            });
        }
        for r in 0..8 {
            let (store, t) = (store.clone(), tasks[r % tasks.len()].clone());
            set.spawn(async move {
                let mut last = 0;
                for _ in 0..2000 {
                    let got = store.get(t.key()).await.unwrap().unwrap();
                    assert!(
                        got.version >= last,
                        "went back from {last} to {}",
                        got.version
                    );
                    assert_eq!(
                        got.checkpoint,
                        if got.version == 0 {
                            Value::Null
                        } else {
                            json!(got.version - 1)
                        }
                    );
                    last = got.version;
                    tokio::task::yield_now().await;
                }
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        for t in &tasks {
            let got = store.get(t.key()).await.unwrap().unwrap();
            assert_eq!(got.version, writes, "cap {cap}");
        }
    }
}

#[tokio::test]
async fn records_and_indexes_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.redb");
    let task = TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({}));
    {
        let store = EmbeddedStore::open(&path).unwrap();
        store.create(&task, &json!({"a": 1})).await.unwrap();
    }
    let store = EmbeddedStore::open(&path).unwrap();
    let got = store.get(task.key()).await.unwrap().unwrap();
    assert_eq!(got, task);
    assert_eq!(
        store.arguments(task.key()).await.unwrap(),
        Some(json!({"a": 1}))
    );
    assert_eq!(store.list_active(None, 10).await.unwrap().len(), 1);
    let mut done = got.clone();
    done.complete(json!({"content": []})).unwrap();
    store.update(&done).await.unwrap();
    let got = store.get(task.key()).await.unwrap().unwrap();
    assert_eq!(got.status, TaskStatus::Completed);
    assert!(store.list_active(None, 10).await.unwrap().is_empty());
}

/// A row this release cannot decode, or whose record names another key, reads as absent
/// (as on DynamoDB): "unknown task" to a client, never -32603 and never another tenant's
/// record at this tenant's key.
#[tokio::test]
async fn undecodable_or_misplaced_records_read_as_absent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.redb");
    let (bad, theirs) = (
        TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({})),
        TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({})),
    );
    {
        let store = EmbeddedStore::open(&path).unwrap();
        store.create(&bad, &json!({})).await.unwrap();
        store.create(&theirs, &json!({})).await.unwrap();
    }
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(TASKS).unwrap();
            let garbage: &[u8] = br#"{"status": "a status from the future"}"#;
            table
                .insert(
                    key(TaskRef::new(&"t".into(), &bad.task_id)).as_str(),
                    garbage,
                )
                .unwrap();
            // Tenant u's key holding tenant t's record.
            let moved = serde_json::to_vec(&theirs).unwrap();
            table
                .insert(
                    key(TaskRef::new(&"u".into(), &theirs.task_id)).as_str(),
                    moved.as_slice(),
                )
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = EmbeddedStore::open(&path).unwrap();
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"t".into(),
                task_id: &bad.task_id
            })
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .get(TaskRef {
                tenant: &"u".into(),
                task_id: &theirs.task_id
            })
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .get(TaskRef {
                tenant: &"t".into(),
                task_id: &theirs.task_id
            })
            .await
            .unwrap()
            .is_some()
    );
}

/// What a checkpoint rewrites is the `tasks` row: it never holds the arguments.
#[tokio::test]
async fn large_arguments_are_written_once_beside_a_small_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("tasks.redb")).unwrap();
    let task = TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({}));
    let args = json!({"label": "x".repeat(280_000)});
    store.create(&task, &args).await.unwrap();
    let mut cur = store.get(task.key()).await.unwrap().unwrap();
    for step in 0..3 {
        cur.checkpoint = json!({"waited_ms": step * 1000});
        cur.version = store.update(&cur).await.unwrap();
    }
    let k = key(TaskRef::new(&"t".into(), &task.task_id));
    let txn = store.inner.db.begin_read().unwrap();
    let row = txn
        .open_table(TASKS)
        .unwrap()
        .get(k.as_str())
        .unwrap()
        .unwrap()
        .value()
        .len();
    assert!(row < 2_000, "the record row is {row} bytes");
    let kept = txn
        .open_table(ARGUMENTS)
        .unwrap()
        .get(k.as_str())
        .unwrap()
        .unwrap()
        .value()
        .to_vec();
    assert_eq!(kept, serde_json::to_vec(&args).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_commits_and_all_persist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.redb");
    let store = EmbeddedStore::open(&path).unwrap();
    let tasks: Vec<TaskRecord> = (0..300)
        .map(|_| TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({})))
        .collect();
    let mut set = tokio::task::JoinSet::new();
    for t in tasks.clone() {
        let store = store.clone();
        set.spawn(async move {
            store.create(&t, &json!({})).await.unwrap();
            let mut done = t.clone();
            done.complete(json!({"content": []})).unwrap();
            store.update(&done).await
        });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap().unwrap(), 1);
    }
    drop(store);
    let store = EmbeddedStore::open(&path).unwrap();
    assert!(store.list_active(None, 1000).await.unwrap().is_empty());
    for t in &tasks {
        let got = store.get(t.key()).await.unwrap().unwrap();
        assert_eq!(got.status, TaskStatus::Completed);
    }
}

#[test]
fn a_database_failure_keeps_its_source() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the database file should be: redb cannot open it.
    let Err(e) = EmbeddedStore::open(dir.path()) else {
        panic!("a directory is not a database");
    };
    assert!(
        matches!(
            &e,
            OpenError::Failed {
                source: StoreError::Backend {
                    source: Some(_),
                    ..
                },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&dir.path().display().to_string()));
    assert!(std::error::Error::source(&e).is_some());
}

/// A second open of a file in use says so, naming the file (the lock, not damage).
#[test]
fn a_file_in_use_is_told_from_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    let _first = EmbeddedStore::open(&path).unwrap();
    let Err(e) = EmbeddedStore::open(&path) else {
        panic!("opened twice");
    };
    assert!(matches!(&e, OpenError::InUse(p) if *p == path), "{e:?}");
}

/// The read cache stays within its bounds however many records pass through it, evicts the
/// oldest first, and its eviction order does not grow with keys put again or removed.
#[test]
fn the_read_cache_keeps_its_bounds_and_evicts_the_oldest() {
    let record = || TaskRecord::new("t".into(), new_task_id(), "x", None, 1000, json!({}));
    let mut st = CacheState {
        cap: 1 << 30,
        ..CacheState::default()
    };
    // By count: the first put is the first out.
    for i in 0..CACHE_RECORDS + 10 {
        st.put(format!("k{i}"), record(), 100);
    }
    assert_eq!(st.records.len(), CACHE_RECORDS);
    assert!(!st.records.contains_key("k0") && !st.records.contains_key("k9"));
    assert!(st.records.contains_key("k10"));
    assert_eq!(st.bytes, 100 * CACHE_RECORDS);
    // A key put again counts once and moves to the back; removals and re-puts leave no
    // growing trail of stale order entries.
    for round in 0..50 {
        for i in 10..200 {
            st.put(format!("k{i}"), record(), 100 + round);
            st.put(format!("gone{i}"), record(), 100);
            st.remove(&format!("gone{i}"));
        }
    }
    assert!(st.records.len() <= CACHE_RECORDS);
    assert!(st.records.contains_key("k199"), "the last put stays");
    assert!(
        st.order.len() <= 2 * st.records.len() + 64,
        "{}",
        st.order.len()
    );
    assert_eq!(
        st.bytes,
        st.records.values().map(|c| c.size).sum::<usize>(),
        "the byte count follows the entries"
    );
    // By bytes: a small cap holds what fits, newest kept.
    let mut small = CacheState {
        cap: 16 * 100,
        ..CacheState::default()
    };
    for i in 0..100 {
        small.put(format!("s{i}"), record(), 100);
    }
    assert_eq!(small.records.len(), 16);
    assert!(small.records.contains_key("s99") && !small.records.contains_key("s83"));
    assert!(small.bytes <= small.cap);
}
