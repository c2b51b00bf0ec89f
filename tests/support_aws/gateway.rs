//! The API Gateway front: proxy events, routing, the buffered and streaming integrations.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::net::{now_ms, request_id};
use super::proxy::{Counts, HOP_BY_HOP};
use super::runtime::{Output, RuntimeApi};

/// API Gateway's integration timeout (REST APIs): 504 after this.
const GATEWAY_TIMEOUT: Duration = Duration::from_secs(29);
/// API Gateway's limits on a streamed response (REST API, regional endpoint): the whole
/// response, and the longest it may go without a byte (the prelude included).
const STREAM_LIMIT: Duration = Duration::from_secs(15 * 60);
const STREAM_IDLE: Duration = Duration::from_secs(5 * 60);
/// The functions' `Timeout` in template.yaml (the mcp function's behind a buffered
/// integration, and behind a streaming one).
const MCP_TIMEOUT: Duration = Duration::from_secs(30);
const MCP_STREAM_TIMEOUT: Duration = Duration::from_secs(900);
const TASKS_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) struct Front {
    pub(super) mcp: Arc<RuntimeApi>,
    pub(super) tasks: Arc<RuntimeApi>,
    pub(super) counts: Arc<Counts>,
    /// Whether the mcp API's integration streams ([`Options::streaming`]).
    pub(super) streaming: bool,
}

fn gateway_error(status: StatusCode, message: &str) -> Response {
    let mut r = (status, axum::Json(json!({ "message": message }))).into_response();
    r.headers_mut()
        .insert("x-amzn-errortype", HeaderValue::from_static("GatewayError"));
    r
}

/// `a=1&b=2&a=3` as API Gateway's two query maps (no percent-decoding: the tests send none).
fn query_maps(query: Option<&str>) -> (Value, Value) {
    let Some(q) = query.filter(|q| !q.is_empty()) else {
        return (Value::Null, Value::Null);
    };
    let mut single = serde_json::Map::new();
    let mut multi: serde_json::Map<String, Value> = serde_json::Map::new();
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        single.insert(k.into(), json!(v));
        multi
            .entry(k.to_owned())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!(v));
    }
    (Value::Object(single), Value::Object(multi))
}

/// One HTTP request → a REST API proxy event → the routed function → its proxy response →
/// HTTP, with API Gateway's own answers where it would give them.
pub(super) async fn gateway(State(f): State<Arc<Front>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 10 << 20).await else {
        return gateway_error(StatusCode::PAYLOAD_TOO_LARGE, "Request Too Long");
    };
    let mcp_method = parts
        .headers
        .get("mcp-method")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The routing rules: `Mcp-Method: tasks/*` → the tasks API, everything else → the mcp API.
    let to_tasks = mcp_method
        .as_deref()
        .is_some_and(|m| m.starts_with("tasks/"));
    let method = parts.method.as_str();
    let path = parts.uri.path();
    // The resources each API has (template.yaml): tasks: POST /mcp; mcp: ANY /mcp and
    // GET /.well-known/{proxy+}.
    let (resource, path_params) = match (to_tasks, method, path) {
        (true, "POST", "/mcp") | (false, _, "/mcp") => ("/mcp", Value::Null),
        (false, "GET", p) if p.len() > "/.well-known/".len() && p.starts_with("/.well-known/") => (
            "/.well-known/{proxy+}",
            json!({"proxy": &p["/.well-known/".len()..]}),
        ),
        _ => return gateway_error(StatusCode::FORBIDDEN, "Missing Authentication Token"),
    };
    let (api, timeout) = match (to_tasks, f.streaming) {
        (true, _) => (&f.tasks, TASKS_TIMEOUT),
        (false, false) => (&f.mcp, MCP_TIMEOUT),
        (false, true) => (&f.mcp, MCP_STREAM_TIMEOUT),
    };
    f.counts.add(
        api.name,
        "http",
        mcp_method.as_deref().unwrap_or("(no Mcp-Method)"),
    );
    let mut single = serde_json::Map::new();
    let mut multi: serde_json::Map<String, Value> = serde_json::Map::new();
    for (k, v) in &parts.headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        single.insert(k.as_str().into(), json!(v));
        multi
            .entry(k.as_str().to_owned())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!(v));
    }
    let (query, multi_query) = query_maps(parts.uri.query());
    let (body, is_base64) = match std::str::from_utf8(&body) {
        _ if body.is_empty() => (Value::Null, false),
        Ok(s) => (json!(s), false),
        Err(_) => (
            json!(base64::engine::general_purpose::STANDARD.encode(&body)),
            true,
        ),
    };
    let request_id = request_id();
    let event = json!({
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": path_params,
        "stageVariables": null,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": if to_tasks { "tasksapi01" } else { "mcpapi0001" },
            "domainName": parts.headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("localhost"),
            "httpMethod": method,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": parts.headers.get("user-agent").and_then(|h| h.to_str().ok())},
            "path": format!("/v1{path}"),
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "requestTimeEpoch": now_ms(),
            "resourceId": "res001",
            "resourcePath": resource,
            "stage": "v1"
        },
        "body": body,
        "isBase64Encoded": is_base64,
    });
    let event = serde_json::to_vec(&event).unwrap();
    if f.streaming && !to_tasks {
        return gateway_streamed(api, event, timeout, &request_id).await;
    }
    let invoked = tokio::time::timeout(GATEWAY_TIMEOUT, api.invoke(event, timeout)).await;
    let reply = match invoked {
        Err(_) => {
            return gateway_error(StatusCode::GATEWAY_TIMEOUT, "Endpoint request timed out");
        }
        Ok(Err(e)) => {
            eprintln!("front: {} invocation failed: {e}", api.name);
            return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
        }
        Ok(Ok(r)) => r,
    };
    let Ok(proxy) = serde_json::from_slice::<Value>(&reply) else {
        return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
    };
    let Some(status) = proxy["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
    else {
        // API Gateway's "Malformed Lambda proxy response".
        return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
    };
    let mut headers = HeaderMap::new();
    // API Gateway merges `multiValueHeaders` and `headers`.
    if let Some(m) = proxy["multiValueHeaders"].as_object() {
        for (k, vs) in m {
            for v in vs.as_array().into_iter().flatten() {
                if let (Ok(k), Some(Ok(v))) = (
                    HeaderName::try_from(k.as_str()),
                    v.as_str().map(HeaderValue::from_str),
                ) {
                    headers.append(k, v);
                }
            }
        }
    }
    if let Some(m) = proxy["headers"].as_object() {
        for (k, v) in m {
            if let (Ok(k), Some(Ok(v))) = (
                HeaderName::try_from(k.as_str()),
                v.as_str().map(HeaderValue::from_str),
            ) && !headers.contains_key(&k)
            {
                headers.insert(k, v);
            }
        }
    }
    finish_headers(&mut headers, &request_id);
    let body = match (&proxy["body"], proxy["isBase64Encoded"].as_bool()) {
        (Value::String(s), Some(true)) => {
            match base64::engine::general_purpose::STANDARD.decode(s) {
                Ok(b) => b,
                Err(_) => return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error"),
            }
        }
        (Value::String(s), _) => s.clone().into_bytes(),
        _ => Vec::new(),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// What API Gateway does to an integration's response headers, buffered or streamed: drops the
/// hop-by-hop ones, adds its request id, and labels an unlabelled body JSON.
fn finish_headers(headers: &mut HeaderMap, request_id: &str) {
    for h in HOP_BY_HOP {
        headers.remove(h);
    }
    headers.insert(
        "x-amzn-requestid",
        HeaderValue::from_str(request_id).unwrap(),
    );
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
}

/// The streaming integration (`ResponseTransferMode: STREAM`): not bound by the 29-second
/// integration timeout; the status and headers go out once the function's prelude is in, the
/// body chunk by chunk as the function writes it, cut off after [`STREAM_LIMIT`] in all or
/// [`STREAM_IDLE`] without a byte, or where the function's stream broke.
async fn gateway_streamed(
    api: &RuntimeApi,
    event: Vec<u8>,
    timeout: Duration,
    request_id: &str,
) -> Response {
    let started = tokio::time::Instant::now();
    let invoked =
        tokio::time::timeout(STREAM_IDLE, api.invoke_with_response_stream(event, timeout)).await;
    let streamed = match invoked {
        Err(_) => {
            return gateway_error(StatusCode::GATEWAY_TIMEOUT, "Endpoint request timed out");
        }
        Ok(Err(e)) => {
            eprintln!("front: {} invocation failed: {e}", api.name);
            return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
        }
        Ok(Ok(Output::Buffered(_))) => {
            eprintln!(
                "front: {} answered buffered behind a streaming integration",
                api.name
            );
            return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
        }
        Ok(Ok(Output::Streamed(s))) => s,
    };
    let mut headers = streamed.headers;
    for cookie in &streamed.cookies {
        if let Ok(v) = HeaderValue::from_str(cookie) {
            headers.append(header::SET_COOKIE, v);
        }
    }
    finish_headers(&mut headers, request_id);
    let (tx, rx) = mpsc::channel(16);
    let cut = Arc::new(AtomicBool::new(false));
    tokio::spawn(pump(
        api.name,
        streamed.body,
        tx,
        cut.clone(),
        started + STREAM_LIMIT,
    ));
    let mut response = Response::new(Body::new(Chunks { rx, cut }));
    *response.status_mut() = streamed.status;
    *response.headers_mut() = headers;
    response
}

/// Passes a streamed body on to the client within API Gateway's limits. The function's chunks
/// go out in order, and a broken stream (an error trailer, the invocation's deadline) after
/// them; at `end` (the whole response's limit), or after [`STREAM_IDLE`] without a chunk, the
/// response is cut at once. Either way the client sees the body end without its last chunk.
/// Returns when the body ended, was cut, or the client went away (dropping `from`).
async fn pump(
    who: &'static str,
    mut from: mpsc::Receiver<Result<Bytes, String>>,
    to: mpsc::Sender<Result<Bytes, String>>,
    cut: Arc<AtomicBool>,
    end: tokio::time::Instant,
) {
    let cut_off = |why: String| {
        eprintln!("front: the {who} response is cut off: {why}");
        cut.store(true, Ordering::SeqCst);
    };
    loop {
        let next = tokio::select! {
            _ = tokio::time::sleep_until(end) => {
                return cut_off(format!("API Gateway's {STREAM_LIMIT:?} limit"));
            }
            r = tokio::time::timeout(STREAM_IDLE, from.recv()) => match r {
                Ok(next) => next,
                Err(_) => return cut_off(format!("no byte for {STREAM_IDLE:?} (the idle limit)")),
            },
        };
        // The end of the body.
        let Some(item) = next else { return };
        let broken = item.is_err();
        if let Err(e) = &item {
            eprintln!("front: the {who} response is cut off: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep_until(end) => {
                return cut_off(format!("API Gateway's {STREAM_LIMIT:?} limit"));
            }
            sent = to.send(item) => if sent.is_err() || broken { return },
        }
    }
}

/// A response body fed by [`pump`]: each `Ok` a data frame, an `Err` (or the cut flag) the
/// connection's end without the body's last chunk.
struct Chunks {
    rx: mpsc::Receiver<Result<Bytes, String>>,
    cut: Arc<AtomicBool>,
}

impl HttpBody for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let cut_off = || Poll::Ready(Some(Err(std::io::Error::other("the stream was cut"))));
        if self.cut.load(Ordering::SeqCst) {
            return cut_off();
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) if self.cut.load(Ordering::SeqCst) => cut_off(),
            Poll::Ready(next) => {
                Poll::Ready(next.map(|item| item.map(Frame::data).map_err(std::io::Error::other)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
