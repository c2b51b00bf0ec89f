use std::collections::BTreeMap;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::engine::{Engine, TaskSettings};
use crate::handler::{HttpRequest, ServiceConfig, StreamSlots};
use crate::protocol::PROTOCOL_VERSION;
use crate::protocol::state::StateSealer;
use crate::queue::LocalQueue;
use crate::store::memory::MemoryStore;
use crate::store::watch::{Watched, Watchers};
use crate::store::{TaskRef, TaskStore};
use crate::task::TaskId;
use crate::tools::Registry;
use crate::tools::doubles;

struct Rig {
    service: Arc<McpService>,
    engine: Engine,
    store: Arc<dyn TaskStore>,
}

/// A service whose store pushes changes (as the local server's), streams answers up to
/// `stream`, and lets each tenant open `max_streams` streams; nobody runs queued jobs.
fn rig(stream: Option<Duration>, max_streams: usize) -> Rig {
    let (queue, rx) = LocalQueue::new();
    std::mem::forget(rx);
    let watchers = Arc::new(Watchers::default());
    let store: Arc<dyn TaskStore> = Arc::new(Watched::new(MemoryStore::new(), watchers.clone()));
    let engine = Engine::new(store.clone(), Arc::new(queue), TaskSettings::default());
    let config = ServiceConfig {
        stream_budget: stream,
        change_feed: ChangeFeed::Push(watchers),
        max_streams_per_tenant: max_streams,
        ..ServiceConfig::default()
    };
    let service = Arc::new(McpService::new(
        config,
        engine.clone(),
        Arc::new(Registry::new(vec![doubles::wait()]).checking_arguments()),
        StateSealer::random(),
    ));
    Rig {
        service,
        engine,
        store,
    }
}

fn request(method: &str, name: Option<&str>, params: Value, tasks: bool) -> HttpRequest {
    let caps = match tasks {
        true => json!({"extensions": {TASKS_EXTENSION: {}}}),
        false => json!({}),
    };
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let body = json!({"jsonrpc": "2.0", "id": "sub-1", "method": method, "params": params});
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "accept",
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(
        "mcp-protocol-version",
        HeaderValue::from_static(PROTOCOL_VERSION),
    );
    headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
    if let Some(n) = name {
        headers.insert("mcp-name", HeaderValue::from_str(n).unwrap());
    }
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers,
        body: Bytes::from(serde_json::to_vec(&body).unwrap()),
    }
}

fn listen(ids: Value) -> HttpRequest {
    request(
        "subscriptions/listen",
        None,
        json!({"notifications": {"taskIds": ids, "toolsListChanged": true}}),
        true,
    )
}

fn wait_call(seconds: f64, token: bool) -> HttpRequest {
    let mut params = json!({"name": "wait", "arguments": {"seconds": seconds}});
    let mut req = request("tools/call", Some("wait"), params.take(), false);
    if token {
        let mut body: Value = serde_json::from_slice(&req.body).unwrap();
        body["params"]["_meta"]["progressToken"] = json!("p");
        req.body = Bytes::from(serde_json::to_vec(&body).unwrap());
    }
    req
}

async fn task(r: &Rig, tenant: &str) -> TaskId {
    r.engine
        .create_task(
            &Tenant::from(tenant),
            "wait",
            json!({"seconds": 1}),
            Value::Null,
            json!({}),
        )
        .await
        .unwrap()
        .task_id
}

async fn next(rx: &mut mpsc::Receiver<Value>) -> Option<Value> {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a message within 5 s")
}

fn stream(reply: Reply) -> mpsc::Receiver<Value> {
    assert_eq!(reply.status, 200);
    match reply.body {
        ReplyBody::Sse(rx) => rx,
        other => panic!("expected an SSE answer, got {other:?}"),
    }
}

fn json_of(reply: Reply) -> (u16, Value) {
    match reply.body {
        ReplyBody::Json(v) => (reply.status, v),
        other => panic!("expected a JSON answer, got {other:?}"),
    }
}

#[tokio::test]
async fn changes_are_pushed_then_the_stream_closes_once_the_task_is_terminal() {
    let r = rig(Some(Duration::from_secs(60)), 10);
    let id = task(&r, "local").await;
    let mut rx = stream(r.service.handle(listen(json!([id]))).await);
    let ack = next(&mut rx).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], "sub-1");
    // Only what is supported is agreed: no list-changed notifications here.
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": [id]}));
    let now = next(&mut rx).await.unwrap();
    assert_eq!(now["method"], "notifications/tasks");
    assert_eq!(now["params"]["status"], "working");
    assert_eq!(now["params"]["taskId"], id.as_str());
    assert!(now["params"].get("resultType").is_none(), "{now}");
    assert_eq!(now["params"]["_meta"][SUBSCRIPTION_ID], "sub-1");

    // Input required: pushed with the requests.
    let mut t = r
        .store
        .get(TaskRef {
            tenant: &"local".into(),
            task_id: &id,
        })
        .await
        .unwrap()
        .unwrap();
    let mut asks = BTreeMap::new();
    asks.insert(
        "ok".to_owned(),
        json!({"method": "elicitation/create", "params": {}}),
    );
    t.require_input(asks).unwrap();
    r.store.update(&t).await.unwrap();
    let asked = next(&mut rx).await.unwrap();
    assert_eq!(asked["params"]["status"], "input_required", "{asked}");
    assert!(
        asked["params"]["inputRequests"]["ok"].is_object(),
        "{asked}"
    );

    // Terminal: the full task, then the listen result, then the end of the stream.
    r.engine
        .cancel(TaskRef::new(&"local".into(), &id))
        .await
        .unwrap();
    let last = next(&mut rx).await.unwrap();
    assert_eq!(last["params"]["status"], "cancelled", "{last}");
    let end = next(&mut rx).await.unwrap();
    assert_eq!(end["id"], "sub-1");
    assert_eq!(end["result"]["resultType"], "complete");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION_ID], "sub-1");
    assert!(next(&mut rx).await.is_none(), "the stream ends");
}

#[tokio::test]
async fn another_tenants_task_is_not_agreed_and_nothing_is_sent_of_it() {
    let r = rig(Some(Duration::from_secs(60)), 10);
    let theirs = task(&r, "globex").await;
    let mut rx = stream(
        r.service
            .handle(listen(json!([theirs, "tsk_unknown"])))
            .await,
    );
    let ack = next(&mut rx).await.unwrap();
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": []}));
    r.engine
        .cancel(TaskRef::new(&"globex".into(), &theirs))
        .await
        .unwrap();
    let end = next(&mut rx).await.unwrap();
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert!(next(&mut rx).await.is_none());
}

#[tokio::test]
async fn a_buffered_host_acknowledges_nothing_and_closes() {
    let r = rig(None, 10);
    let id = task(&r, "local").await;
    let mut rx = stream(r.service.handle(listen(json!([id]))).await);
    let ack = next(&mut rx).await.unwrap();
    assert_eq!(ack["params"]["notifications"], json!({"taskIds": []}));
    assert!(next(&mut rx).await.unwrap().get("result").is_some());
    assert!(next(&mut rx).await.is_none());
}

#[tokio::test]
async fn the_stream_closes_gracefully_at_its_budget() {
    let r = rig(Some(Duration::from_millis(300)), 10);
    let id = task(&r, "local").await;
    let mut rx = stream(r.service.handle(listen(json!([id]))).await);
    next(&mut rx).await.unwrap();
    assert_eq!(
        next(&mut rx).await.unwrap()["method"],
        "notifications/tasks"
    );
    let end = next(&mut rx).await.unwrap();
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
}

#[tokio::test]
async fn bad_listen_requests_get_spec_shaped_errors() {
    let r = rig(Some(Duration::from_secs(60)), 10);
    let without_ext = request(
        "subscriptions/listen",
        None,
        json!({"notifications": {"taskIds": []}}),
        false,
    );
    let (status, v) = json_of(r.service.handle(without_ext).await);
    assert_eq!(
        (status, v["error"]["code"].clone()),
        (400, json!(-32021)),
        "{v}"
    );
    let too_many: Vec<String> = (0..=MAX_SUBSCRIBED_TASKS)
        .map(|i| format!("t{i}"))
        .collect();
    for params in [
        json!({}),
        json!({"notifications": []}),
        json!({"notifications": {"taskIds": "t1"}}),
        json!({"notifications": {"taskIds": [1]}}),
        json!({"notifications": {"taskIds": too_many}}),
        json!({"notifications": {"toolsListChanged": "yes"}}),
    ] {
        let req = request("subscriptions/listen", None, params.clone(), true);
        let (_, v) = json_of(r.service.handle(req).await);
        assert_eq!(v["error"]["code"], -32602, "{params}: {v}");
    }
    let mut json_only = listen(json!([]));
    json_only
        .headers
        .insert("accept", HeaderValue::from_static("application/json"));
    let (status, v) = json_of(r.service.handle(json_only).await);
    assert_eq!(status, 406, "{v}");
}

#[tokio::test]
async fn a_tenant_over_its_stream_cap_is_refused_until_one_ends() {
    let r = rig(Some(Duration::from_secs(60)), 1);
    let id = task(&r, "local").await;
    let mut first = stream(r.service.handle(listen(json!([id]))).await);
    next(&mut first).await.unwrap();
    let (status, v) = json_of(r.service.handle(listen(json!([id]))).await);
    assert_eq!(status, 429, "{v}");
    // Closing the first gives its place back.
    drop(first);
    let mut again = None;
    for _ in 0..50 {
        let reply = r.service.handle(listen(json!([id]))).await;
        if reply.status == 200 {
            again = Some(stream(reply));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the place came back");
}

#[tokio::test(start_paused = true)]
async fn a_long_synchronous_call_streams_on_a_streaming_host() {
    let r = rig(Some(Duration::from_secs(120)), 10);
    // Without a progress token: nothing but the answer, once committed to SSE.
    let mut rx = stream(r.service.handle(wait_call(30.0, false)).await);
    let answer = rx.recv().await.unwrap();
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert!(rx.recv().await.is_none());
    // A quick one is still one JSON body.
    let (status, v) = json_of(r.service.handle(wait_call(1.0, false)).await);
    assert_eq!(
        (status, v["result"]["resultType"].clone()),
        (200, json!("complete"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_past_the_stream_budget_ends_with_32021() {
    let r = rig(Some(Duration::from_secs(40)), 10);
    let mut rx = stream(r.service.handle(wait_call(60.0, true)).await);
    let mut last = Value::Null;
    let mut progress = 0;
    while let Some(m) = rx.recv().await {
        if m["method"] == "notifications/progress" {
            progress += 1;
        }
        last = m;
    }
    assert!(progress >= 30, "progress every second: {progress}");
    assert_eq!(last["error"]["code"], -32021, "{last}");
}

#[tokio::test(start_paused = true)]
async fn long_calls_count_against_the_stream_cap() {
    let r = rig(Some(Duration::from_secs(120)), 1);
    let mut first = stream(r.service.handle(wait_call(60.0, false)).await);
    let (status, v) = json_of(r.service.handle(wait_call(60.0, false)).await);
    assert_eq!(status, 429, "{v}");
    assert!(first.recv().await.unwrap().get("result").is_some());
}

/// A caller whose token expires `in_secs` seconds from now (whole seconds, as `exp` is).
fn expiring(in_secs: u64) -> crate::handler::Admitted {
    crate::handler::Admitted {
        tenant: "local".into(),
        expires_at: Some(crate::clock::now_ms() / 1000 + in_secs),
    }
}

/// The last message of a stream, and how long the stream lasted.
async fn last_of(mut rx: mpsc::Receiver<Value>) -> (Value, Duration) {
    let started = tokio::time::Instant::now();
    let mut last = Value::Null;
    while let Some(m) = rx.recv().await {
        last = m;
    }
    (last, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn streams_end_with_an_error_when_the_callers_token_expires() {
    let r = rig(Some(Duration::from_secs(60)), 1);
    let id = task(&r, "local").await;
    // A subscription: acknowledged, then ended at the expiry, not at its 60 s budget.
    let reply = r.service.handle_admitted(expiring(3), listen(json!([id])));
    let (last, lasted) = last_of(stream(reply.await)).await;
    assert_eq!(last["error"]["code"], -32600, "{last}");
    assert_eq!(last["id"], "sub-1", "{last}");
    assert!(lasted <= Duration::from_secs(3), "{lasted:?}");
    // A long call streaming its progress: the run stops, the error goes last.
    let reply = r
        .service
        .handle_admitted(expiring(3), wait_call(60.0, true));
    let (last, lasted) = last_of(stream(reply.await)).await;
    assert_eq!(last["error"]["code"], -32600, "{last}");
    assert!(lasted <= Duration::from_secs(3), "{lasted:?}");
    // Nothing sent yet: a plain 401, so the client gets a fresh token and asks again.
    let reply = r
        .service
        .handle_admitted(expiring(3), wait_call(60.0, false));
    let (status, v) = json_of(reply.await);
    assert_eq!((status, v["error"]["code"].clone()), (401, json!(-32600)));
    // Each stream gave its place back (the cap is one).
    let reply = r
        .service
        .handle_admitted(expiring(60), wait_call(12.0, false));
    assert!(stream(reply.await).recv().await.is_some());
}

/// Streams of all tenants together stop at the cap across tenants (`MaxStreams`, below the
/// mcp function's reservation): tenants each within their own cap cannot hold every
/// execution; a refusal takes no place of the tenant's, and an ended stream frees one.
#[tokio::test]
async fn streams_of_all_tenants_together_stop_at_the_total_cap() {
    let slots =
        StreamSlots::new(Arc::new(crate::quota::MemoryRunSlots::default()), 10).with_total(3);
    let minute = Duration::from_secs(60);
    let mut held = Vec::new();
    for tenant in ["a", "b", "c"] {
        held.push(slots.take(&Tenant::from(tenant), minute).await.unwrap());
    }
    for _ in 0..2 {
        let refused = slots.take(&Tenant::from("d"), minute).await.err().unwrap();
        assert_eq!(refused.status, 429, "{refused:?}");
    }
    held.pop().unwrap().release().await;
    let _d = slots.take(&Tenant::from("d"), minute).await.unwrap();
    assert!(
        slots.take(&Tenant::from("e"), minute).await.is_err(),
        "full again"
    );
    // The tenant's own cap still holds beside it.
    let own = StreamSlots::new(Arc::new(crate::quota::MemoryRunSlots::default()), 1).with_total(3);
    let _one = own.take(&Tenant::from("a"), minute).await.unwrap();
    assert!(own.take(&Tenant::from("a"), minute).await.is_err());
    assert!(own.take(&Tenant::from("b"), minute).await.is_ok());
}
