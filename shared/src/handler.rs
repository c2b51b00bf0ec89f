//! The HTTP-agnostic MCP endpoint: one [`McpService::handle`] takes a request (method, path,
//! headers, body) and returns a [`Reply`]. The local server and the Lambda functions both
//! wrap this one function ([`crate::http`]), so the wire behaviour exists once.
//!
//! This is also the one place where errors become bytes: every [`McpError`] found below is
//! turned into a JSON-RPC error body with its HTTP status in [`McpService::handle`].
//!
//! Requests reach the lanes decoded into types ([`crate::protocol::request`]); each lane matches
//! on its request enum and raises a refused parameter where it first needs it.
//!
//! Where things are: the choice of lane here; admission (metadata, host check,
//! authentication) in `admit`; the 2026-07-28 lane's dispatch in `methods`, one file per
//! method below it (`methods/tools_call.rs`, `methods/tasks_get.rs`, ...); the 2025-11-25
//! lane's likewise in `legacy`; what both lanes' `tools/call` share in `call`; the per-tenant
//! cap on open streams in `streams`; budgets, deadlines and the caller's token expiry in
//! `deadline`; the `Host`/`Origin` parsing in `hosts`; the operator's metrics in `scrape`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::auth::{AuthFailure, Authenticator, challenge};
use crate::clock::now_ms;
use crate::engine::{CreateError, Engine};
use crate::jobs::{JobContext, JobError, ProgressSink};
use crate::metrics::{self, name as metric};
use crate::protocol::envelope::{self, Incoming};
use crate::protocol::request::is_legacy;
use crate::protocol::state::{KeyUnavailable, RoundState, StateSealer, args_digest};
use crate::protocol::{McpError, TASKS_EXTENSION, failure, result_meta, success};
use crate::tenant::Tenant;
use crate::tools::{Policy, Preflight, Registry, Tool};

mod admit;
mod call;
mod deadline;
mod fast_get;
mod hosts;
mod legacy;
mod methods;
mod scrape;
mod streams;
#[cfg(test)]
mod wire_tests;

use deadline::Delivery;

pub use admit::Admitted;
pub use scrape::{METRICS_PATH, metrics_reply};

pub use methods::subscriptions_listen::{LISTEN_POLL, MAX_SUBSCRIBED_TASKS};
pub use streams::StreamSlots;

/// How long a `requestState` stays valid (a human may take a while to answer).
pub const MAX_STATE_AGE_MS: u64 = 24 * 3600 * 1000;

pub use crate::protocol::request::MAX_INPUT_RESPONSES;

/// The engine's refusals on the wire: the one place they become JSON-RPC errors.
impl From<crate::engine::EngineError> for McpError {
    fn from(e: crate::engine::EngineError) -> Self {
        use crate::engine::EngineError;
        match e {
            EngineError::NotFound => McpError::task_not_found(),
            EngineError::Invalid(message) => McpError::invalid_params(message),
            EngineError::Internal => McpError::internal(),
        }
    }
}

/// How long a streamed answer (a synchronous tool call, a `subscriptions/listen`) may last by
/// default ([`crate::settings::STREAM_SECONDS`]).
pub const DEFAULT_STREAM_BUDGET: Duration =
    Duration::from_secs(crate::settings::STREAM_SECONDS.default);

/// Endpoint settings.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// `serverInfo.name`.
    pub server_name: String,
    /// `serverInfo.version`.
    pub server_version: String,
    /// Path of the MCP endpoint.
    pub endpoint_path: String,
    /// How long an inline (synchronous) tool call may run when its answer is buffered (one
    /// JSON body; on Lambda, API Gateway's 29-second integration limit).
    pub sync_budget: Duration,
    /// When the host streams answers as they are written (the local server; the mcp function
    /// behind a streaming REST integration): how long a streamed answer may last — a
    /// synchronous call answered as SSE, a `subscriptions/listen`. `None`: answers are
    /// buffered whole, so a call gets `sync_budget` and a subscription is acknowledged and
    /// closed at once.
    pub stream_budget: Option<Duration>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Host names (without port) accepted in `Host` and `Origin`; empty accepts any (behind a
    /// gateway that already checks them).
    pub allowed_hosts: Vec<String>,
    /// Tenant of every request until authentication lands.
    pub tenant: Tenant,
    /// `server/discover` and `tools/list` freshness hint.
    pub list_ttl_ms: u64,
    /// Serve `tasks/*` only (the tasks Lambda function, which gateway routing rules reach by
    /// `Mcp-Method`): every other method is `-32601`, as if it did not exist here.
    pub tasks_only: bool,
    /// How `subscriptions/listen` streams learn of task changes.
    pub change_feed: crate::store::watch::ChangeFeed,
    /// Most streams (long synchronous calls and subscriptions together) one tenant may have
    /// open at once.
    pub max_streams_per_tenant: usize,
    /// Most streams all tenants together may have open at once; 0: no such cap. On Lambda it
    /// keeps streams below the mcp function's reservation, so that they cannot hold every
    /// execution the short requests need (template.yaml `MaxStreams`).
    pub max_streams: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self {
            server_name: "mcp-tasks".into(),
            server_version: env!("CARGO_PKG_VERSION").into(),
            endpoint_path: "/mcp".into(),
            sync_budget: Duration::from_secs(25),
            stream_budget: Some(DEFAULT_STREAM_BUDGET),
            max_body_bytes: 4 * 1024 * 1024,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            tenant: "local".into(),
            list_ttl_ms: 300_000,
            tasks_only: false,
            change_feed: crate::store::watch::ChangeFeed::Poll(LISTEN_POLL),
            max_streams_per_tenant: 10,
            max_streams: 0,
        }
    }
}

/// An HTTP request, as either host delivers it.
#[derive(Debug)]
pub struct HttpRequest {
    /// HTTP method.
    pub method: Method,
    /// Request path (no query).
    pub path: String,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

/// What to send back.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// Body.
    pub body: ReplyBody,
}

/// A reply body.
#[derive(Debug)]
pub enum ReplyBody {
    /// No body.
    Empty,
    /// One JSON document (`application/json`).
    Json(Value),
    /// Server-sent events: each value is one JSON-RPC message; the last is the response.
    Sse(mpsc::Receiver<Value>),
    /// Text of the given content type, as its UTF-8 bytes: JSON written directly
    /// (`tasks/get`, never checked again: `serde_json` and ASCII literals write it) or a
    /// Prometheus scrape.
    Text(&'static str, Vec<u8>),
}

impl Reply {
    fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(body),
        }
    }

    fn empty(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Empty,
        }
    }

    fn error(id: Option<&Value>, e: &McpError) -> Self {
        Self::json(e.status, failure(id, &e.error))
    }
}

/// The MCP endpoint.
pub struct McpService {
    config: ServiceConfig,
    engine: Engine,
    tools: Arc<Registry>,
    sealer: StateSealer,
    meta: Value,
    /// `meta` as JSON, written once (`tasks/get` copies it into every answer).
    meta_json: Vec<u8>,
    discover: Map<String, Value>,
    /// The `tools/list` result, made at the first `tools/list` (not at a cold start).
    tools_list: OnceLock<Map<String, Value>>,
    auth: Option<Authenticator>,
    streams: StreamSlots,
}

/// Sets `resultType` (unless present) and adds the server's `_meta` keys to the result's
/// (a tool's own `_meta` keys are kept).
fn finish(mut m: Map<String, Value>, result_type: &str, meta: &Value) -> Map<String, Value> {
    m.entry("resultType")
        .or_insert_with(|| Value::String(result_type.to_owned()));
    match (m.get_mut("_meta"), meta) {
        (Some(Value::Object(own)), Value::Object(ours)) => {
            own.extend(ours.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        _ => {
            m.insert("_meta".into(), meta.clone());
        }
    }
    m
}

impl McpService {
    /// A service over an engine and a tool registry.
    pub fn new(
        config: ServiceConfig,
        engine: Engine,
        tools: Arc<Registry>,
        sealer: StateSealer,
    ) -> Self {
        let meta = result_meta(&config.server_name, &config.server_version);
        let discover = methods::discover::result(&config, &meta);
        Self {
            engine,
            tools,
            sealer,
            meta_json: serde_json::to_vec(&meta).unwrap_or_default(),
            meta,
            discover,
            tools_list: OnceLock::new(),
            auth: None,
            streams: StreamSlots::new(
                Arc::new(crate::quota::MemoryRunSlots::default()),
                config.max_streams_per_tenant,
            )
            .with_total(config.max_streams),
            config,
        }
    }

    /// Counts each tenant's open streams in `slots` (shared by every instance on Lambda)
    /// instead of this process's memory.
    pub fn with_stream_slots(mut self, slots: Arc<dyn crate::quota::RunSlots>) -> Self {
        self.streams = StreamSlots::new(slots, self.config.max_streams_per_tenant)
            .with_total(self.config.max_streams);
        self
    }

    /// Requires a valid bearer token on every request; the tenant becomes the token's tenant
    /// claim. Without this, every request is the configured local tenant.
    pub fn with_auth(mut self, auth: Authenticator) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Serves one HTTP request whose body is already in hand (on Lambda API Gateway delivers
    /// it whole): [`McpService::admit`], then [`McpService::handle_admitted`].
    pub async fn handle(self: &Arc<Self>, req: HttpRequest) -> Reply {
        match self.admit(&req.method, &req.path, &req.headers).await {
            Ok(admitted) => self.handle_admitted(admitted, req).await,
            Err(reply) => reply,
        }
    }

    /// Serves a request [`McpService::admit`] let through, now with its body.
    pub async fn handle_admitted(self: &Arc<Self>, admitted: Admitted, req: HttpRequest) -> Reply {
        let mut reply = self.answer(admitted, req).await;
        // After admission a 401 means one thing: the token expired while the answer was being
        // made ([`deadline::token_expired`]). The challenge tells the client why.
        if reply.status == 401
            && let Some(auth) = &self.auth
        {
            let expired = AuthFailure::Invalid("token expired");
            reply
                .headers
                .push(("www-authenticate", challenge(auth.settings(), &expired)));
        }
        reply
    }

    /// [`McpService::handle_admitted`]'s answer, as the lanes make it.
    async fn answer(self: &Arc<Self>, admitted: Admitted, req: HttpRequest) -> Reply {
        let tenant = admitted.tenant;
        if req.body.len() > self.config.max_body_bytes {
            return Reply::error(None, &McpError::too_large(self.config.max_body_bytes));
        }
        // The most repeated request, when it is an ordinary one, the short way (the same
        // answers: `fast_get`).
        if let Some(get) = fast_get::decode(&req.body) {
            return self.fast_tasks_get(get, &req.headers, &tenant).await;
        }
        let delivery = Delivery::of(&req.headers, admitted.expires_at);
        let request = match envelope::parse(&req.body) {
            Ok(Incoming::Request(r)) => r,
            Ok(Incoming::Notification { method }) => {
                tracing::debug!(method = %crate::protocol::truncate(&method, 64), "notification accepted");
                return Reply::empty(202);
            }
            Err((id, e)) => return Reply::error(id.as_ref(), &e),
        };
        // Clients that do not speak 2026-07-28 (no `_meta` envelope, a 2025 or no version
        // header) are served by the legacy lane; everything else is untouched.
        let envelope::Request { id, method, params } = request;
        if is_legacy(&method, &params, &req.headers) {
            return self.legacy(&id, &method, params, &tenant, delivery).await;
        }
        match self
            .dispatch(&id, &method, params, &req.headers, &tenant, delivery)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                if e.error.code == crate::protocol::INTERNAL_ERROR {
                    tracing::warn!(method = %method, "request failed with an internal error");
                }
                Reply::error(Some(&id), &e)
            }
        }
    }
}
