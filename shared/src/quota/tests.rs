use super::*;

#[tokio::test]
async fn a_tenants_backlog_waits_behind_its_own_work_not_others() {
    let gate = FairGate::new(2, 2);
    let a1 = gate.acquire(&"a".into()).await;
    let a2 = gate.acquire(&"a".into()).await;
    // a queues 100 more, then b arrives.
    let mut a_waiters = Vec::new();
    for _ in 0..100 {
        let g = gate.clone();
        a_waiters.push(tokio::spawn(async move { g.acquire(&"a".into()).await }));
    }
    tokio::task::yield_now().await;
    while gate.waiting(&"a".into()) < 100 {
        tokio::task::yield_now().await;
    }
    let g = gate.clone();
    let b = tokio::spawn(async move { g.acquire(&"b".into()).await });
    while gate.waiting(&"b".into()) < 1 {
        tokio::task::yield_now().await;
    }
    drop(a1);
    // b's turn comes before a's second waiter: b holds a place.
    let b = tokio::time::timeout(Duration::from_secs(1), b)
        .await
        .expect("b got the freed place")
        .unwrap();
    assert_eq!(gate.running(&"b".into()), 1);
    assert_eq!(gate.running(&"a".into()), 1);
    drop((a2, b));
    for w in a_waiters {
        drop(w.await.unwrap());
    }
    assert_eq!(gate.running(&"a".into()), 0);
}

#[tokio::test]
async fn the_per_tenant_cap_leaves_places_for_others() {
    let gate = FairGate::new(10, 2);
    let _a = (
        gate.acquire(&"a".into()).await,
        gate.acquire(&"a".into()).await,
    );
    let g = gate.clone();
    let third = tokio::spawn(async move { g.acquire(&"a".into()).await });
    while gate.waiting(&"a".into()) < 1 {
        tokio::task::yield_now().await;
    }
    // a is at its cap with 8 places free: b goes straight in.
    let _b = tokio::time::timeout(Duration::from_secs(1), gate.acquire(&"b".into()))
        .await
        .unwrap();
    assert!(!third.is_finished());
    drop(_a);
    tokio::time::timeout(Duration::from_secs(1), third)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_waiter_that_gives_up_frees_nothing_it_did_not_take() {
    let gate = FairGate::new(1, 1);
    let held = gate.acquire(&"a".into()).await;
    let g = gate.clone();
    let w = tokio::spawn(async move { g.acquire(&"b".into()).await });
    while gate.waiting(&"b".into()) < 1 {
        tokio::task::yield_now().await;
    }
    w.abort();
    let _ = w.await;
    drop(held);
    // The place is free again (not leaked to the aborted waiter).
    let _c = tokio::time::timeout(Duration::from_secs(1), gate.acquire(&"c".into()))
        .await
        .unwrap();
    assert_eq!(gate.running(&"b".into()), 0);
}

#[tokio::test]
async fn memory_run_slots_pass_the_contract() {
    run_slots_contract::run_all(&MemoryRunSlots::default(), "mem").await;
}

#[test]
fn the_rate_limiter_allows_a_burst_then_says_when() {
    let r = RateLimiter::new(2.0, 3);
    for _ in 0..3 {
        assert!(r.take(&"a".into()).is_ok());
    }
    let wait = r.take(&"a".into()).unwrap_err();
    assert!(wait <= Duration::from_millis(500) && wait > Duration::ZERO);
    assert!(r.take(&"b".into()).is_ok(), "tenants have separate buckets");
    assert!(RateLimiter::new(0.0, 1).take(&"a".into()).is_ok());
}

#[test]
fn a_refusal_is_a_tool_error_naming_the_limit() {
    let q = QuotaExceeded {
        limit: Limit::ActiveTasks,
        max: 5.0,
        retry_after: Some(Duration::from_secs(2)),
        message: "too many".into(),
    };
    let r = q.to_tool_result();
    assert_eq!(r["isError"], true);
    assert_eq!(r["_meta"][QUOTA_META]["limit"], "active_tasks");
    assert_eq!(r["_meta"][QUOTA_META]["retryAfterMs"], 2000);
}

#[tokio::test]
async fn shared_running_places_wait_their_turn_and_come_back_however_dropped() {
    let places = RunningPlaces::Slots {
        slots: Arc::new(MemoryRunSlots::default()),
        max: 1,
    };
    let short = Duration::from_millis(200);
    let first = places
        .take(&"t".into(), short)
        .await
        .unwrap()
        .expect("free");
    assert!(
        places.take(&"t".into(), short).await.unwrap().is_none(),
        "taken"
    );
    assert!(
        places.take(&"u".into(), short).await.unwrap().is_some(),
        "tenants apart"
    );
    // A waiter gets the place once it is given back, within its time.
    let p = places.clone();
    let waiter =
        tokio::spawn(async move { p.take(&"t".into(), Duration::from_secs(5)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await;
    let second = waiter.await.unwrap().expect("handed on");
    // Dropped without a release (a call whose client left): given back in the background.
    drop(second);
    let third = places
        .take(&"t".into(), Duration::from_secs(2))
        .await
        .unwrap();
    assert!(third.is_some(), "a dropped place comes back");
    // A panic drops it too.
    let p = places.clone();
    let panicked = tokio::spawn(async move {
        let _held = p.take(&"v".into(), short).await.unwrap().unwrap();
        panic!("the run panicked");
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    assert!(
        places
            .take(&"v".into(), Duration::from_secs(2))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn gate_running_places_time_out_and_free_on_drop() {
    let gate = FairGate::new(4, 1);
    let places = RunningPlaces::Gate(gate.clone());
    let held = places
        .take(&"t".into(), Duration::from_millis(50))
        .await
        .unwrap();
    assert!(held.is_some());
    assert!(
        places
            .take(&"t".into(), Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
    drop(held);
    assert_eq!(
        gate.running(&"t".into()),
        0,
        "the timed-out waiter took nothing"
    );
    assert!(
        places
            .take(&"t".into(), Duration::from_millis(50))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        RunningPlaces::Unlimited
            .take(&"t".into(), Duration::ZERO)
            .await
            .unwrap()
            .is_some()
    );
}
