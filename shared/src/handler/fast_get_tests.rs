//! The short way gives the general path's answers: each body below is sent as it is (taken
//! by the fast path when it is an ordinary `tasks/get`) and padded past the fast path's size
//! limit with trailing spaces (which change nothing a JSON parser sees, and always go the
//! general way); status, headers and body must be the same.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde_json::json;

use super::{MAX_BODY, decode};
use crate::engine::{Engine, TaskSettings};
use crate::handler::{HttpRequest, McpService, Reply, ReplyBody, ServiceConfig};
use crate::protocol::state::StateSealer;
use crate::queue::LocalQueue;
use crate::store::TaskStore;
use crate::store::memory::MemoryStore;
use crate::task::TaskRecord;
use crate::tools::Registry;

const ID: &str = "tsk_01J0FASTPATH";

async fn service() -> Arc<McpService> {
    let store = Arc::new(MemoryStore::new());
    let config = ServiceConfig {
        server_version: "0".into(),
        ..ServiceConfig::default()
    };
    let mut task = TaskRecord::new(
        config.tenant.clone(),
        crate::task::TaskId::from_static(ID),
        "wait",
        Some(3_600_000),
        1000,
        json!({}),
    );
    store.create(&task, &json!({})).await.unwrap();
    task.complete(json!({"content": [{"type": "text", "text": "é \"quoted\""}]}))
        .unwrap();
    store.update(&task).await.unwrap();
    let (queue, rx) = LocalQueue::new();
    std::mem::forget(rx);
    let engine = Engine::new(store, Arc::new(queue), TaskSettings::default());
    Arc::new(McpService::new(
        config,
        engine,
        Arc::new(Registry::new(Vec::new())),
        StateSealer::random(),
    ))
}

fn request(headers: &[(&str, &str)], body: String) -> HttpRequest {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_bytes(v.as_bytes()).unwrap(),
        );
    }
    HttpRequest {
        method: Method::POST,
        path: "/mcp".into(),
        headers: map,
        body: Bytes::from(body),
    }
}

fn shown(r: &Reply) -> String {
    let body = match &r.body {
        ReplyBody::Empty => String::new(),
        ReplyBody::Json(v) => v.to_string(),
        ReplyBody::Text(ct, s) => format!("({ct}) {}", std::str::from_utf8(s).expect("UTF-8")),
        ReplyBody::Sse(_) => "(sse)".into(),
    };
    format!("{} {:?} {body}", r.status, r.headers)
}

fn body(meta: &str, rest: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{{"taskId":"{ID}","_meta":{meta}}}{rest}}}"#
    )
}

const META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

#[tokio::test]
async fn the_short_way_answers_as_the_general_path_does() {
    let service = service().await;
    let headers: &[(&str, &str)] = &[
        ("host", "127.0.0.1"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tasks/get"),
        ("mcp-name", ID),
    ];
    let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
    let bodies = vec![
        body(META, ""),
        body(META, r#","extra":{"a":[1,2.5e3,null,true,"x"]}"#),
        body(META, &format!(r#","deep":{deep}"#)),
        body(&META.replace(r#"{}}}"#, r#"{"deep":[[[[]]]]}}}"#), ""),
        body(META, "").replace(r#""id":1"#, r#""id":"req-é""#),
        body(META, "").replace(r#""id":1"#, r#""id":1.5"#),
        body(META, "").replace(r#""id":1"#, r#""id":null"#),
        body(META, "").replace(r#""id":1,"#, ""),
        body(META, "").replace(r#""jsonrpc":"2.0""#, r#""jsonrpc":"2.1""#),
        body(META, "").replace("tasks/get", "tasks\\/get"),
        body(META, "").replace(ID, "tsk_\\u0030unknown"),
        body(META, "").replace(ID, "tsk_unknown"),
        body(META, "").replace(&format!("\"{ID}\""), "5"),
        body(META, "").replace(r#""taskId""#, r#""taskId":"x","taskId""#),
        body(&META.replace("2026-07-28", "1999-01-01"), ""),
        body(
            &META.replace(r#""extensions":"#, r#""extensions":{},"extensions":"#),
            "",
        ),
        body(&META.replace(r#"tasks":{}"#, r#"tasks":true"#), ""),
        body(
            &META.replace(r#"{"extensions"#, r#"{"sampling":{},"extensions"#),
            "",
        ),
        body(
            &META.replace("2026-07-28\",", "2026-07-28\",\"progressToken\":7,"),
            "",
        ),
        body(
            &META.replace(
                "2026-07-28\",",
                "2026-07-28\",\"clientInfo\":{\"name\":\"c\"},",
            ),
            "",
        ),
        body("{}", ""),
        body("[]", ""),
        format!("[{}]", body(META, "")),
        body(META, "")
            .replace('}', "} ")
            .replace("{\"jsonrpc", "\n{\"jsonrpc"),
        body(META, "") + "x",
    ];
    let header_sets: Vec<Vec<(&str, &str)>> = vec![
        headers.to_vec(),
        headers
            .iter()
            .filter(|(k, _)| *k != "mcp-name")
            .copied()
            .collect(),
        headers
            .iter()
            .filter(|(k, _)| *k != "mcp-method")
            .copied()
            .collect(),
        with(headers, "mcp-name", " \ttsk_01J0FASTPATH "),
        with(headers, "mcp-name", "=?base64?dHNrXzAxSjBGQVNUUEFUSA==?="),
        with(headers, "mcp-method", "tasks/cancel"),
        with(headers, "mcp-protocol-version", "2025-11-25"),
    ];
    let mut taken = 0;
    for b in &bodies {
        for hs in &header_sets {
            taken += usize::from(decode(b.as_bytes()).is_some());
            let short = service.handle(request(hs, b.clone())).await;
            let padded = format!("{b}{}", " ".repeat(MAX_BODY));
            assert!(decode(padded.as_bytes()).is_none());
            let general = service.handle(request(hs, padded)).await;
            assert_eq!(shown(&short), shown(&general), "body {b} headers {hs:?}");
        }
    }
    // The ordinary bodies were taken the short way (the comparison means something).
    assert!(taken >= 10 * header_sets.len(), "only {taken} taken");
}

/// `headers` with `name`'s value replaced by `value`.
fn with<'a>(headers: &[(&'a str, &'a str)], name: &str, value: &'a str) -> Vec<(&'a str, &'a str)> {
    headers
        .iter()
        .map(|&(k, v)| if k == name { (k, value) } else { (k, v) })
        .collect()
}
