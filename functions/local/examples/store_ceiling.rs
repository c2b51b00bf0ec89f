//! The ceiling of task creation for `bench/create_ceiling.sh`: the embedded store alone
//! ([`EmbeddedStore`], the same group-commit writer thread `mcp-tasks serve` uses), no HTTP,
//! no engine, no queue, on the runtime `mcp-tasks serve` runs (tokio, multi-thread, one
//! worker per core), doing the durable commits a task created by `tools/call` of `wait` 0 s
//! costs the server:
//!
//! 1. the creation (`create_within`, record and arguments, the tenant's place counted), which
//!    the client waits for;
//! 2. then, in the background as the worker does while the client sends its next request, a
//!    read of the record, the run's lease (`update`) and the end (`update` to `completed`).
//!
//! `WRITERS` loops each create one task after another for `SECONDS`; creations that return
//! before the deadline are counted; the background commits still running then are awaited
//! (not counted). One line on stdout:
//! `STORE_CEILING {"writers":16,"seconds":10.0,"creations":12345,"per_s":1234.5,...}`.
//!
//!   cargo run --release -p mcp-tasks --example store_ceiling -- DIR WRITERS SECONDS [create-only]
//!
//! `DIR` must not hold a database yet (each run starts from an empty store, as a fresh server
//! does). `create-only` leaves out the background commits (the store's bare creation rate).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks_core::store::TaskStore;
use mcp_tasks_core::store::embedded::EmbeddedStore;
use mcp_tasks_core::task::{Lease, TaskRecord, new_task_id};
use mcp_tasks_core::tenant::Tenant;
use serde_json::{Value, json};

/// The server's allocator (functions/local/src/main.rs), so the store's work costs the same.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What `mcp-tasks serve` stores for a creation: its default TTL and poll interval, the
/// capabilities a client with the tasks extension declares, `--max-active-tasks 1000000`.
const TTL_MS: u64 = 24 * 3600 * 1000;
const POLL_MS: u64 = 1000;
const MAX_ACTIVE: usize = 1_000_000;

fn usage() -> ! {
    eprintln!("usage: store_ceiling DIR WRITERS SECONDS [create-only]");
    std::process::exit(2);
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(writers), Some(seconds)) = (
        args.first().map(PathBuf::from),
        args.get(1).and_then(|s| s.parse::<usize>().ok()),
        args.get(2).and_then(|s| s.parse::<f64>().ok()),
    ) else {
        usage()
    };
    let follow = match args.get(3).map(String::as_str) {
        None => true,
        Some("create-only") => false,
        Some(_) => usage(),
    };
    std::fs::create_dir_all(&dir).expect("the data directory");
    let path = dir.join("tasks.redb");
    if path.exists() {
        eprintln!(
            "store_ceiling: {} exists; give an empty directory",
            path.display()
        );
        std::process::exit(2);
    }
    let store = EmbeddedStore::open(&path).expect("the embedded store");
    let tenant = Tenant::new("bench");
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let arguments = json!({"seconds": 0});
    let followed = Arc::new(AtomicU64::new(0));

    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let loops = (0..writers).map(|_| {
        let (store, tenant, caps, arguments) = (
            store.clone(),
            tenant.clone(),
            caps.clone(),
            arguments.clone(),
        );
        let followed = followed.clone();
        tokio::spawn(async move {
            let (mut created, mut background) = (0u64, Vec::new());
            while Instant::now() < deadline {
                let task = TaskRecord::new(
                    tenant.clone(),
                    new_task_id(),
                    "wait",
                    Some(TTL_MS),
                    POLL_MS,
                    caps.clone(),
                );
                let stored = store.create_within(&task, &arguments, MAX_ACTIVE).await;
                assert!(stored.expect("a creation"), "a creation was refused");
                if Instant::now() <= deadline {
                    created += 1;
                }
                if follow {
                    let (store, followed) = (store.clone(), followed.clone());
                    background.push(tokio::spawn(async move {
                        run_and_end(&store, task).await;
                        followed.fetch_add(1, Ordering::Relaxed);
                    }));
                }
            }
            for b in background {
                b.await.expect("a background run");
            }
            created
        })
    });
    let loops: Vec<_> = loops.collect();
    let mut creations = 0;
    for l in loops {
        creations += l.await.expect("a writer");
    }
    let drained = started.elapsed().as_secs_f64();
    println!(
        "STORE_CEILING {}",
        json!({
            "writers": writers,
            "seconds": seconds,
            "creations": creations,
            "per_s": creations as f64 / seconds,
            "background_runs": followed.load(Ordering::Relaxed),
            "drained_after_s": drained,
            "follow": follow,
        })
    );
}

/// What the worker writes for a `wait` 0 s task: the record read, the lease taken, the task
/// completed — two conditional writes, each durable before it returns.
async fn run_and_end(store: &EmbeddedStore, task: TaskRecord) {
    let mut task = store
        .get(task.key())
        .await
        .expect("a read")
        .expect("the task just created");
    task.lease = Some(Lease {
        owner: "ceiling".into(),
        expires_at_ms: task.created_at_ms + 60_000,
    });
    task.attempts += 1;
    task.version = store.update(&task).await.expect("the lease");
    let result: Value = json!({"content": [{"type": "text", "text": "Waited 0 s."}]});
    task.complete(result).expect("working to completed");
    store.update(&task).await.expect("the end");
}
