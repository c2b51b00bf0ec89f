//! A tenant flooding past its quotas waits its turn and never delays another.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_tasks_core::engine::CreateError;
use mcp_tasks_core::quota::Limit;
use mcp_tasks_core::store::{TaskRef, TaskStore as _};
use mcp_tasks_core::task::TaskStatus;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{Rig, now_ms};

#[tokio::test]
async fn a_flooding_tenant_waits_its_turn_and_never_delays_another() {
    let Some(rig) = Rig::new(6, 2, None).await else {
        return;
    };
    let (engine, store) = (&rig.engine, &rig.store);
    let stop = Arc::new(AtomicBool::new(false));
    let esm = rig.mapping(6, &stop);

    // A floods with long jobs that hold a worker (a hash chain paced under a second, slept in
    // place; a `wait`, or a pause past a second, parks without holding one): 6 accepted (its
    // active-task quota), the rest refused.
    let mut accepted = Vec::new();
    for _ in 0..10 {
        let created = async {
            engine.admit(&"tenant-a".into()).await?;
            engine
                .create_task(
                    &"tenant-a".into(),
                    "hash_chain",
                    json!({"seed": "flood", "rounds": 1_000_000_000u64, "pace_ms": 900}),
                    Value::Null,
                    json!({}),
                )
                .await
        };
        match created.await {
            Ok(t) => accepted.push(t.task_id),
            Err(CreateError::Quota(q)) => assert_eq!(q.limit, Limit::ActiveTasks),
            Err(CreateError::Failed(e)) => panic!("{e:?}"),
        }
    }
    assert_eq!(accepted.len(), 6);

    // B's small tasks complete while A's flood sits in the queue and the running places.
    let mut took = Vec::new();
    for _ in 0..4 {
        let started = Instant::now();
        engine.admit(&"tenant-b".into()).await.unwrap();
        let t = engine
            .create_task(
                &"tenant-b".into(),
                "wait",
                json!({"seconds": 0}),
                Value::Null,
                json!({}),
            )
            .await
            .unwrap();
        loop {
            let now = engine
                .get(TaskRef::new(&"tenant-b".into(), &t.task_id))
                .await
                .unwrap();
            if now.status == TaskStatus::Completed {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "B's task waited behind A: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        took.push(started.elapsed());
    }
    took.sort();
    eprintln!(
        "aws_tenants: quiet tenant's create→completed under flood on the emulator: {:?}",
        took
    );
    assert!(took[took.len() - 1] < Duration::from_secs(5), "{took:?}");

    // A: never more than 2 of its jobs ran at once, none failed, none lost.
    let mut running = 0;
    for id in &accepted {
        let t = store
            .get(TaskRef {
                tenant: &"tenant-a".into(),
                task_id: id,
            })
            .await
            .unwrap()
            .expect("still there");
        assert_eq!(t.status, TaskStatus::Working, "{t:?}");
        running += usize::from(t.lease.is_some_and(|l| l.expires_at_ms > now_ms()));
    }
    assert!(running <= 2, "{running} of A's jobs run at once");
    assert!(running >= 1, "A's work runs too");
    stop.store(true, Ordering::Relaxed);
    for id in &accepted {
        engine
            .cancel_at_once(TaskRef::new(&"tenant-a".into(), id))
            .await
            .unwrap();
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), esm).await;
    rig.drop_all().await;
}
