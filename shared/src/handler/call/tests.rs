//! An inline run holds one of its tenant's running places, and gives it back however the call
//! ends.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Method};

use super::*;
use crate::engine::{Engine, TaskSettings};
use crate::jobs::Step;
use crate::protocol::PROTOCOL_VERSION;
use crate::protocol::state::StateSealer;
use crate::queue::LocalQueue;
use crate::quota::{FairGate, RunningPlaces};
use crate::store::memory::MemoryStore;
use crate::tools::{Registry, ToolDef};

/// A tool that counts its runs in flight: it reports progress, then sleeps `ms`, or panics
/// when asked to.
struct Probe {
    def: ToolDef,
    now: AtomicUsize,
    most: AtomicUsize,
}

#[async_trait::async_trait]
impl Tool for Probe {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // Counted out on every way out, a panic and a dropped call included.
        struct Out<'a>(&'a AtomicUsize);
        impl Drop for Out<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _out = Out(&self.now);
        ctx.progress(0.0, None, "started");
        if ctx.arguments()["panic"] == true {
            panic!("the probe was asked to panic");
        }
        let ms = ctx.arguments()["ms"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(Step::Done(crate::jobs::text_result("done")))
    }
}

struct Rig {
    service: Arc<McpService>,
    gate: Arc<FairGate>,
    probe: Arc<Probe>,
}

/// A service whose inline runs take places of a fair gate of 8, one per tenant; synchronous
/// calls may wait `budget` (buffered) or stream up to `stream`.
fn rig(budget: Duration, stream: Option<Duration>) -> Rig {
    let (queue, rx) = LocalQueue::new();
    std::mem::forget(rx);
    let gate = FairGate::new(8, 1);
    let engine = Engine::new(
        Arc::new(MemoryStore::new()),
        Arc::new(queue),
        TaskSettings::default(),
    )
    .with_running_places(RunningPlaces::Gate(gate.clone()));
    let probe = Arc::new(Probe {
        def: ToolDef {
            name: "probe",
            description: "counts its runs in flight",
            input_schema: json!({"type": "object"}),
            policy: Policy::Optional,
        },
        now: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    });
    let config = ServiceConfig {
        sync_budget: budget,
        stream_budget: stream,
        ..ServiceConfig::default()
    };
    let tools = Arc::new(Registry::new(vec![probe.clone() as Arc<dyn Tool>]).checking_arguments());
    let service = Arc::new(McpService::new(
        config,
        engine,
        tools,
        StateSealer::random(),
    ));
    Rig {
        service,
        gate,
        probe,
    }
}

/// A synchronous `tools/call` of the probe (no tasks extension), asking for progress when
/// `token`.
fn call(arguments: Value, token: bool) -> HttpRequest {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if token {
        meta["progressToken"] = json!("p");
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "probe", "arguments": arguments, "_meta": meta}});
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
    headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
    headers.insert("mcp-name", HeaderValue::from_static("probe"));
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers,
        body: Bytes::from(serde_json::to_vec(&body).unwrap()),
    }
}

fn json_of(reply: Reply) -> Value {
    match reply.body {
        ReplyBody::Json(v) => v,
        _ => panic!("expected one JSON body"),
    }
}

/// Waits (up to 2 s) until the tenant holds no place.
async fn all_given_back(gate: &FairGate) {
    for _ in 0..200 {
        if gate.running(&"local".into()) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the tenant still holds {} places",
        gate.running(&"local".into())
    );
}

#[tokio::test]
async fn a_tenants_inline_runs_take_its_running_places_in_turn() {
    let r = rig(Duration::from_secs(20), None);
    let calls = (0..40).map(|_| {
        let service = r.service.clone();
        tokio::spawn(async move { json_of(service.handle(call(json!({"ms": 5}), false)).await) })
    });
    for c in calls.collect::<Vec<_>>() {
        let answer = c.await.unwrap();
        assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
    }
    let most = r.probe.most.load(Ordering::SeqCst);
    eprintln!("inline runs of one tenant at once, one running place: at most {most}");
    assert_eq!(most, 1);
    all_given_back(&r.gate).await;
}

#[tokio::test]
async fn a_call_that_waited_its_whole_budget_gets_the_quota_refusal() {
    let r = rig(Duration::from_millis(300), None);
    let held = r.gate.acquire(&"local".into()).await;
    let answer = json_of(r.service.handle(call(json!({}), false)).await);
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    assert_eq!(
        result["_meta"][crate::quota::QUOTA_META]["limit"],
        "running_jobs"
    );
    assert_eq!(result["_meta"][crate::quota::QUOTA_META]["max"], 100.0);
    assert_eq!(r.probe.most.load(Ordering::SeqCst), 0, "nothing ran");
    drop(held);
    let answer = json_of(r.service.handle(call(json!({}), false)).await);
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
}

#[tokio::test]
async fn the_place_comes_back_however_the_call_ends() {
    // Over its budget.
    let r = rig(Duration::from_millis(200), None);
    let answer = json_of(r.service.handle(call(json!({"ms": 5000}), false)).await);
    assert!(answer.get("error").is_some(), "{answer}");
    all_given_back(&r.gate).await;
    // The tool panics: the call answers -32603 (as a task would fail), and the server goes on.
    let answer = json_of(r.service.handle(call(json!({"panic": true}), false)).await);
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["message"], "The job failed unexpectedly");
    all_given_back(&r.gate).await;
    let answer = json_of(r.service.handle(call(json!({}), false)).await);
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
    // The client goes away from a streamed answer.
    let r = rig(Duration::from_secs(20), Some(Duration::from_secs(20)));
    let reply = r.service.handle(call(json!({"ms": 60_000}), true)).await;
    assert!(matches!(reply.body, ReplyBody::Sse(_)), "committed to SSE");
    assert_eq!(r.gate.running(&"local".into()), 1);
    drop(reply);
    all_given_back(&r.gate).await;
    assert_eq!(r.probe.now.load(Ordering::SeqCst), 0, "and the run stopped");
}
