//! Property-based fuzzing of the HTTP/JSON-RPC entry point: whatever a client sends — random
//! bytes, random JSON, requests with mutated envelopes and headers — the service answers
//! without panicking, with a status from the transport's set and a well-formed JSON-RPC body,
//! and never an internal error. `PROPTEST_CASES` sets how many cases run (CI: the default of
//! this file; longer runs: see docs/reliability.md).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use mcp_tasks_core::engine::{Engine, TaskSettings};
use mcp_tasks_core::handler::{HttpRequest, McpService, ReplyBody, ServiceConfig};
use mcp_tasks_core::protocol::state::StateSealer;
use mcp_tasks_core::queue::LocalQueue;
use mcp_tasks_core::store::memory::MemoryStore;
use mcp_tasks_core::tools::Registry;
use proptest::prelude::*;
use serde_json::{Value, json};

const METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "initialize",
    "ping",
    "tasks/list",
    "tasks/result",
    "x",
];
const TOOLS: &[&str] = &[
    "test_simple_text",
    "greet",
    "slow_compute",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
    "test_input_required_result_multi_round",
    "test_custom_header",
    "test_missing_capability",
    "test_tool_with_progress",
    "nope",
];

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn service() -> Arc<McpService> {
    static S: OnceLock<Arc<McpService>> = OnceLock::new();
    S.get_or_init(|| {
        let _guard = runtime().enter();
        let (queue, rx) = LocalQueue::new();
        // Nobody runs the jobs: the fuzz targets the entry point, not the worker.
        std::mem::forget(rx);
        let engine = Engine::new(
            Arc::new(MemoryStore::new()),
            Arc::new(queue),
            TaskSettings::default(),
        );
        let config = ServiceConfig {
            sync_budget: Duration::from_millis(50),
            ..ServiceConfig::default()
        };
        Arc::new(McpService::new(
            config,
            engine,
            Arc::new(Registry::new(mcp_tasks_conformance_tools::tools()).checking_arguments()),
            StateSealer::random(),
        ))
    })
    .clone()
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[ -~]{0,12}".prop_map(Value::String),
        prop::sample::select(TOOLS).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_/.]{0,10}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn meta() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => prop_oneof![
            Just(json!({})),
            Just(json!({"sampling": {}})),
            Just(json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})),
        ].prop_map(|caps| json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps})),
        1 => json_value(),
    ]
}

/// A request shaped like a real one, with random holes in it.
fn near_request() -> impl Strategy<Value = (Value, String)> {
    (
        prop::sample::select(METHODS),
        prop::sample::select(TOOLS),
        json_value(),
        meta(),
        prop_oneof![Just(json!(1)), Just(json!("id")), json_value()],
        any::<bool>(),
    )
        .prop_map(|(method, tool, args, meta, id, with_task)| {
            let mut params = json!({"_meta": meta});
            match method {
                "tools/call" => {
                    params["name"] = json!(tool);
                    params["arguments"] = args;
                }
                m if m.starts_with("tasks/") => {
                    params["taskId"] = if with_task {
                        json!("tsk_x")
                    } else {
                        args.clone()
                    };
                    params["inputResponses"] = args;
                }
                _ => {}
            }
            (
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
                method.to_owned(),
            )
        })
}

fn headers(method: &str, name: Option<&str>, mutate: u8) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut put = |k: &str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(HeaderName::from_bytes(k.as_bytes()).unwrap(), v);
        }
    };
    put(
        "content-type",
        if mutate == 1 {
            "text/plain"
        } else {
            "application/json"
        },
    );
    put("accept", "application/json, text/event-stream");
    if mutate != 2 {
        put("mcp-protocol-version", "2026-07-28");
    }
    put(
        "mcp-method",
        if mutate == 3 { "tools/list" } else { method },
    );
    if let Some(n) = name {
        put("mcp-name", if mutate == 4 { "=?base64?!!?=" } else { n });
    }
    if mutate == 5 {
        put("host", "evil.example.com");
    }
    h
}

fn check_reply(body: &[u8], h: HeaderMap, method: Method) -> Result<(), TestCaseError> {
    // A request without the 2026-07-28 `_meta` version and without a 2026 version header is
    // served by the legacy (2025-11-25) lane, whose results carry no `resultType`.
    let legacy = !h.contains_key("mcp-protocol-version")
        && serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| {
                v.get("params")?
                    .get("_meta")?
                    .get("io.modelcontextprotocol/protocolVersion")
                    .cloned()
            })
            .is_none();
    let svc = service();
    let reply = runtime().block_on(async move {
        let r = svc
            .handle(HttpRequest {
                method,
                path: "/mcp".into(),
                headers: h,
                body: Bytes::copy_from_slice(body),
            })
            .await;
        let body = match r.body {
            ReplyBody::Empty => None,
            ReplyBody::Json(v) => Some(vec![v]),
            // JSON written directly (tasks/get); any other text kind is a metrics scrape,
            // which this service does not serve.
            ReplyBody::Text("application/json", text) => {
                Some(vec![serde_json::from_slice(&text).expect("a JSON answer")])
            }
            ReplyBody::Text(kind, _) => panic!("a {kind} answer from the MCP endpoint"),
            ReplyBody::Sse(mut rx) => {
                let mut all = Vec::new();
                while let Some(v) = rx.recv().await {
                    all.push(v);
                }
                Some(all)
            }
        };
        (r.status, body)
    });
    let (status, body) = reply;
    prop_assert!(
        [200, 202, 400, 403, 404, 405, 413, 415].contains(&status),
        "status {status}"
    );
    if let Some(msgs) = body {
        prop_assert!(!msgs.is_empty());
        let last = msgs.last().unwrap();
        prop_assert_eq!(&last["jsonrpc"], "2.0");
        let has_result = last.get("result").is_some();
        let has_error = last.get("error").is_some();
        prop_assert!(has_result ^ has_error, "{last}");
        if let Some(id) = last.get("id") {
            prop_assert!(id.is_string() || id.is_i64() || id.is_u64(), "bad id {id}");
        }
        if has_error {
            let code = last["error"]["code"].as_i64().unwrap_or(0);
            // The one internal error a client can cause: a synchronous tool outrunning the
            // (deliberately tiny) budget of this fuzz service.
            prop_assert!(
                code != -32603 || last["error"]["message"] == "The tool did not finish in time",
                "internal error for client input: {last}"
            );
            prop_assert!(
                [
                    -32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022
                ]
                .contains(&code),
                "{last}"
            );
            prop_assert!(last["error"]["message"].is_string());
        } else if !legacy {
            prop_assert!(last["result"]["resultType"].is_string(), "{last}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_bytes_never_break_the_entry_point(body in prop::collection::vec(any::<u8>(), 0..256), mutate in 0u8..6) {
        check_reply(&body, headers("tools/list", None, mutate), Method::POST)?;
    }

    #[test]
    fn random_json_never_breaks_the_entry_point(v in json_value(), mutate in 0u8..6) {
        check_reply(v.to_string().as_bytes(), headers("tools/list", None, mutate), Method::POST)?;
    }

    #[test]
    fn near_valid_requests_get_spec_shaped_answers((req, method) in near_request(), mutate in 0u8..8) {
        let name = req["params"]["name"].as_str().or(req["params"]["taskId"].as_str()).map(str::to_owned);
        check_reply(req.to_string().as_bytes(), headers(&method, name.as_deref(), mutate), Method::POST)?;
    }
}
