//! The one HTTP edge: an axum [`Router`] around [`McpService`]. The local server serves it
//! with hyper ([`crate::edge`]); on Lambda the same router is handed to `lambda_http`, so the
//! mapping between HTTP and the service exists once.
//!
//! Every request is first judged on its headers alone ([`McpService::admit`]: path, Host and
//! Origin, method, bearer token, content type, declared length); only a request that passes
//! has its body read. A client without a valid token is answered at once and never makes the
//! server buffer its body. On Lambda the body arrives whole from API Gateway, so there this
//! only saves the work; the body read timeout ([`router_for_edge`]) is for the local
//! server, where the body comes from the socket.

use std::convert::Infallible;
use std::future::Future as _;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};

use crate::handler::{HttpRequest, McpService, Reply, ReplyBody};
use crate::protocol::{McpError, failure};
use crate::tenant::Tenant;

/// The router: every path and method goes to the service, which decides. The body is read
/// without a deadline (Lambda: it is already whole).
pub fn router(service: Arc<McpService>) -> Router {
    router_for_edge(service, None, None)
}

/// [`router`] for the local listener ([`crate::edge`]):
/// - with `timeout`, a deadline for reading a request's whole body: a client that has not sent
///   it all by then gets `408` (a JSON-RPC error, `Connection: close`) and the connection is
///   closed, so a stalled upload cannot hold a connection and its buffer indefinitely;
/// - with `per_tenant`, at most that many admitted requests of one tenant in flight at once
///   (over it: `429` with `Retry-After`, the body unread).
pub fn router_for_edge(
    service: Arc<McpService>,
    timeout: Option<Duration>,
    per_tenant: Option<usize>,
) -> Router {
    Router::new()
        .fallback(serve)
        .with_state(edge_handler(service, timeout, per_tenant))
}

/// What [`router_for_edge`] routes every request to, without the router: the local listener
/// calls it straight from hyper ([`EdgeHandler::call`]), which saves the router's per-request
/// work on the hot path; Lambda goes through [`router`].
pub fn edge_handler(
    service: Arc<McpService>,
    timeout: Option<Duration>,
    per_tenant: Option<usize>,
) -> EdgeHandler {
    EdgeHandler(Arc::new(Edge {
        service,
        timeout,
        in_flight: per_tenant.map(|max| Arc::new(InFlight::new(max))),
    }))
}

/// The edge's request handling (see [`edge_handler`]).
#[derive(Clone)]
pub struct EdgeHandler(Arc<Edge>);

impl EdgeHandler {
    /// Serves one request.
    pub async fn call(&self, req: Request) -> Response {
        serve_request(&self.0, req).await
    }
}

/// Largest body read (and dropped) before a refusal is answered; see [`serve`].
const DRAIN_LIMIT: usize = 64 * 1024;

struct Edge {
    service: Arc<McpService>,
    timeout: Option<Duration>,
    in_flight: Option<Arc<InFlight>>,
}

/// Admitted requests in flight, by tenant.
struct InFlight {
    max: usize,
    /// Hashed with foldhash (seeded per process): twice per request, ~330 instructions with
    /// SipHash. A tenant is an authenticated identity, not a string a caller makes up freely.
    live: std::sync::Mutex<std::collections::HashMap<Tenant, usize, foldhash::fast::RandomState>>,
}

/// One admitted request's place; given back when dropped.
struct Place {
    gate: Arc<InFlight>,
    tenant: Tenant,
}

impl InFlight {
    fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            live: std::sync::Mutex::default(),
        }
    }

    fn enter(self: &Arc<Self>, tenant: &Tenant) -> Option<Place> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up first: a tenant seen before needs no key copied in (the common case).
        match live.get_mut(tenant) {
            Some(n) if *n >= self.max => return None,
            Some(n) => *n += 1,
            None => {
                live.insert(tenant.clone(), 1);
            }
        }
        Some(Place {
            gate: self.clone(),
            tenant: tenant.clone(),
        })
    }
}

/// Tenants kept at a count of zero (no insert and remove on every request of a returning
/// tenant); past this many entries a tenant's entry goes when its count does, so the map
/// stays bounded by the tenants in flight.
const IDLE_TENANTS_KEPT: usize = 1024;

impl Drop for Place {
    fn drop(&mut self) {
        let mut live = self.gate.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = live.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 && live.len() > IDLE_TENANTS_KEPT {
                live.remove(&self.tenant);
            }
        }
    }
}

async fn serve(State(edge): State<EdgeHandler>, req: Request) -> Response {
    edge.call(req).await
}

async fn serve_request(edge: &Edge, req: Request) -> Response {
    let Edge {
        service,
        timeout,
        in_flight,
    } = edge;
    let timeout = *timeout;
    let (parts, body) = req.into_parts();
    // Headers first. A refusal reads a small declared body (and drops it) so that an ordinary
    // client's connection stays usable; any other body is not read at all: hyper closes the
    // connection after the answer (locally with a linger, see `crate::edge`, so the client
    // still reads the answer).
    let admitted = match service
        .admit(&parts.method, parts.uri.path(), &parts.headers)
        .await
    {
        Ok(a) => a,
        Err(reply) => {
            let declared = parts
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<usize>().ok());
            if declared.is_some_and(|n| n <= DRAIN_LIMIT) {
                let drain = axum::body::to_bytes(body, DRAIN_LIMIT);
                match timeout {
                    Some(t) => drop(tokio::time::timeout(t, drain).await),
                    None => drop(drain.await),
                }
            }
            return into_response(reply);
        }
    };
    let _place = match in_flight
        .as_ref()
        .map(|g| (g.enter(admitted.tenant()), g.max))
    {
        None => None,
        Some((Some(place), _)) => Some(place),
        Some((None, max)) => {
            tracing::info!(max, "edge.tenant_requests_over_limit");
            let mut reply = error_reply(
                McpError::invalid_request(format!(
                    "Too many requests of this client in flight (at most {max} at once); retry in a second"
                ))
                .with_status(429),
            );
            reply.headers.push(("retry-after", "1".into()));
            reply.headers.push(("connection", "close".into()));
            return into_response(reply);
        }
    };
    let limit = service.config().max_body_bytes;
    let mut read = std::pin::pin!(axum::body::to_bytes(body, limit));
    // A body already received (the usual small request) is read without arming the timer.
    let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    let read = match (first, timeout) {
        (Poll::Ready(r), _) => r,
        (Poll::Pending, Some(t)) => match tokio::time::timeout(t, read).await {
            Ok(r) => r,
            Err(_) => {
                let secs = t.as_secs_f64();
                tracing::info!(timeout_secs = secs, "request body not received in time");
                let mut reply = error_reply(
                    McpError::invalid_request(format!("Request body not received within {secs} s"))
                        .with_status(408),
                );
                reply.headers.push(("connection", "close".into()));
                return into_response(reply);
            }
        },
        (Poll::Pending, None) => read.await,
    };
    let body = match read {
        Ok(b) => b,
        Err(_) => return into_response(error_reply(McpError::too_large(limit))),
    };
    let reply = service
        .handle_admitted(
            admitted,
            HttpRequest {
                method: parts.method,
                path: parts.uri.path().to_owned(),
                headers: parts.headers,
                body,
            },
        )
        .await;
    // A streamed answer keeps its place until the stream ends: a tenant's long calls and
    // subscriptions count against its cap for as long as they hold a connection.
    into_response_holding(reply, _place)
}

fn error_reply(e: McpError) -> Reply {
    Reply {
        status: e.status,
        headers: Vec::new(),
        body: ReplyBody::Json(failure(None, &e.error)),
    }
}

/// How long an SSE answer may stay silent before the transport writes a comment line
/// (`: keep-alive`): well inside API Gateway's 5-minute idle limit on a streamed answer and
/// the idle timeouts of common HTTP clients and proxies.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Turns a [`Reply`] into an HTTP response (JSON, empty, or an SSE stream).
pub fn into_response(reply: Reply) -> Response {
    into_response_holding(reply, ())
}

/// [`into_response`], keeping `guard` alive until the response body has been written (or the
/// client went away): for an SSE answer that is the end of the stream.
fn into_response_holding<G: Send + Sync + 'static>(mut reply: Reply, guard: G) -> Response {
    // Text without extra headers (a `tasks/get` answer) the direct way: no builder, no copy
    // of the content type (a constant).
    if let (ReplyBody::Text(content_type, text), true) = (&mut reply.body, reply.headers.is_empty())
        && let Ok(status) = http::StatusCode::from_u16(reply.status)
    {
        let mut r = Response::new(Body::from(std::mem::take(text)));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, http::HeaderValue::from_static(content_type));
        return r;
    }
    let mut builder = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        builder = builder.header(*k, v);
    }
    let built = match reply.body {
        ReplyBody::Empty => builder.body(Body::empty()),
        ReplyBody::Json(v) => builder
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&v).unwrap_or_default())),
        ReplyBody::Text(content_type, text) => builder
            .header(CONTENT_TYPE, content_type)
            .body(Body::from(text)),
        ReplyBody::Sse(rx) => builder
            .header(CONTENT_TYPE, "text/event-stream")
            .header(CACHE_CONTROL, "no-cache")
            .body(Body::from_stream(sse_events(rx, KEEP_ALIVE, guard))),
    };
    built.unwrap_or_else(|_| {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

/// The bytes of an SSE answer: each message as one `message` event, and a comment line after
/// every `keep_alive` without one, so that no gateway, proxy or client ends a quiet stream as
/// idle. Ends when the sender is done; `guard` lives as long as the stream.
fn sse_events<G: Send + Sync + 'static>(
    rx: tokio::sync::mpsc::Receiver<serde_json::Value>,
    keep_alive: Duration,
    guard: G,
) -> impl futures_util::Stream<Item = Result<Bytes, Infallible>> + Send {
    futures_util::stream::unfold((rx, guard), move |(mut rx, guard)| async move {
        let bytes = match tokio::time::timeout(keep_alive, rx.recv()).await {
            Ok(Some(msg)) => {
                let data = serde_json::to_string(&msg).unwrap_or_default();
                Bytes::from(format!("event: message\ndata: {data}\n\n"))
            }
            Ok(None) => return None,
            Err(_) => Bytes::from_static(b": keep-alive\n\n"),
        };
        Some((Ok(bytes), (rx, guard)))
    })
}
