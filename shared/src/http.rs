//! The one HTTP edge: an axum [`Router`] around [`McpService::handle`]. The local server
//! serves it with hyper; on Lambda the same router is handed to `lambda_http`, so the mapping
//! between HTTP and the service exists once.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use crate::handler::{HttpRequest, McpService, Reply, ReplyBody};
use crate::protocol::{McpError, failure};

/// The router: every path and method goes to the service, which decides.
pub fn router(service: Arc<McpService>) -> Router {
    Router::new().fallback(serve).with_state(service)
}

async fn serve(State(service): State<Arc<McpService>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let limit = service.config().max_body_bytes;
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => return into_response(error_reply(McpError::too_large(limit))),
    };
    let reply = service
        .handle(HttpRequest {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            headers: parts.headers,
            body,
        })
        .await;
    into_response(reply)
}

fn error_reply(e: McpError) -> Reply {
    Reply {
        status: e.status,
        headers: Vec::new(),
        body: ReplyBody::Json(failure(None, &e.error)),
    }
}

/// Turns a [`Reply`] into an HTTP response (JSON, empty, or an SSE stream).
pub fn into_response(reply: Reply) -> Response {
    let mut builder = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        builder = builder.header(*k, v);
    }
    let built = match reply.body {
        ReplyBody::Empty => builder.body(Body::empty()),
        ReplyBody::Json(v) => builder
            .header(CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&v).unwrap_or_default())),
        ReplyBody::Sse(rx) => {
            let events = ReceiverStream::new(rx).map(|msg| {
                let data = serde_json::to_string(&msg).unwrap_or_default();
                Ok::<_, Infallible>(Bytes::from(format!("event: message\ndata: {data}\n\n")))
            });
            builder
                .header(CONTENT_TYPE, "text/event-stream")
                .header(CACHE_CONTROL, "no-cache")
                .body(Body::from_stream(events))
        }
    };
    built.unwrap_or_else(|_| {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}
