//! The wire answers to bad and odd requests, both lanes, pinned in `wire.golden` (written by
//! the code before the request was decoded into types): status, headers and body of each.
//! `GOLDEN_WRITE=1` rewrites the file (then review its diff).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use super::*;
use crate::engine::{Engine, TaskSettings};
use crate::jobs::Step;
use crate::protocol::PROTOCOL_VERSION;
use crate::protocol::state::StateSealer;
use crate::queue::LocalQueue;
use crate::store::memory::MemoryStore;
use crate::tools::{Registry, ToolDef, doubles};

/// A tool defined by its schema and policy that answers "done" at once.
struct Fixed(ToolDef);

#[async_trait::async_trait]
impl Tool for Fixed {
    fn def(&self) -> &ToolDef {
        &self.0
    }

    async fn step(&self, _ctx: &JobContext) -> Result<Step, JobError> {
        Ok(Step::Done(crate::jobs::text_result("done")))
    }
}

fn service(tasks_only: bool) -> Arc<McpService> {
    let (queue, rx) = LocalQueue::new();
    std::mem::forget(rx);
    let engine = Engine::new(
        Arc::new(MemoryStore::new()),
        Arc::new(queue),
        TaskSettings::default(),
    );
    let config = ServiceConfig {
        server_version: "0".into(),
        stream_budget: None,
        tasks_only,
        ..ServiceConfig::default()
    };
    let region = Fixed(ToolDef {
        name: "region",
        description: "mirrors its region in Mcp-Param-Region",
        input_schema: json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}}),
        policy: Policy::Sync,
    });
    let only = Fixed(ToolDef {
        name: "only_task",
        description: "runs as a task only",
        input_schema: json!({"type": "object"}),
        policy: Policy::TaskOnly,
    });
    let tools = vec![doubles::wait(), Arc::new(region), Arc::new(only)];
    Arc::new(McpService::new(
        config,
        engine,
        Arc::new(Registry::new(tools).checking_arguments()),
        StateSealer::random(),
    ))
}

/// One request: its name in the golden file, extra headers and raw body.
struct Case {
    name: String,
    headers: Vec<(String, String)>,
    body: String,
}

fn raw(name: &str, headers: &[(&str, &str)], body: &str) -> Case {
    Case {
        name: name.into(),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        body: body.into(),
    }
}

fn meta(tasks: bool) -> Value {
    let caps = match tasks {
        true => json!({"extensions": {TASKS_EXTENSION: {}}}),
        false => json!({}),
    };
    json!({"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": caps})
}

/// A 2026-07-28 request with its headers right; `params._meta` added unless present.
fn v26(name: &str, method: &str, mcp_name: Option<&str>, mut params: Value, tasks: bool) -> Case {
    if let Some(p) = params.as_object_mut() {
        p.entry("_meta").or_insert_with(|| meta(tasks));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut headers = vec![
        ("mcp-protocol-version", PROTOCOL_VERSION),
        ("mcp-method", method),
    ];
    if let Some(n) = mcp_name {
        headers.push(("mcp-name", n));
    }
    raw(name, &headers, &body.to_string())
}

/// A 2025-11-25 request (no `_meta` envelope).
fn v25(name: &str, method: &str, params: Value) -> Case {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    raw(
        name,
        &[("mcp-protocol-version", "2025-11-25")],
        &body.to_string(),
    )
}

#[rustfmt::skip]
fn envelope_cases() -> Vec<Case> {
    let h = [("mcp-protocol-version", PROTOCOL_VERSION)];
    vec![
        raw("not json", &h, "{not json"),
        raw("batch", &h, "[]"),
        raw("a number", &h, "5"),
        raw("jsonrpc 1.0", &h, r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#),
        raw("no method", &h, r#"{"jsonrpc":"2.0","id":3}"#),
        raw("method 5", &h, r#"{"jsonrpc":"2.0","id":"a","method":5}"#),
        raw("a response", &h, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        raw("params array", &h, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}"#),
        raw("id null", &h, r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#),
        raw("id float", &h, r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#),
        raw("notification", &h, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
    ]
}

#[rustfmt::skip]
fn method_cases() -> Vec<Case> {
    let long = "m/".repeat(60);
    let mut c = vec![
        v26("unknown method", "foo/bar", None, json!({}), false),
        v26("initialize on 2026", "initialize", None, json!({}), false),
        v26("ping on 2026", "ping", None, json!({}), false),
        v26("tasks/list on 2026", "tasks/list", None, json!({}), true),
        v26("tasks/result on 2026", "tasks/result", None, json!({}), true),
        v26("long unknown method", &long, None, json!({}), false),
        raw(
            "unknown method before Mcp-Method",
            &[("mcp-method", "tools/list")],
            r#"{"jsonrpc":"2.0","id":1,"method":"nope","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        ),
    ];
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}}).to_string();
    let v = ("mcp-protocol-version", PROTOCOL_VERSION);
    c.extend([
        raw("Mcp-Method missing", &[v], &list),
        raw("Mcp-Method other", &[v, ("mcp-method", "tools/call")], &list),
        raw("Mcp-Method case", &[v, ("mcp-method", "Tools/List")], &list),
        raw("Mcp-Method base64", &[v, ("mcp-method", "=?base64?dG9vbHMvbGlzdA==?=")], &list),
        raw("Mcp-Method bad base64", &[v, ("mcp-method", "=?base64?!!?=")], &list),
        raw("Mcp-Method not ascii", &[v, ("mcp-method", "tools/l\u{e9}st")], &list),
        raw(
            "Mcp-Method before _meta",
            &[v],
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{}}}"#,
        ),
    ]);
    c
}

#[rustfmt::skip]
fn meta_cases() -> Vec<Case> {
    let pv = "io.modelcontextprotocol/protocolVersion";
    let caps = "io.modelcontextprotocol/clientCapabilities";
    let m = |name: &str, meta: Value| v26(name, "tools/list", None, json!({"_meta": meta}), false);
    let mut c = vec![
        v26("no _meta", "server/discover", None, json!({"_meta": null}), false),
        m("_meta 5", json!(5)),
        m("_meta no version", json!({caps: {}})),
        m("_meta version 5", json!({pv: 5, caps: {}})),
        m("_meta no caps", json!({pv: PROTOCOL_VERSION})),
        m("_meta caps true", json!({pv: PROTOCOL_VERSION, caps: true})),
        m("progressToken 1.5", json!({pv: PROTOCOL_VERSION, caps: {}, "progressToken": 1.5})),
        m("progressToken {}", json!({pv: PROTOCOL_VERSION, caps: {}, "progressToken": {}})),
        m("progressToken null", json!({pv: PROTOCOL_VERSION, caps: {}, "progressToken": null})),
        m("_meta too large", json!({pv: PROTOCOL_VERSION, caps: {"experimental": {"p": "x".repeat(17_000)}}})),
        m("unsupported version", json!({pv: "1999-01-01", caps: {}})),
        v26("bad name, no _meta", "tools/call", Some("wait"), json!({"name": 5, "_meta": null}), false),
        v26("bad task id, bad version", "tasks/get", None, json!({"taskId": 5, "_meta": {pv: "1999", caps: {}}}), true),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {pv: "1999-01-01", caps: {}}}}).to_string();
    c.extend([
        raw("no params", &[("mcp-method", "tools/list"), ("mcp-protocol-version", PROTOCOL_VERSION)], r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
        raw("_meta absent", &[("mcp-method", "tools/list"), ("mcp-protocol-version", PROTOCOL_VERSION)], r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"x"}}"#),
        raw("version header missing", &[("mcp-method", "tools/list")], &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}}).to_string()),
        raw("version header other", &[("mcp-method", "tools/list"), ("mcp-protocol-version", "2026-01-01")], &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}}).to_string()),
        raw("unsupported, header mirrors", &[("mcp-method", "tools/list"), ("mcp-protocol-version", "1999-01-01")], &body),
        raw("unsupported, header 2026", &[("mcp-method", "tools/list"), ("mcp-protocol-version", PROTOCOL_VERSION)], &body),
        raw("2026 _meta, 2025 header", &[("mcp-method", "tools/list"), ("mcp-protocol-version", "2025-11-25")], &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(false)}}).to_string()),
    ]);
    c
}

#[rustfmt::skip]
fn list_and_call_cases() -> Vec<Case> {
    let call = |name: &str, mcp_name: Option<&str>, params: Value| v26(name, "tools/call", mcp_name, params, false);
    let many: Map<String, Value> = (0..65).map(|i| (format!("k{i}"), json!({}))).collect();
    vec![
        v26("discover", "server/discover", None, json!({"cursor": 5}), false),
        v26("tools/list", "tools/list", None, json!({"cursor": null}), false),
        v26("tools/list cursor", "tools/list", None, json!({"cursor": "x"}), false),
        v26("tools/list cursor 5", "tools/list", None, json!({"cursor": 5}), false),
        call("call no name", Some("wait"), json!({})),
        call("call name 5", Some("5"), json!({"name": 5})),
        call("call name null", None, json!({"name": null})),
        call("call name array", None, json!({"name": ["wait"]})),
        call("call no Mcp-Name", None, json!({"name": "wait", "arguments": {"seconds": 0}})),
        call("call Mcp-Name other", Some("other"), json!({"name": "wait", "arguments": {"seconds": 0}})),
        call("call Mcp-Name base64", Some("=?base64?d2FpdA==?="), json!({"name": "wait", "arguments": {"seconds": 0}})),
        call("call Mcp-Name other, bad arguments", Some("other"), json!({"name": "wait", "arguments": 5})),
        call("call unknown tool", Some("nope"), json!({"name": "nope"})),
        call("call unknown tool, bad arguments", Some("nope"), json!({"name": "nope", "arguments": 5})),
        call("call long unknown tool", Some(&"t".repeat(100)), json!({"name": "t".repeat(100)})),
        call("call arguments string", Some("wait"), json!({"name": "wait", "arguments": "a"})),
        call("call arguments array", Some("wait"), json!({"name": "wait", "arguments": []})),
        call("call arguments null", Some("wait"), json!({"name": "wait", "arguments": null})),
        call("call arguments invalid", Some("wait"), json!({"name": "wait", "arguments": {"seconds": -1}})),
        call("call arguments extra", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0, "x": 1}})),
        call("call invalid arguments, bad inputResponses", Some("wait"), json!({"name": "wait", "arguments": {}, "inputResponses": []})),
        call("call inputResponses array", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "inputResponses": []})),
        call("call inputResponses null", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "inputResponses": null})),
        call("call inputResponses 65", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "inputResponses": many})),
        call("call inputResponses, bad requestState", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "inputResponses": 1, "requestState": 2})),
        call("call requestState 5", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "requestState": 5})),
        call("call requestState forged", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "requestState": "abc"})),
        call("call requestState null", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "requestState": null})),
        call("call region without header", Some("region"), json!({"name": "region", "arguments": {"region": "eu"}})),
        call("call region, bad inputResponses", Some("region"), json!({"name": "region", "arguments": {"region": "eu"}, "inputResponses": 5})),
        call("call region null", Some("region"), json!({"name": "region", "arguments": {"region": null}})),
        call("call task-only without the extension", Some("only_task"), json!({"name": "only_task"})),
        call("call task-only, bad requestState", Some("only_task"), json!({"name": "only_task", "requestState": 5})),
        call("call ok", Some("wait"), json!({"name": "wait", "arguments": {"seconds": 0}, "task": 5})),
    ]
}

#[rustfmt::skip]
fn region_header_cases() -> Vec<Case> {
    let body = |region: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "region", "arguments": {"region": region}, "_meta": meta(false)}}).to_string();
    let h = |v: &'static str| {
        vec![("mcp-protocol-version", PROTOCOL_VERSION), ("mcp-method", "tools/call"),
            ("mcp-name", "region"), ("mcp-param-region", v)]
    };
    vec![
        raw("region header ok", &h("eu"), &body(json!("eu"))),
        raw("region header other", &h("us"), &body(json!("eu"))),
        raw("region header, argument absent", &h("eu"), &body(Value::Null)),
        raw("region header, argument 5", &h("5"), &body(json!(5))),
    ]
}

#[rustfmt::skip]
fn task_cases() -> Vec<Case> {
    let t = |name: &str, method: &str, mcp_name: Option<&str>, params: Value, tasks: bool| {
        v26(name, method, mcp_name, params, tasks)
    };
    let many: Map<String, Value> = (0..65).map(|i| (format!("k{i}"), json!({}))).collect();
    let tasks_true = json!({"io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: true}}});
    let mut c = Vec::new();
    for m in ["tasks/get", "tasks/update", "tasks/cancel"] {
        c.extend([
            t(&format!("{m} without the extension"), m, None, json!({"taskId": 5}), false),
            t(&format!("{m} extension true"), m, None, json!({"taskId": "tsk_x", "_meta": tasks_true}), true),
            t(&format!("{m} no taskId"), m, None, json!({}), true),
            t(&format!("{m} taskId 5"), m, Some("5"), json!({"taskId": 5}), true),
            t(&format!("{m} taskId null"), m, None, json!({"taskId": null}), true),
            t(&format!("{m} Mcp-Name other"), m, Some("tsk_y"), json!({"taskId": "tsk_x", "inputResponses": 5}), true),
            t(&format!("{m} unknown"), m, Some("tsk_x"), json!({"taskId": "tsk_x", "inputResponses": {}}), true),
            t(&format!("{m} unknown, no Mcp-Name"), m, None, json!({"taskId": "tsk_x", "inputResponses": {"a": 1}}), true),
        ]);
    }
    c.extend([
        t("tasks/update no inputResponses", "tasks/update", None, json!({"taskId": "tsk_x"}), true),
        t("tasks/update inputResponses null", "tasks/update", None, json!({"taskId": "tsk_x", "inputResponses": null}), true),
        t("tasks/update inputResponses array", "tasks/update", None, json!({"taskId": "tsk_x", "inputResponses": []}), true),
        t("tasks/update inputResponses 65", "tasks/update", None, json!({"taskId": "tsk_x", "inputResponses": many}), true),
    ]);
    c
}

#[rustfmt::skip]
fn listen_cases() -> Vec<Case> {
    let l = |name: &str, params: Value, tasks: bool| v26(name, "subscriptions/listen", None, params, tasks);
    let ids: Vec<String> = (0..17).map(|i| format!("tsk_{i}")).collect();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"notifications": {}, "_meta": meta(true)}});
    vec![
        l("listen no notifications", json!({}), true),
        l("listen notifications array", json!({"notifications": []}), true),
        l("listen toolsListChanged string", json!({"notifications": {"toolsListChanged": "yes", "taskIds": 5}}), false),
        l("listen promptsListChanged null", json!({"notifications": {"promptsListChanged": null}}), true),
        l("listen resourceSubscriptions [1]", json!({"notifications": {"resourceSubscriptions": [1]}}), true),
        l("listen resourceSubscriptions 5", json!({"notifications": {"resourceSubscriptions": 5, "taskIds": 5}}), true),
        l("listen taskIds without the extension", json!({"notifications": {"taskIds": 5}}), false),
        l("listen taskIds 5", json!({"notifications": {"taskIds": 5}}), true),
        l("listen taskIds [1]", json!({"notifications": {"taskIds": ["tsk_1", 1]}}), true),
        l("listen 17 taskIds", json!({"notifications": {"taskIds": ids}}), true),
        l("listen 17 bad taskIds", json!({"notifications": {"taskIds": vec![1; 17]}}), true),
        l("listen unknown taskIds", json!({"notifications": {"taskIds": ["tsk_1", "tsk_1"], "toolsListChanged": true}}), true),
        l("listen empty", json!({"notifications": {}}), false),
        raw(
            "listen without SSE",
            &[("mcp-protocol-version", PROTOCOL_VERSION), ("mcp-method", "subscriptions/listen"), ("accept", "application/json")],
            &body.to_string(),
        ),
    ]
}

#[rustfmt::skip]
fn legacy_cases() -> Vec<Case> {
    let cursor = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode("tasks/list:v1:tsk_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    };
    let mut c = vec![
        v25("initialize 2025-06-18", "initialize", json!({"protocolVersion": "2025-06-18"})),
        v25("initialize version 5", "initialize", json!({"protocolVersion": 5})),
        v25("initialize no params", "initialize", Value::Null),
        v25("initialize 1999", "initialize", json!({"protocolVersion": "1999-01-01"})),
        v25("ping", "ping", json!({"x": 1})),
        v25("legacy tools/list", "tools/list", json!({})),
        v25("legacy tools/list cursor", "tools/list", json!({"cursor": "x"})),
        v25("legacy tools/list cursor null", "tools/list", json!({"cursor": null})),
        v25("legacy call no name", "tools/call", json!({})),
        v25("legacy call name 5", "tools/call", json!({"name": 5, "arguments": 5})),
        v25("legacy call unknown tool, bad arguments", "tools/call", json!({"name": "nope", "arguments": 5})),
        v25("legacy call arguments string", "tools/call", json!({"name": "wait", "arguments": "x"})),
        v25("legacy call arguments null", "tools/call", json!({"name": "wait", "arguments": null})),
        v25("legacy call invalid, bad task", "tools/call", json!({"name": "wait", "arguments": {"seconds": -1}, "task": 5})),
        v25("legacy call task 5", "tools/call", json!({"name": "wait", "arguments": {"seconds": 0}, "task": 5, "_meta": {"progressToken": 1.5}})),
        v25("legacy call progressToken 1.5", "tools/call", json!({"name": "wait", "arguments": {"seconds": 0}, "task": null, "_meta": {"progressToken": 1.5}})),
        v25("legacy call _meta 5", "tools/call", json!({"name": "wait", "arguments": {"seconds": 0}, "_meta": 5})),
        v25("legacy call sync tool as task", "tools/call", json!({"name": "region", "arguments": {}, "task": {}})),
        v25("legacy call task-only tool", "tools/call", json!({"name": "only_task"})),
        v25("legacy call ok", "tools/call", json!({"name": "wait", "arguments": {"seconds": 0}, "inputResponses": 5})),
        v25("legacy tasks/list", "tasks/list", json!({"cursor": null})),
        v25("legacy tasks/list cursor 5", "tasks/list", json!({"cursor": 5})),
        v25("legacy tasks/list cursor junk", "tasks/list", json!({"cursor": "junk"})),
        v25("legacy tasks/list cursor ours", "tasks/list", json!({"cursor": cursor})),
        v25("legacy tasks/update", "tasks/update", json!({"taskId": "tsk_x"})),
        v25("legacy subscriptions/listen", "subscriptions/listen", json!({})),
        v25("legacy unknown", "resources/list", json!({})),
        v25("legacy server/discover", "server/discover", json!({})),
    ];
    for m in ["tasks/get", "tasks/cancel", "tasks/result"] {
        c.extend([
            v25(&format!("legacy {m} no taskId"), m, json!({})),
            v25(&format!("legacy {m} taskId 5"), m, json!({"taskId": 5})),
            v25(&format!("legacy {m} unknown"), m, json!({"taskId": "tsk_x"})),
        ]);
    }
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":5}}"#;
    c.extend([
        raw("no version header, ping", &[], ping),
        raw("2025-06-18 header, ping", &[("mcp-protocol-version", "2025-06-18")], ping),
        raw("2024 header, ping", &[("mcp-protocol-version", "2024-11-05")], ping),
        raw("two version headers, ping", &[("mcp-protocol-version", "2025-06-18"), ("mcp-protocol-version", "2025-11-25")], ping),
    ]);
    c
}

#[rustfmt::skip]
fn tasks_only_cases() -> Vec<Case> {
    vec![
        v26("tasks-only tools/list", "tools/list", None, json!({}), false),
        v26("tasks-only foo", "foo", None, json!({}), false),
        v26("tasks-only tasks/get", "tasks/get", Some("tsk_x"), json!({"taskId": "tsk_x"}), true),
        v26("tasks-only tasks/nope", "tasks/nope", None, json!({}), true),
        v25("tasks-only legacy tools/list", "tools/list", json!({})),
        v25("tasks-only legacy tasks/list", "tasks/list", json!({})),
        v25("tasks-only legacy tasks/nope", "tasks/nope", json!({})),
    ]
}

fn http_request(c: &Case) -> HttpRequest {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if !c.headers.iter().any(|(k, _)| k == "accept") {
        headers.insert(
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
    for (k, v) in &c.headers {
        let name = HeaderName::from_bytes(k.as_bytes()).unwrap();
        headers.append(name, HeaderValue::from_bytes(v.as_bytes()).unwrap());
    }
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers,
        body: Bytes::from(c.body.clone()),
    }
}

/// The reply as text: status, headers, then the body (each SSE message on its own line).
async fn show(reply: Reply) -> String {
    let mut out = format!("< {}", reply.status);
    for (k, v) in &reply.headers {
        out += &format!(" {k}: {v};");
    }
    out.push('\n');
    match reply.body {
        ReplyBody::Empty => {}
        ReplyBody::Json(v) => out += &format!("< {v}\n"),
        ReplyBody::Text(ct, s) => {
            out += &format!("< ({ct}) {}\n", std::str::from_utf8(&s).expect("UTF-8"))
        }
        ReplyBody::Sse(mut rx) => {
            while let Some(m) = rx.recv().await {
                out += &format!("< sse {m}\n");
            }
        }
    }
    out
}

#[tokio::test]
async fn bad_and_odd_requests_get_the_pinned_answers() {
    let mut got = String::new();
    let all = service(false);
    let tasks_only = service(true);
    let corpus = [
        envelope_cases(),
        method_cases(),
        meta_cases(),
        list_and_call_cases(),
        region_header_cases(),
        task_cases(),
        listen_cases(),
        legacy_cases(),
    ];
    let runs = corpus
        .into_iter()
        .flatten()
        .map(|c| (all.clone(), c))
        .chain(
            tasks_only_cases()
                .into_iter()
                .map(|c| (tasks_only.clone(), c)),
        );
    for (service, case) in runs {
        got += &format!("### {}\n", case.name);
        for (k, v) in &case.headers {
            got += &format!("> {k}: {}\n", v.escape_default());
        }
        let body: String = case.body.chars().take(300).collect();
        got += &format!("> {body}\n");
        got += &show(service.handle(http_request(&case)).await).await;
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/handler/wire.golden");
    if std::env::var("GOLDEN_WRITE").is_ok_and(|v| v == "1") {
        std::fs::write(path, &got).unwrap();
    }
    let want = std::fs::read_to_string(path).expect("src/handler/wire.golden");
    assert!(
        got == want,
        "the wire answers changed: GOLDEN_WRITE=1 and diff wire.golden"
    );
}
