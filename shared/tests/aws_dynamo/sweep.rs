//! The sweep and the purge: undecodable items, parked tasks never read, a resumable pass.

use aws_sdk_dynamodb::types::AttributeValue;
use mcp_tasks_core::aws::dynamo::{self, DynamoStore};
use mcp_tasks_core::store::contract::{args, task};
use mcp_tasks_core::store::{TaskKey, TaskStore};
use mcp_tasks_core::task::TaskRef;
use mcp_tasks_core::task::{TaskRecord, TaskStatus};

use crate::{client, drop_table, edit_raw, engine_over, fresh_store, raw_item};

/// Items this release cannot decode — a status it does not know (a rollback after a release
/// that added one), a missing field (a hand edit) — neither stop the sweep nor the purge: they
/// are skipped and counted, every orphan is still re-queued and every expired task (bad ones
/// included) purged. `tasks/get` on such an item answers as for an unknown task (`-32602`),
/// not `-32603`.
#[tokio::test]
async fn the_sweep_and_the_purge_go_on_past_items_they_cannot_decode() {
    use mcp_tasks_core::engine::{PurgeStats, SweepStats};
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let table = store.table_name().to_owned();
    let (engine, mut rx) = engine_over(&store);
    let now = mcp_tasks_core::clock::now_ms();
    let make = |ttl: Option<u64>, age_ms: u64| {
        let mut t = task("t", ttl);
        t.created_at_ms = now - age_ms;
        t.last_updated_at_ms = t.created_at_ms;
        t
    };
    // Orphans: stored, never enqueued, idle for a minute.
    let mut orphans = Vec::new();
    for _ in 0..8 {
        let t = make(Some(3_600_000), 60_000);
        store.create(&t, &args()).await.unwrap();
        orphans.push(t.task_id);
    }
    // Bad items, idle orphans too.
    let unknown_status = make(Some(3_600_000), 60_000);
    let missing_field = make(Some(3_600_000), 60_000);
    let expired_bad = make(Some(1_000), 60_000);
    let expired = make(Some(1_000), 60_000);
    for t in [&unknown_status, &missing_field, &expired_bad, &expired] {
        store.create(t, &args()).await.unwrap();
    }
    for t in [&unknown_status, &expired_bad] {
        let paused = Some(AttributeValue::S("paused".into()));
        let key = dynamo::pk(TaskRef::new(&"t".into(), &t.task_id));
        edit_raw(&client, &table, key, "SET #a = :v", "status", paused).await;
    }
    let key = dynamo::pk(TaskRef::new(&"t".into(), &missing_field.task_id));
    edit_raw(&client, &table, key, "REMOVE #a", "version", None).await;

    let stats = engine.sweep(std::time::Duration::from_secs(30)).await;
    let stats = stats.expect("the sweep goes past items it cannot decode");
    assert_eq!(
        stats,
        SweepStats {
            requeued: orphans.len(),
            skipped: 3,
            // The orphans and the readable expired task: listed, read, one left to the purge.
            read: orphans.len() + 1,
            complete: true,
            ..SweepStats::default()
        }
    );
    let mut requeued = Vec::new();
    while let Ok(m) = rx.try_recv() {
        requeued.push(m.task_id);
    }
    requeued.sort();
    orphans.sort();
    assert_eq!(requeued, orphans);

    for t in [&unknown_status, &missing_field] {
        let e = engine
            .get(TaskRef::new(&"t".into(), &t.task_id))
            .await
            .expect_err("unreadable");
        assert_eq!(
            e,
            mcp_tasks_core::engine::EngineError::NotFound,
            "answered as unknown"
        );
        let wire = mcp_tasks_core::protocol::McpError::from(e);
        assert_eq!(wire.error.code, -32602, "{:?}", wire.error);
    }

    let purged = engine.purge().await.expect("the purge goes on");
    assert_eq!(
        purged,
        PurgeStats {
            purged: 2,
            failed: 0
        }
    );
    for t in [&expired, &expired_bad] {
        let key = dynamo::pk(TaskRef::new(&"t".into(), &t.task_id));
        assert!(raw_item(&client, &table, key).await.is_none());
    }
    drop_table(&client, &table).await;
}

/// A local queue that reports `waiting` messages (as SQS's `ApproximateNumberOfMessages`).
struct Backlogged(mcp_tasks_core::queue::LocalQueue, u64);

#[async_trait::async_trait]
impl mcp_tasks_core::queue::WorkQueue for Backlogged {
    async fn enqueue(
        &self,
        msg: mcp_tasks_core::queue::WorkMessage,
        delay: std::time::Duration,
    ) -> Result<(), mcp_tasks_core::queue::QueueError> {
        self.0.enqueue(msg, delay).await
    }
    async fn waiting(&self) -> Result<Option<u64>, mcp_tasks_core::queue::QueueError> {
        Ok(Some(self.1))
    }
}

/// Creates `n` tasks made by `make`, 32 at a time.
async fn create_many(store: &DynamoStore, n: usize, make: impl Fn() -> TaskRecord) -> Vec<String> {
    use futures_util::StreamExt as _;
    let tasks: Vec<TaskRecord> = (0..n).map(|_| make()).collect();
    let ids = tasks.iter().map(|t| t.task_id.to_string()).collect();
    futures_util::stream::iter(tasks)
        .map(|t| async move { store.create(&t, &args()).await.unwrap() })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    ids
}

/// The sweep reads only the tasks it could act on: thousands waiting for input or asleep
/// are never read, so its run time stays flat as they grow. For reference, the same run
/// times the old way (every active task listed and read, what the sweep did before), and
/// prints both. `SWEEP_PARKED` sets how many parked and how many sleeping tasks (default 1,000
/// each, about 40 s on the emulator; the note's figures also use 10,000).
#[tokio::test]
async fn the_sweep_reads_only_what_it_could_act_on_however_many_tasks_wait() {
    use std::time::{Duration, Instant};
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let n: usize = std::env::var("SWEEP_PARKED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let now = mcp_tasks_core::clock::now_ms();
    let hour_ago = now - 3_600_000;
    let started = Instant::now();
    create_many(&store, n, || {
        let mut t = task("people", None);
        t.transition(TaskStatus::InputRequired).unwrap();
        t.last_updated_at_ms = hour_ago;
        t
    })
    .await;
    create_many(&store, n, || {
        let mut t = task("sleepers", None);
        t.last_updated_at_ms = hour_ago;
        t.wake_at_ms = Some(now + 3_600_000);
        t
    })
    .await;
    let mut orphans = create_many(&store, 5, || {
        let mut t = task("lost", None);
        t.last_updated_at_ms = hour_ago;
        t
    })
    .await;
    let seeded = started.elapsed();
    let (engine, mut rx) = engine_over(&store);

    // The old way, for reference: every active task listed and read.
    let t0 = Instant::now();
    let mut after: Option<TaskKey> = None;
    let mut read_all = 0;
    loop {
        let page = store.list_active(after.as_ref(), 1000).await.unwrap();
        for k in &page {
            store.get(k.borrowed()).await.unwrap().unwrap();
            read_all += 1;
        }
        if page.len() < 1000 {
            break;
        }
        after = page.last().cloned();
    }
    let full_pass = t0.elapsed();

    // What the emulator charges for the index itself: one pass of the sweep's queries (one
    // per shard) that finds nothing. moto answers a `Query` by scanning the whole table, so
    // this part grows with the table there; on DynamoDB a `Query` costs what it returns.
    let t0 = Instant::now();
    let probe = store.list_quiet(0, None, 500).await.unwrap();
    let index_probe = t0.elapsed();
    assert!(probe.tasks.is_empty());

    let t0 = Instant::now();
    let stats = engine.sweep(Duration::from_secs(300)).await.unwrap();
    let sweep = t0.elapsed();
    assert_eq!(read_all, 2 * n + orphans.len());
    assert_eq!(
        (stats.read, stats.requeued, stats.skipped, stats.complete),
        (orphans.len(), orphans.len(), 0, true),
        "{stats:?}"
    );
    let mut sent: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|m| m.task_id.into())
        .collect();
    sent.sort();
    orphans.sort();
    assert_eq!(sent, orphans);
    println!(
        "SWEEP parked={n} sleeping={n} orphans={} seeded_in={:.1}s full_pass={:.3}s ({:.2} ms/task) \
         sweep={:.3}s ratio={:.3} index_queries_alone={:.3}s sweep_beyond_them={:.3}s",
        orphans.len(),
        seeded.as_secs_f64(),
        full_pass.as_secs_f64(),
        full_pass.as_secs_f64() * 1000.0 / read_all as f64,
        sweep.as_secs_f64(),
        sweep.as_secs_f64() / full_pass.as_secs_f64(),
        index_probe.as_secs_f64(),
        sweep.saturating_sub(index_probe).as_secs_f64(),
    );
    drop_table(&client, store.table_name()).await;
}

/// A sweep cut short by its deadline saves where it stopped (in the table) and the next run
/// — any process's — goes on from there instead of reading the same first page again; a
/// finished pass removes the cursor. Here the tasks stay candidates (messages wait in the
/// queue, so they may simply be queued), which is when re-reading from the start would keep
/// the sweep from ever reaching the end.
#[tokio::test]
async fn a_sweep_cut_short_goes_on_where_it_stopped_in_the_next_run() {
    use mcp_tasks_core::engine::{BACKLOG_PATIENCE, Engine, SWEEP_PAGE, TaskSettings};
    use std::sync::Arc;
    use std::time::Duration;
    let Some(client) = client().await else { return };
    let store = fresh_store(&client).await;
    let now = mcp_tasks_core::clock::now_ms();
    let n = SWEEP_PAGE + SWEEP_PAGE / 5;
    let quiet_for = Duration::from_secs(600);
    assert!(quiet_for < BACKLOG_PATIENCE);
    create_many(&store, n, || {
        let mut t = task("queued", None);
        t.last_updated_at_ms = now - quiet_for.as_millis() as u64;
        t
    })
    .await;
    let engine = || {
        let (queue, rx) = mcp_tasks_core::queue::LocalQueue::new();
        let engine = Engine::new(
            Arc::new(store.clone()),
            Arc::new(Backlogged(queue, 1000)),
            TaskSettings::default(),
        );
        (engine, rx)
    };
    let stale = Duration::from_secs(300);
    // A first run with (almost) no time: one page, then it stops.
    let (first, mut rx) = engine();
    let until = tokio::time::Instant::now() + Duration::from_millis(1);
    let a = first.sweep_until(stale, Some(until)).await.unwrap();
    assert_eq!(
        (a.read, a.queued, a.requeued, a.resumed, a.complete),
        (SWEEP_PAGE, SWEEP_PAGE, 0, false, false),
        "{a:?}"
    );
    assert!(rx.try_recv().is_err(), "queued tasks are not sent again");
    assert!(
        store.sweep_cursor().await.unwrap().is_some(),
        "where it stopped is in the table"
    );
    // The next run, another engine (another instance): the rest only.
    let (second, _rx) = engine();
    let b = second.sweep(stale).await.unwrap();
    assert_eq!(
        (b.read, b.queued, b.resumed, b.complete),
        (n - SWEEP_PAGE, n - SWEEP_PAGE, true, true),
        "{b:?}"
    );
    assert_eq!(
        store.sweep_cursor().await.unwrap(),
        None,
        "a finished pass starts over"
    );
    // And the pass after it starts from the beginning.
    let c = second.sweep(stale).await.unwrap();
    assert_eq!((c.read, c.resumed, c.complete), (n, false, true), "{c:?}");
    drop_table(&client, store.table_name()).await;
}
