use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::engine::{Engine, TaskSettings};
use crate::handler::{HttpRequest, ReplyBody, ServiceConfig};
use crate::protocol::state::StateSealer;
use crate::queue::LocalQueue;
use crate::store::memory::MemoryStore;
use crate::task::TaskRef;
use crate::tools::Registry;
use crate::tools::doubles;

/// A service on a host that buffers answers (so a synchronous call has the buffered
/// budget, `budget`); nobody runs queued jobs.
fn service(budget: Duration) -> Arc<McpService> {
    let (queue, rx) = LocalQueue::new();
    std::mem::forget(rx);
    let engine = Engine::new(
        Arc::new(MemoryStore::new()),
        Arc::new(queue),
        TaskSettings::default(),
    );
    let config = ServiceConfig {
        sync_budget: budget,
        stream_budget: None,
        ..ServiceConfig::default()
    };
    Arc::new(McpService::new(
        config,
        engine,
        Arc::new(Registry::new(vec![doubles::wait()]).checking_arguments()),
        StateSealer::random(),
    ))
}

/// A 2025-11-25 `tools/call` of `wait` asking for progress, accepting SSE.
fn wait_call(seconds: f64) -> HttpRequest {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "wait", "arguments": {"seconds": seconds}, "_meta": {"progressToken": "t"}}});
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "accept",
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers,
        body: Bytes::from(serde_json::to_vec(&body).unwrap()),
    }
}

/// The legacy reshaping of a run that outgrew the budget: it points at `params.task`,
/// never at the 2026 extension (whose name a 2025 client cannot act on).
fn assert_budget_error(msg: &Value) {
    assert_eq!(msg["id"], 9, "{msg}");
    let e = &msg["error"];
    assert_eq!(e["code"], -32021, "{msg}");
    assert!(
        e["message"].as_str().unwrap().contains("params.task"),
        "{msg}"
    );
    assert!(e.get("data").is_none(), "{msg}");
}

#[tokio::test]
async fn a_budget_overrun_before_any_progress_is_plain_json() {
    let reply = service(Duration::from_millis(200))
        .handle(wait_call(5.0))
        .await;
    assert_eq!(reply.status, 200);
    match reply.body {
        ReplyBody::Json(v) => assert_budget_error(&v),
        _ => panic!("expected one JSON answer"),
    }
}

#[tokio::test]
async fn a_budget_overrun_after_progress_ends_the_stream_reshaped() {
    let reply = service(Duration::from_millis(1500))
        .handle(wait_call(5.0))
        .await;
    assert_eq!(reply.status, 200);
    let ReplyBody::Sse(mut rx) = reply.body else {
        panic!("expected an SSE stream");
    };
    let mut messages = Vec::new();
    while let Some(m) = rx.recv().await {
        messages.push(m);
    }
    let (last, progress) = messages.split_last().expect("messages");
    assert!(!progress.is_empty(), "{messages:?}");
    for p in progress {
        assert_eq!(p["method"], "notifications/progress", "{p}");
        assert_eq!(p["params"]["progressToken"], "t", "{p}");
    }
    assert_budget_error(last);
}

/// A 2025-11-25 request of `method`, JSON only.
fn legacy_request(method: &str, params: Value) -> HttpRequest {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("accept", HeaderValue::from_static("application/json"));
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-11-25"),
    );
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers,
        body: Bytes::from(serde_json::to_vec(&body).unwrap()),
    }
}

fn json_of(reply: crate::handler::Reply) -> Value {
    match reply.body {
        ReplyBody::Json(v) => v,
        _ => panic!("expected one JSON answer"),
    }
}

#[test]
fn tasks_result_stops_waiting_before_the_invocation_ends() {
    let t0 = tokio::time::Instant::now();
    let budget = Duration::from_secs(25);
    assert_eq!(result_deadline(t0, budget, None), t0 + budget);
    let lambda = t0 + Duration::from_secs(10);
    assert_eq!(
        result_deadline(t0, budget, Some(lambda)),
        lambda - ANSWER_MARGIN
    );
    let roomy = t0 + Duration::from_secs(60);
    assert_eq!(result_deadline(t0, budget, Some(roomy)), t0 + budget);
    // An invocation already (nearly) over: one read, then the answer.
    assert!(result_deadline(t0, budget, Some(t0)) <= t0);
}

/// The `tasks` function (10 s timeout) answers a legacy `tasks/result` on an unfinished task
/// with `-32602` and `data.status` before its invocation ends, not after the 25 s budget
/// (on AWS: killed at 10 s, a bare 502). Tokio's clock is paused, so the wait is virtual.
#[tokio::test(start_paused = true)]
async fn tasks_result_answers_within_the_invocation_deadline() {
    let service = service(Duration::from_secs(25));
    let created = json_of(
        service
            .handle(legacy_request(
                "tools/call",
                json!({"name": "wait", "arguments": {"seconds": 600}, "task": {}}),
            ))
            .await,
    );
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(10);
    let reply = crate::clock::within_deadline(
        Some(deadline),
        service.handle(legacy_request("tasks/result", json!({"taskId": id}))),
    )
    .await;
    let answered = tokio::time::Instant::now();
    let v = json_of(reply);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["status"], "working", "{v}");
    assert_eq!(v["error"]["data"]["taskId"], id.as_str(), "{v}");
    assert!(answered < deadline, "answered after the invocation's end");
    // Outside an invocation the budget still applies in full.
    let v = json_of(
        service
            .handle(legacy_request("tasks/result", json!({"taskId": id})))
            .await,
    );
    assert_eq!(v["error"]["data"]["status"], "working", "{v}");
    assert!(tokio::time::Instant::now() - answered >= Duration::from_secs(25));
}

/// A memory store whose reads take `read` each (the emulator under load, DynamoDB retrying a
/// throttled read): what `tasks/result`'s wait must count.
struct SlowReads {
    inner: MemoryStore,
    read: Duration,
}

#[async_trait::async_trait]
impl crate::store::TaskStore for SlowReads {
    async fn create_within(
        &self,
        task: &crate::task::TaskRecord,
        args: &Value,
        max: usize,
    ) -> Result<bool, crate::store::StoreError> {
        self.inner.create_within(task, args, max).await
    }
    async fn get(
        &self,
        id: TaskRef<'_>,
    ) -> Result<Option<crate::task::TaskRecord>, crate::store::StoreError> {
        tokio::time::sleep(self.read).await;
        self.inner.get(id).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, crate::store::StoreError> {
        self.inner.arguments(id).await
    }
    async fn update(
        &self,
        task: &crate::task::TaskRecord,
    ) -> Result<u64, crate::store::StoreError> {
        self.inner.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&crate::task::TaskKey>,
        limit: usize,
    ) -> Result<Vec<crate::task::TaskKey>, crate::store::StoreError> {
        self.inner.list_active(after, limit).await
    }
    async fn list_expired(
        &self,
        now: u64,
        limit: usize,
    ) -> Result<Vec<crate::task::TaskKey>, crate::store::StoreError> {
        self.inner.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), crate::store::StoreError> {
        self.inner.delete(id).await
    }
}

/// The `tasks` function's 10 s deadline (the handler's `within_deadline`) and reads of 1.5 s
/// each: the wait counts the reads' own time, so `tasks/result` on an unfinished task answers
/// at least `ANSWER_MARGIN` before the invocation ends — the last read used to start just
/// before the wait's end and finish past the timeout (on AWS, a bare 502 and a 10 s bill).
#[tokio::test(start_paused = true)]
async fn tasks_result_counts_the_stores_time_within_the_invocation_deadline() {
    let read = Duration::from_millis(1500);
    let (queue, rx) = LocalQueue::new();
    std::mem::forget(rx);
    let engine = Engine::new(
        Arc::new(SlowReads {
            inner: MemoryStore::new(),
            read,
        }),
        Arc::new(queue),
        TaskSettings::default(),
    );
    let service = Arc::new(McpService::new(
        ServiceConfig {
            sync_budget: Duration::from_secs(25),
            stream_budget: None,
            ..ServiceConfig::default()
        },
        engine,
        Arc::new(Registry::new(vec![doubles::wait()]).checking_arguments()),
        StateSealer::random(),
    ));
    let created = json_of(
        service
            .handle(legacy_request(
                "tools/call",
                json!({"name": "wait", "arguments": {"seconds": 600}, "task": {}}),
            ))
            .await,
    );
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(10);
    let reply = crate::clock::within_deadline(
        Some(deadline),
        service.handle(legacy_request("tasks/result", json!({"taskId": id}))),
    )
    .await;
    let answered = tokio::time::Instant::now();
    let v = json_of(reply);
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["status"], "working", "{v}");
    assert!(
        answered + ANSWER_MARGIN <= deadline,
        "answered {:?} after the start, the invocation ends at 10 s with a margin of {ANSWER_MARGIN:?}",
        answered - started
    );
    // It still waited: not one read and out.
    assert!(
        answered - started >= Duration::from_secs(6),
        "{:?}",
        answered - started
    );
}
