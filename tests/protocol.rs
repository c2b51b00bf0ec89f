//! The 2026-07-28 wire, black-box: the real binary on a real port.

mod support;

use serde_json::{Value, json};
use support::{Client, Server, TASKS, data_dir};

fn start() -> (Server, tempfile::TempDir) {
    let dir = data_dir();
    (Server::start(dir.path(), &[]), dir)
}

fn error_of(a: &support::Answer) -> (u16, i64) {
    let v = a.json();
    (
        a.status,
        v["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error: {v}")),
    )
}

#[tokio::test]
async fn discover_advertises_tasks_and_cache_hints() {
    let (s, _d) = start();
    let r = s.client().call("server/discover", json!({})).await;
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(r["capabilities"]["extensions"][TASKS], json!({}));
    assert!(
        r["capabilities"].get("tasks").is_none(),
        "no legacy tasks capability"
    );
    assert!(r["ttlMs"].as_u64().is_some());
    assert_eq!(r["cacheScope"], "public");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-tasks"
    );
}

#[tokio::test]
async fn tools_list_is_stable_and_lists_the_builtin_tools() {
    let (s, _d) = start();
    let c = s.client();
    let a = c.call("tools/list", json!({})).await;
    let b = c.call("tools/list", json!({})).await;
    assert_eq!(a, b);
    let names: Vec<&str> = a["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "hash_chain",
            "wait",
            "confirm_action",
            "lint_json",
            "unreliable_upstream"
        ]
    );
    assert_eq!(a["cacheScope"], "public");
    let bad_cursor = c.send("tools/list", json!({"cursor": "nope"})).await;
    assert_eq!(error_of(&bad_cursor), (200, -32602));
}

#[tokio::test]
async fn only_post_is_served() {
    let (s, _d) = start();
    let http = reqwest::Client::new();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::DELETE,
        reqwest::Method::PUT,
    ] {
        let r = http.request(method.clone(), &s.url).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 405, "{method}");
        assert_eq!(r.headers()["allow"], "POST");
    }
}

#[tokio::test]
async fn notifications_are_accepted_without_a_body() {
    let (s, _d) = start();
    let c = s.client();
    let body = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let a = c
        .post_raw(body.to_string().as_bytes(), &Client::headers(&body))
        .await;
    assert_eq!(a.status, 202);
    assert!(a.text.is_empty());
}

#[tokio::test]
async fn malformed_bodies_get_json_rpc_errors_not_html() {
    let (s, _d) = start();
    let c = s.client();
    let h = Client::headers(&json!({"method": "tools/list"}));
    for (body, want) in [
        (&b"{nope"[..], (400, -32700)),
        (&b"[]"[..], (400, -32600)),
        (
            &br#"{"jsonrpc":"2.0","id":1,"result":{}}"#[..],
            (400, -32600),
        ),
        (
            &br#"{"jsonrpc":"2.0","id":{},"method":"tools/list"}"#[..],
            (400, -32600),
        ),
    ] {
        let a = c.post_raw(body, &h).await;
        assert!(a.content_type.starts_with("application/json"), "{a:?}");
        assert_eq!(error_of(&a), want, "{}", String::from_utf8_lossy(body));
    }
    let mut text = h.clone();
    text[0].1 = "text/plain".into();
    let a = c
        .post_raw(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, &text)
        .await;
    assert_eq!(a.status, 415);
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":"{}"}}}}"#,
        "a".repeat(5 << 20)
    );
    let a = c.post_raw(huge.as_bytes(), &h).await;
    assert_eq!(error_of(&a), (413, -32600));
}

#[tokio::test]
async fn envelope_and_header_violations_are_spec_errors() {
    let (s, _d) = start();
    let c = s.client();
    // Missing _meta.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}});
    let a = c
        .post_raw(body.to_string().as_bytes(), &Client::headers(&body))
        .await;
    assert_eq!(error_of(&a), (400, -32602));
    assert_eq!(a.json()["id"], 9);
    // Unsupported version (header and body agree).
    let mut body = c.body("tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let mut h = Client::headers(&body);
    h[2].1 = "2099-01-01".into();
    let a = c.post_raw(body.to_string().as_bytes(), &h).await;
    assert_eq!(error_of(&a), (400, -32022));
    assert_eq!(
        a.json()["error"]["data"]["supported"],
        json!(["2026-07-28"])
    );
    // Header and body disagree.
    let body = c.body("tools/list", json!({}));
    let mut h = Client::headers(&body);
    h[3].1 = "tools/call".into();
    assert_eq!(
        error_of(&c.post_raw(body.to_string().as_bytes(), &h).await),
        (400, -32020)
    );
    // Mcp-Name must match the tool name.
    let body = c.body(
        "tools/call",
        json!({"name": "lint_json", "arguments": {"text": "{}"}}),
    );
    let mut h = Client::headers(&body);
    h[4].1 = "hash_chain".into();
    assert_eq!(
        error_of(&c.post_raw(body.to_string().as_bytes(), &h).await),
        (400, -32020)
    );
}

#[tokio::test]
async fn removed_and_unknown_methods_are_404_with_the_id() {
    let (s, _d) = start();
    let c = s.client().with_tasks();
    for m in [
        "initialize",
        "ping",
        "tasks/result",
        "tasks/list",
        "logging/setLevel",
        "no/such",
    ] {
        let a = c.send(m, json!({})).await;
        assert_eq!(error_of(&a), (404, -32601), "{m}");
        assert!(a.json()["id"].is_number());
    }
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let (s, _d) = start();
    let c = s.client();
    let body = c.body("tools/list", json!({}));
    let mut h = Client::headers(&body);
    h.push(("host".into(), "evil.example.com".into()));
    assert_eq!(
        c.post_raw(body.to_string().as_bytes(), &h).await.status,
        403
    );
    let mut h = Client::headers(&body);
    h.push(("origin".into(), "http://evil.example.com".into()));
    assert_eq!(
        c.post_raw(body.to_string().as_bytes(), &h).await.status,
        403
    );
    let mut h = Client::headers(&body);
    h.push(("origin".into(), "http://localhost:3000".into()));
    assert_eq!(
        c.post_raw(body.to_string().as_bytes(), &h).await.status,
        200
    );
}

#[tokio::test]
async fn tool_errors_are_results_and_bad_calls_are_protocol_errors() {
    let (s, _d) = start();
    let c = s.client();
    let r = c.tool("lint_json", json!({"text": "{\"a\": }"})).await;
    assert_eq!(r["isError"], true);
    assert_eq!(r["resultType"], "complete");
    assert!(r["content"][0]["text"].as_str().unwrap().contains("line 1"));
    let a = c
        .send("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    let a = c
        .send(
            "tools/call",
            json!({"name": "lint_json", "arguments": {"text": 5}}),
        )
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    let a = c
        .send("tools/call", json!({"name": "lint_json", "arguments": [1]}))
        .await;
    assert_eq!(error_of(&a), (200, -32602));
}

#[tokio::test]
async fn optional_task_tools_answer_synchronously_without_the_extension() {
    let (s, _d) = start();
    let r = s
        .client()
        .tool("hash_chain", json!({"seed": "abc", "rounds": 1000}))
        .await;
    assert_eq!(r["resultType"], "complete");
    assert_eq!(
        r["structuredContent"]["digest"],
        support::expected_hash_chain("abc", 1000)
    );
    assert!(r.get("taskId").is_none());
}

#[tokio::test]
async fn task_only_tools_need_the_extension() {
    let (s, _d) = start();
    let a = s
        .client()
        .send(
            "tools/call",
            json!({"name": "unreliable_upstream", "arguments": {}}),
        )
        .await;
    assert_eq!(error_of(&a), (400, -32021));
    assert_eq!(
        a.json()["error"]["data"],
        json!({"requiredCapabilities": {"extensions": {TASKS: {}}}})
    );
}

#[tokio::test]
async fn progress_streams_as_sse_before_the_result() {
    let (s, _d) = start();
    let c = s.client();
    let mut body = c.body(
        "tools/call",
        json!({"name": "hash_chain", "arguments": {"seed": "p", "rounds": 500000}}),
    );
    body["params"]["_meta"]["progressToken"] = json!("tok-1");
    let a = c
        .post_raw(body.to_string().as_bytes(), &Client::headers(&body))
        .await;
    assert_eq!(a.status, 200);
    assert!(a.content_type.starts_with("text/event-stream"), "{a:?}");
    let msgs = a.sse_messages();
    let (last, notes) = msgs.split_last().unwrap();
    assert!(notes.len() >= 2, "{msgs:?}");
    let mut prev = -1.0;
    for n in notes {
        assert_eq!(n["method"], "notifications/progress");
        assert_eq!(n["params"]["progressToken"], "tok-1");
        let p = n["params"]["progress"].as_f64().unwrap();
        assert!(p > prev);
        prev = p;
    }
    assert_eq!(last["id"], body["id"]);
    assert_eq!(
        last["result"]["structuredContent"]["digest"],
        support::expected_hash_chain("p", 500000)
    );
}

#[tokio::test]
async fn mrtr_rounds_carry_a_sealed_state_for_synchronous_callers() {
    let (s, _d) = start();
    let c = s.client().with_caps(json!({"elicitation": {}}));
    let args = json!({"action": "Delete", "target": "report.pdf"});
    let r = c.tool("confirm_action", args.clone()).await;
    assert_eq!(r["resultType"], "input_required");
    let key = r["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    assert_eq!(r["inputRequests"][&key]["method"], "elicitation/create");
    let state = r["requestState"].as_str().unwrap().to_owned();
    let answer = json!({key.clone(): {"action": "accept", "content": {"confirm": true}}});
    let done = c
        .call("tools/call", json!({"name": "confirm_action", "arguments": args, "inputResponses": answer, "requestState": state}))
        .await;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["content"][0]["text"], "Confirmed: Delete report.pdf.");
    // The state is bound to the arguments: replaying it for another target fails.
    let other = json!({"action": "Delete", "target": "other.pdf"});
    let a = c
        .send("tools/call", json!({"name": "confirm_action", "arguments": other, "inputResponses": answer, "requestState": state}))
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    let a = c
        .send(
            "tools/call",
            json!({"name": "confirm_action", "arguments": args, "inputResponses": null}),
        )
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    // Answers with no requestState are offered to the job (SEP-2322 allows it; the conformance
    // suite requires it), which reads only the keys it asks for and checks each answer: a
    // malformed one is refused, never taken as a yes, and unknown keys change nothing.
    let bad = json!({key.clone(): {"action": "maybe"}, "never-asked": {"action": "accept"}});
    let a = c
        .send(
            "tools/call",
            json!({"name": "confirm_action", "arguments": args, "inputResponses": bad}),
        )
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    let declined = json!({key.clone(): {"action": "decline"}, "never-asked": {"action": "accept", "content": {"confirm": true}}});
    let r = c
        .call(
            "tools/call",
            json!({"name": "confirm_action", "arguments": args, "inputResponses": declined}),
        )
        .await;
    assert_eq!(
        r["content"][0]["text"], "Not confirmed: Delete report.pdf was not done.",
        "{r}"
    );
}

#[tokio::test]
async fn arguments_are_checked_against_the_tools_input_schema_at_the_edge() {
    let (s, _d) = start();
    let c = s.client().with_tasks();
    // Unknown properties (padding nobody reads) are refused before any task exists.
    let padded = json!({"seconds": 0, "pad": "x".repeat(200_000)});
    let a = c
        .send("tools/call", json!({"name": "wait", "arguments": padded}))
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    let msg = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("pad") && msg.len() < 1000,
        "names the property, not its value: {msg}"
    );
    // Wrong types, missing members and out-of-range values, each with where it is wrong.
    for (tool, args, at) in [
        ("wait", json!({"seconds": "ten"}), "/seconds"),
        ("wait", json!({}), "seconds"),
        ("hash_chain", json!({"seed": "s", "rounds": 0}), "/rounds"),
        ("lint_json", json!({"text": 5}), "/text"),
    ] {
        let a = c
            .send("tools/call", json!({"name": tool, "arguments": args}))
            .await;
        assert_eq!(error_of(&a), (200, -32602), "{tool} {args}");
        let msg = a.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(msg.contains(at), "{tool} {args}: {msg}");
    }
    // And good arguments still make a task.
    let r = c.tool("wait", json!({"seconds": 0})).await;
    assert_eq!(r["resultType"], "task", "{r}");
}

#[tokio::test]
async fn tasks_methods_need_the_extension_and_a_known_id() {
    let (s, _d) = start();
    let plain = s.client();
    let a = plain.send("tasks/get", json!({"taskId": "tsk_x"})).await;
    assert_eq!(error_of(&a), (400, -32021));
    let c = plain.with_tasks();
    for m in ["tasks/get", "tasks/cancel"] {
        let a = c.send(m, json!({"taskId": "tsk_unknown"})).await;
        assert_eq!(error_of(&a), (200, -32602), "{m}");
    }
    let a = c
        .send(
            "tasks/update",
            json!({"taskId": "tsk_unknown", "inputResponses": {}}),
        )
        .await;
    assert_eq!(error_of(&a), (200, -32602));
    let a = c.send("tasks/get", json!({"taskId": 42})).await;
    assert_eq!(error_of(&a), (200, -32602));
    let long = "x".repeat(500);
    let a = c.send("tasks/get", json!({"taskId": long})).await;
    let v: Value = a.json();
    assert_eq!(v["error"]["message"], "Task not found or expired");
}

#[tokio::test]
async fn a_call_that_fails_before_any_progress_keeps_its_http_status() {
    let (s, _d) = start();
    let c = s.client(); // no elicitation: confirm_action refuses with -32021
    let mut body = c.body(
        "tools/call",
        json!({"name": "confirm_action", "arguments": {"action": "Go", "target": "x"}}),
    );
    body["params"]["_meta"]["progressToken"] = json!(7);
    let a = c
        .post_raw(body.to_string().as_bytes(), &Client::headers(&body))
        .await;
    assert!(a.content_type.starts_with("application/json"), "{a:?}");
    assert_eq!(error_of(&a), (400, -32021));
    assert_eq!(
        a.json()["error"]["data"],
        json!({"requiredCapabilities": {"elicitation": {}}})
    );
}
