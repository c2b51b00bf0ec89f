//! What the integrity check at open costs: opening the embedded store's database with redb's
//! check (every page of the committed trees read and its checksum verified, the allocator state
//! rebuilt) against a plain open, on a data directory of many unfinished tasks.
//!
//!   cargo bench -p mcp-tasks-core --bench store_open
//!   STORE_OPEN_TASKS=20000 cargo bench -p mcp-tasks-core --bench store_open
//!
//! Seeds a fresh database with `STORE_OPEN_TASKS` (default 100,000) in-flight tasks the way
//! `tests/support::seed_in_flight` does (created, then leased), closes it, then times five
//! interleaved rounds of: a plain open; an open with the check; `EmbeddedStore::open` as
//! shipped; and, as the floor any check must pay, reading the file once. Opens are timed to the
//! moment they return (the close after each is not counted). The page cache is warm (the file
//! was just written or read); a cold first start adds the disk's time to read the file once,
//! to the check and to nothing in the plain open. The figures are the ratios, measured in the
//! same run; absolute times on a shared machine are noise.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_tasks_core::store::TaskStore as _;
use mcp_tasks_core::store::embedded::EmbeddedStore;
use mcp_tasks_core::task::{Lease, TaskRecord, new_task_id};
use serde_json::json;

const ROUNDS: usize = 5;
/// What the store gives redb for its page cache (`REDB_CACHE_BYTES`).
const REDB_CACHE: usize = 32 * 1024 * 1024;

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

async fn seed(path: &Path, n: usize) {
    let store = Arc::new(EmbeddedStore::open(path).expect("open"));
    let mut writes = tokio::task::JoinSet::new();
    for _ in 0..n {
        let store = store.clone();
        writes.spawn(async move {
            let mut t = TaskRecord::new(
                "local".into(),
                new_task_id(),
                "wait",
                Some(86_400_000),
                1000,
                json!({}),
            );
            store.create(&t, &json!({"seconds": 3600})).await.unwrap();
            t.lease = Some(Lease {
                owner: "dead-process".into(),
                expires_at_ms: u64::MAX / 2,
            });
            store.update(&t).await.unwrap();
        });
        while writes.len() >= 256 {
            writes.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = writes.join_next().await {
        r.unwrap();
    }
}

fn redb_open(path: &Path, check: bool) -> redb::Database {
    redb::Database::builder()
        .set_cache_size(REDB_CACHE)
        .set_check_integrity_on_open(check)
        .open(path)
        .expect("open")
}

fn main() {
    let n: usize = std::env::var("STORE_OPEN_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tasks.redb");
    let (seeding, ()) = time(|| {
        tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(seed(&path, n))
    });
    let size = std::fs::metadata(&path).expect("file").len();
    println!(
        "{n} in-flight tasks, {:.1} MB file (seeded in {:.1} s)",
        size as f64 / 1e6,
        seeding.as_secs_f64()
    );
    let (mut plain, mut checked, mut store, mut read) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let (t, db) = time(|| redb_open(&path, false));
        drop(db);
        plain.push(t);
        let (t, db) = time(|| redb_open(&path, true));
        drop(db);
        checked.push(t);
        let (t, s) = time(|| EmbeddedStore::open(&path).expect("open"));
        drop(s);
        store.push(t);
        let (t, bytes) = time(|| std::fs::read(&path).expect("read"));
        drop(bytes);
        read.push(t);
    }
    let (plain, checked, store, read) =
        (median(plain), median(checked), median(store), median(read));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("median of {ROUNDS} rounds:");
    println!("  plain open                  {:>9.1} ms", ms(plain));
    println!(
        "  open with the check         {:>9.1} ms  {:>7.1}× plain  {:>5.1}× reading the file",
        ms(checked),
        ms(checked) / ms(plain),
        ms(checked) / ms(read)
    );
    println!(
        "  EmbeddedStore::open         {:>9.1} ms  {:>7.1}× plain  {:>5.1}× reading the file",
        ms(store),
        ms(store) / ms(plain),
        ms(store) / ms(read)
    );
    println!("  reading the file once       {:>9.1} ms", ms(read));
}
