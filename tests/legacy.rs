//! The legacy lane, black-box: 2025-06-18 / 2025-11-25 clients (no `_meta` envelope) get a
//! stateless `initialize`, tools with `execution.taskSupport`, synchronous calls, and the
//! 2025-11-25 experimental tasks from the same store; 2026-07-28 requests are unaffected.
//!
//! Legacy answers are not 2026-07-28 messages, so they are not run through the 2026 schema
//! (support's `legacy_send` skips it); the 2025-11-25 shapes are asserted here by hand.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Answer, Server, data_dir};

const V25: Option<&str> = Some("2025-11-25");
const WITHIN: Duration = Duration::from_secs(20);

/// The `result` of a legacy answer that must succeed (HTTP 200, JSON, no error).
fn ok(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(a.content_type.starts_with("application/json"), "{a:?}");
    let v = a.json();
    assert_eq!(v["jsonrpc"], "2.0");
    assert!(v.get("error").is_none(), "{v}");
    v["result"].clone()
}

/// The `error` of a legacy answer: JSON-RPC errors travel with HTTP 200 in the legacy lane.
fn err(a: &Answer) -> Value {
    assert_eq!(a.status, 200, "{}", a.text);
    let v = a.json();
    assert!(v.get("result").is_none(), "{v}");
    v["error"].clone()
}

/// A 2025-11-25 `Task`: required members and types, none of the 2026 spellings.
fn check_task(t: &Value) {
    assert!(t["taskId"].is_string(), "{t}");
    assert!(
        matches!(
            t["status"].as_str(),
            Some("working" | "input_required" | "completed" | "failed" | "cancelled")
        ),
        "{t}"
    );
    assert!(t["createdAt"].is_string(), "{t}");
    assert!(t["lastUpdatedAt"].is_string(), "{t}");
    assert!(t["ttl"].is_u64() || t["ttl"].is_null(), "{t}");
    assert!(t["pollInterval"].is_u64(), "{t}");
    for absent in ["ttlMs", "pollIntervalMs", "resultType", "result", "error"] {
        assert!(t.get(absent).is_none(), "{absent} in {t}");
    }
}

async fn wait_terminal(c: &support::Client, id: &str) -> Value {
    let start = std::time::Instant::now();
    loop {
        let t = ok(&c.legacy_send(V25, "tasks/get", json!({"taskId": id})).await);
        check_task(&t);
        if matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return t;
        }
        assert!(start.elapsed() < WITHIN, "task {id} not terminal: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn initialize_is_stateless_and_negotiates_a_legacy_version() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client();
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2025-11-25"),
    ] {
        let a = c
            .legacy_send(
                None,
                "initialize",
                json!({"protocolVersion": asked, "capabilities": {},
                       "clientInfo": {"name": "legacy-test", "version": "1"}}),
            )
            .await;
        assert!(!a.text.contains("Mcp-Session-Id"));
        let r = ok(&a);
        assert_eq!(r["protocolVersion"], answered, "{r}");
        assert_eq!(r["serverInfo"]["name"], "mcp-tasks");
        assert!(r["capabilities"]["tools"].is_object(), "{r}");
        assert!(r.get("resultType").is_none(), "{r}");
        if answered == "2025-11-25" {
            assert_eq!(
                r["capabilities"]["tasks"],
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
            );
        } else {
            assert!(r["capabilities"].get("tasks").is_none(), "{r}");
        }
    }
    // No session id is minted: the next requests work without one.
    let raw = reqwest::Client::new()
        .post(&c.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 200);
    assert!(raw.headers().get("mcp-session-id").is_none());
    // notifications/initialized is accepted; ping answers {}.
    let n = reqwest::Client::new()
        .post(&c.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(n.status(), 202);
    assert_eq!(ok(&c.legacy_send(V25, "ping", json!({})).await), json!({}));
    // A legacy client without a standalone SSE stream: GET is 405, as 2025-11-25 allows.
    let g = reqwest::Client::new()
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(g.status(), 405);
    // Unknown methods are -32601 with HTTP 200 (a 404 means "session gone" to 2025 clients).
    assert_eq!(
        err(&c.legacy_send(V25, "prompts/list", json!({})).await)["code"],
        -32601
    );
}

#[tokio::test]
async fn the_2026_path_is_untouched_by_the_legacy_lane() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client();
    // initialize under 2026-07-28 (header and _meta) stays -32601 / 404 …
    let a = c
        .send("initialize", json!({"protocolVersion": "2025-11-25"}))
        .await;
    assert_eq!(a.status, 404);
    assert_eq!(a.json()["error"]["code"], -32601);
    // … and so does one with the 2026 header but no _meta.
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#;
    let h = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (
            "accept".to_owned(),
            "application/json, text/event-stream".to_owned(),
        ),
        ("mcp-protocol-version".to_owned(), "2026-07-28".to_owned()),
        ("mcp-method".to_owned(), "initialize".to_owned()),
    ];
    let a = c.post_raw(body, &h).await;
    assert_eq!(a.status, 404, "{}", a.text);
    // A 2026 request without _meta is still -32602/400, not a legacy answer.
    let body = br#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{}}"#;
    let mut h2 = h.clone();
    h2[3].1 = "tools/list".into();
    let a = c.post_raw(body, &h2).await;
    assert_eq!(a.status, 400, "{}", a.text);
    assert_eq!(a.json()["error"]["code"], -32602);
    // The 2026 tools/list has no execution member.
    let list = c.call("tools/list", json!({})).await;
    assert!(list["tools"][0].get("execution").is_none(), "{list}");
    // server/discover never goes to the legacy lane.
    let a = c.legacy_send(None, "server/discover", json!({})).await;
    assert_eq!(a.status, 400, "{}", a.text);
}

#[tokio::test]
async fn tools_list_and_synchronous_calls() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client();
    let list = ok(&c.legacy_send(V25, "tools/list", json!({})).await);
    let support = |name: &str| {
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {list}"))["execution"]["taskSupport"]
            .clone()
    };
    assert_eq!(support("hash_chain"), "optional");
    assert_eq!(support("wait"), "optional");
    assert_eq!(support("lint_json"), "forbidden");
    assert_eq!(support("unreliable_upstream"), "required");
    assert!(list.get("ttlMs").is_none() && list.get("resultType").is_none());

    // A synchronous call (no header at all, as some 2025-06-18 clients send the first calls).
    for version in [V25, Some("2025-06-18"), None] {
        let r = ok(&c
            .legacy_send(
                version,
                "tools/call",
                json!({"name": "hash_chain", "arguments": {"seed": "legacy", "rounds": 1000}}),
            )
            .await);
        assert_eq!(
            r["structuredContent"]["digest"],
            support::expected_hash_chain("legacy", 1000)
        );
        assert_eq!(r["isError"], false);
        assert!(r.get("resultType").is_none(), "{r}");
    }
    // A tool error is a result with isError.
    let r = ok(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "lint_json", "arguments": {"text": "{nope"}}),
        )
        .await);
    assert_eq!(r["isError"], true);
    // Bad arguments and unknown tools are -32602.
    let e = err(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "hash_chain", "arguments": {"seed": 1}}),
        )
        .await);
    assert_eq!(e["code"], -32602);
    let e = err(&c
        .legacy_send(V25, "tools/call", json!({"name": "nope"}))
        .await);
    assert_eq!(e["code"], -32602);
    // taskSupport violations are -32601 (2025-11-25).
    let e = err(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "unreliable_upstream", "arguments": {}}),
        )
        .await);
    assert_eq!(e["code"], -32601, "{e}");
    let e = err(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "lint_json", "arguments": {"text": "1"}, "task": {}}),
        )
        .await);
    assert_eq!(e["code"], -32601, "{e}");
    // A tool that must ask the user cannot in the legacy lane: refused, not hung.
    let e = err(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "confirm_action", "arguments": {"action": "Ship", "target": "v2"}}),
        )
        .await);
    assert_eq!(e["code"], -32021, "{e}");
}

#[tokio::test]
async fn inline_calls_stream_progress_to_clients_that_ask() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client();
    let call = |token: Value| json!({"name": "wait", "arguments": {"seconds": 2.5}, "_meta": {"progressToken": token}});
    // A progress token and SSE accepted: notifications/progress on the POST's stream (2025
    // shape: token, progress, total, message), then the response, in that order.
    for token in [json!("lp-1"), json!(7)] {
        let a = c.legacy_send(V25, "tools/call", call(token.clone())).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert!(a.content_type.starts_with("text/event-stream"), "{a:?}");
        let messages = a.sse_messages();
        let (last, progress) = messages.split_last().expect("an answer");
        assert!(progress.len() >= 2, "{messages:?}");
        let mut before = 0.0;
        for n in progress {
            assert_eq!(n["jsonrpc"], "2.0");
            assert_eq!(n["method"], "notifications/progress", "{n}");
            assert!(n.get("id").is_none(), "{n}");
            assert_eq!(n["params"]["progressToken"], token, "{n}");
            let p = n["params"]["progress"].as_f64().unwrap();
            assert!(p > before, "progress must increase: {messages:?}");
            before = p;
            assert_eq!(n["params"]["total"], 2500.0, "{n}");
            assert!(n["params"]["message"].is_string(), "{n}");
        }
        assert!(last.get("error").is_none(), "{last}");
        let r = &last["result"];
        assert_eq!(r["content"][0]["text"], "Waited 2.5 s.", "{last}");
        assert!(r.get("resultType").is_none(), "{r}");
    }
    // Without SSE in Accept, or without a token: one JSON answer.
    let a = c
        .legacy_send_accepting(V25, "tools/call", call(json!("t")), "application/json")
        .await;
    assert_eq!(ok(&a)["content"][0]["text"], "Waited 2.5 s.");
    let a = c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": 1.5}}),
        )
        .await;
    assert_eq!(ok(&a)["content"][0]["text"], "Waited 1.5 s.");
    // An error before any progress keeps the plain JSON answer (HTTP 200 in this lane).
    let e = err(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": -1}, "_meta": {"progressToken": 1}}),
        )
        .await);
    assert_eq!(e["code"], -32602, "{e}");
    // A token that is neither a string nor an integer is refused before anything runs.
    for bad in [json!({"a": 1}), json!(1.5), json!(true)] {
        let e = err(&c
            .legacy_send(
                V25,
                "tools/call",
                json!({"name": "wait", "arguments": {"seconds": 0}, "_meta": {"progressToken": bad}}),
            )
            .await);
        assert_eq!(e["code"], -32602, "{e}");
        assert!(
            e["message"].as_str().unwrap().contains("progressToken"),
            "{e}"
        );
    }
}

#[tokio::test]
async fn experimental_tasks_run_on_the_same_engine() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client();
    let created = ok(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "hash_chain", "arguments": {"seed": "t", "rounds": 20000},
                   "task": {"ttl": 60000}}),
        )
        .await);
    let task = &created["task"];
    check_task(task);
    assert_eq!(task["status"], "working");
    let id = task["taskId"].as_str().unwrap().to_owned();

    // tasks/result blocks until terminal and returns the CallToolResult.
    let r = ok(&c
        .legacy_send(V25, "tasks/result", json!({"taskId": id}))
        .await);
    assert_eq!(
        r["structuredContent"]["digest"],
        support::expected_hash_chain("t", 20000)
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert!(r.get("resultType").is_none());
    let t = wait_terminal(&c, &id).await;
    assert_eq!(t["status"], "completed");

    // The same task, seen from the 2026 lane (declaring the extension).
    let modern = s.client().with_tasks().get_task(&id).await;
    assert_eq!(modern["status"], "completed");
    assert_eq!(
        modern["result"]["structuredContent"],
        r["structuredContent"]
    );

    // A 2026 task is visible to legacy tasks/get too.
    let m = s
        .client()
        .with_tasks()
        .tool("wait", json!({"seconds": 30}))
        .await;
    let mid = m["taskId"].as_str().unwrap().to_owned();
    check_task(&ok(&c
        .legacy_send(V25, "tasks/get", json!({"taskId": mid}))
        .await));

    // tasks/list: the tenant's active tasks (the completed one is not listed).
    let listed = ok(&c.legacy_send(V25, "tasks/list", json!({})).await);
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            check_task(t);
            t["taskId"].as_str().unwrap()
        })
        .collect();
    assert!(ids.contains(&mid.as_str()), "{listed}");
    assert!(!ids.contains(&id.as_str()), "{listed}");

    // tasks/cancel returns the Task; a cancelled task has no result; cancelling again is -32602.
    let cancelled = ok(&c
        .legacy_send(V25, "tasks/cancel", json!({"taskId": mid}))
        .await);
    check_task(&cancelled);
    assert_eq!(cancelled["taskId"], mid);
    // 2025-11-25: the answer already says cancelled, though a run was holding the task.
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let t = wait_terminal(&c, &mid).await;
    assert_eq!(t["status"], "cancelled");
    let e = err(&c
        .legacy_send(V25, "tasks/result", json!({"taskId": mid}))
        .await);
    assert_eq!(e["code"], -32602);
    assert_eq!(e["data"]["status"], "cancelled");
    let e = err(&c
        .legacy_send(V25, "tasks/cancel", json!({"taskId": mid}))
        .await);
    assert_eq!(e["code"], -32602);

    // A failing task: tasks/result gives the task's JSON-RPC error.
    let f = ok(&c
        .legacy_send(
            V25,
            "tools/call",
            json!({"name": "unreliable_upstream", "arguments": {"after_ms": 50}, "task": {}}),
        )
        .await);
    let fid = f["task"]["taskId"].as_str().unwrap().to_owned();
    let e = err(&c
        .legacy_send(V25, "tasks/result", json!({"taskId": fid}))
        .await);
    assert!(e["code"].is_i64(), "{e}");
    assert_eq!(wait_terminal(&c, &fid).await["status"], "failed");

    // Unknown tasks are -32602, as in 2026.
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let e = err(&c.legacy_send(V25, m, json!({"taskId": "tsk_nope"})).await);
        assert_eq!(e["code"], -32602, "{m}: {e}");
    }
}

/// `tasks/list` pages: 100 tasks a page, oldest first, an opaque `nextCursor` until the
/// last page, a cursor that still works after its task finished, and `-32602` for a cursor
/// that is not ours (with no effect).
#[tokio::test]
async fn tasks_list_pages_with_an_opaque_cursor() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &[]);
    let c = s.client();
    let mut made = Vec::new();
    for _ in 0..105 {
        let created = ok(&c
            .legacy_send(
                V25,
                "tools/call",
                json!({"name": "wait", "arguments": {"seconds": 600}, "task": {}}),
            )
            .await);
        made.push(created["task"]["taskId"].as_str().unwrap().to_owned());
    }
    let ids = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                check_task(t);
                t["taskId"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    // Task-id order: creation order to the millisecond (ids start with a ULID).
    made.sort();
    let first = ok(&c.legacy_send(V25, "tasks/list", json!({})).await);
    assert_eq!(ids(&first), made[..100].to_vec());
    let cursor = first["nextCursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    assert!(!cursor.contains(&made[99]), "opaque: {cursor}");
    let second = ok(&c
        .legacy_send(V25, "tasks/list", json!({"cursor": cursor}))
        .await);
    assert_eq!(ids(&second), made[100..].to_vec());
    assert!(second.get("nextCursor").is_none(), "{second}");

    // The cursor's own task finishing does not break it.
    ok(&c
        .legacy_send(V25, "tasks/cancel", json!({"taskId": made[99]}))
        .await);
    wait_terminal(&c, &made[99]).await;
    let again = ok(&c
        .legacy_send(V25, "tasks/list", json!({"cursor": cursor}))
        .await);
    assert_eq!(ids(&again), made[100..].to_vec());
    assert!(again.get("nextCursor").is_none(), "{again}");
    let all = ok(&c.legacy_send(V25, "tasks/list", json!({})).await);
    assert!(!ids(&all).contains(&made[99]));

    // Cursors that are not ours: a bare task id, garbage, another kind of value.
    for bad in [
        json!(made[0]),
        json!("!!not base64!!"),
        json!(""),
        json!("x".repeat(5000)),
        json!(12),
    ] {
        let e = err(&c
            .legacy_send(V25, "tasks/list", json!({"cursor": bad}))
            .await);
        assert_eq!(e["code"], -32602, "{bad}: {e}");
    }
    for id in &made[..3] {
        assert_eq!(
            ok(&c.legacy_send(V25, "tasks/get", json!({"taskId": id})).await)["status"],
            "working"
        );
    }
}
