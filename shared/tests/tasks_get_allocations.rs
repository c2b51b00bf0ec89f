//! Heap allocations per `tasks/get` on the embedded store, the request path the local server
//! runs most: decode, the cached record, the answer (`bench/hotpath_instructions.sh` counts
//! its instructions). The count is pinned a little above what it is, so that a change that
//! adds work to every poll is noticed here rather than in a benchmark.
//!
//! A counting global allocator counts only the thread that serves the request, and only while
//! it does (the test runs it on a current-thread runtime).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use serde_json::json;

use mcp_tasks_core::engine::{Engine, TaskSettings};
use mcp_tasks_core::handler::{HttpRequest, McpService, ReplyBody, ServiceConfig};
use mcp_tasks_core::protocol::state::StateSealer;
use mcp_tasks_core::queue::LocalQueue;
use mcp_tasks_core::store::TaskStore;
use mcp_tasks_core::store::embedded::EmbeddedStore;
use mcp_tasks_core::task::{TaskId, TaskRecord};
use mcp_tasks_core::tools::Registry;

/// Most allocations one `tasks/get` may make once the store's cache holds the record
/// (measured: 3 — the store key, the store's boxed future, the answer).
const MAX_ALLOCATIONS: usize = 4;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: the thread-locals may be gone while a thread ends.
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's layout is passed through unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
        // SAFETY: as `GlobalAlloc::realloc` requires of its caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations `f` makes on this thread.
async fn allocations<T>(f: impl Future<Output = T>) -> (usize, T) {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    let out = f.await;
    COUNTING.with(|c| c.set(false));
    (COUNT.with(Cell::get), out)
}

fn tasks_get(task_id: &str) -> HttpRequest {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {
        "taskId": task_id,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}}}}}});
    let mut headers = HeaderMap::new();
    for (k, v) in [
        ("host", "127.0.0.1:8080"),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tasks/get"),
        ("mcp-name", task_id),
    ] {
        headers.insert(k, HeaderValue::from_str(v).unwrap());
    }
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers,
        body: Bytes::from(body.to_string()),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_tasks_get_allocates_a_handful_of_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(&dir.path().join("tasks.redb")).unwrap());
    let config = ServiceConfig::default();
    let mut task = TaskRecord::new(
        config.tenant.clone(),
        TaskId::from_static("tsk_01J0ALLOCATIONS"),
        "wait",
        Some(3_600_000),
        1000,
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
    );
    store.create(&task, &json!({})).await.unwrap();
    task.complete(json!({"content": [{"type": "text", "text": "Waited 0.1 s."}]}))
        .unwrap();
    store.update(&task).await.unwrap();
    let (queue, _rx) = LocalQueue::new();
    let engine = Engine::new(store, Arc::new(queue), TaskSettings::default());
    let service = Arc::new(McpService::new(
        config,
        engine,
        Arc::new(Registry::new(Vec::new())),
        StateSealer::random(),
    ));
    let mut counts = Vec::new();
    for _ in 0..5 {
        let req = tasks_get(&task.task_id);
        let (n, reply) = allocations(service.handle(req)).await;
        assert_eq!(reply.status, 200);
        let ReplyBody::Text(_, body) = &reply.body else {
            panic!("tasks/get answers JSON text: {reply:?}");
        };
        let body = std::str::from_utf8(body).expect("UTF-8");
        assert!(body.contains(r#""status":"completed""#), "{body}");
        counts.push(n);
    }
    // The first read fills the store's cache; the others are the steady state.
    let steady = *counts[1..].iter().max().unwrap();
    eprintln!("allocations per tasks/get: {counts:?}");
    assert!(
        steady <= MAX_ALLOCATIONS,
        "a tasks/get allocated {steady} times (at most {MAX_ALLOCATIONS}): {counts:?}"
    );
}
