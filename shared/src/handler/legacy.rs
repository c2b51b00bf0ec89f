//! The legacy lane: clients that speak 2025-06-18 or 2025-11-25 instead of 2026-07-28.
//!
//! A request is legacy when it carries no 2026-07-28 `_meta` envelope (no
//! `_meta["io.modelcontextprotocol/protocolVersion"]`) **and** its `MCP-Protocol-Version`
//! header is absent or one of [`LEGACY_VERSIONS`]. Everything else — including every request
//! of the conformance suite, and `server/discover` always — takes the 2026-07-28 path, which
//! is unchanged (`initialize` there stays `-32601`/404).
//!
//! The lane is stateless like the rest of the server:
//! - `initialize` is answered without creating a session and without `Mcp-Session-Id` (the
//!   2025 transports make the session optional; the TypeScript SDK 1.x client only echoes
//!   an id the server sent). Any instance can serve any later request.
//! - `GET` on the endpoint stays `405` (handled before this module): 2025-11-25 lets a server
//!   without a standalone SSE stream answer 405, and this server never sends server→client
//!   requests or unsolicited notifications. The only notifications it sends are the
//!   `notifications/progress` of an inline call that asked for them (`_meta.progressToken`,
//!   SSE accepted), on that call's own POST stream, as the 2026 lane does.
//! - JSON-RPC errors are sent with HTTP 200: in 2025 transports a 404 means "session
//!   expired, initialize again" and the SDK clients turn any non-2xx into a transport error
//!   that hides the JSON-RPC code.
//! - The 2025-11-25 experimental tasks (`params.task`, `execution.taskSupport`, `tasks/get`,
//!   `tasks/result`, `tasks/cancel`, `tasks/list`) are served from the same engine, store and
//!   worker as SEP-2663 tasks: a task is a task whichever era created it.
//! - `tasks/result` blocks, as 2025-11-25 says, but only up to the synchronous budget
//!   (`ServiceConfig::sync_budget`, 25 s by default, under API Gateway's 29 s): a task that is
//!   still not terminal by then gets `-32602` with `data.status`, and the client polls
//!   `tasks/get` and asks again.
//! - Legacy calls carry no client capabilities the server could rely on (stateless: the
//!   `initialize` capabilities are not remembered), and the lane has no channel for
//!   server→client requests, so tools that need elicitation are refused as they are for a
//!   2026 client that does not declare it.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{McpService, Reply};
use crate::protocol::request::{Field, LegacyRequest, Params};
use crate::protocol::{McpError, failure, success};
use crate::task::{TaskId, TaskRecord};
use crate::tenant::Tenant;

// One file per method (`ping` has nothing to do: it is its dispatch arm).
mod initialize;
mod tasks_cancel;
mod tasks_get;
mod tasks_list;
mod tasks_result;
mod tools_call;
mod tools_list;

#[cfg(test)]
use tasks_result::{ANSWER_MARGIN, result_deadline};

/// The 2025-11-25 `Task`.
fn legacy_task(t: &TaskRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(t.task_id));
    m.insert("status".into(), json!(t.status.as_str()));
    if let Some(msg) = &t.status_message {
        m.insert("statusMessage".into(), json!(msg));
    }
    m.insert(
        "createdAt".into(),
        json!(crate::clock::iso8601(t.created_at_ms)),
    );
    m.insert(
        "lastUpdatedAt".into(),
        json!(crate::clock::iso8601(t.last_updated_at_ms)),
    );
    m.insert("ttl".into(), json!(t.ttl_ms));
    m.insert("pollInterval".into(), json!(t.poll_interval_ms));
    m
}

/// A 2026 result map made legacy: no `resultType` (the `_meta` is kept).
fn strip(mut m: Map<String, Value>) -> Map<String, Value> {
    m.remove("resultType");
    m
}

impl McpService {
    /// Serves one legacy request. Errors are JSON-RPC errors with HTTP 200.
    pub(super) async fn legacy(
        self: &Arc<Self>,
        id: &Value,
        method: &str,
        params: Params,
        tenant: &Tenant,
        delivery: super::Delivery,
    ) -> Reply {
        match self
            .legacy_dispatch(id, method, params, tenant, delivery)
            .await
        {
            Ok(Answer::Json(m)) => Reply::json(200, success(id, m)),
            Ok(Answer::Stream(reply)) => reply,
            Err(e) => {
                if e.error.code == crate::protocol::INTERNAL_ERROR {
                    tracing::warn!(method = %method, "legacy request failed with an internal error");
                }
                Reply::json(200, failure(Some(id), &e.error))
            }
        }
    }

    async fn legacy_dispatch(
        self: &Arc<Self>,
        id: &Value,
        method: &str,
        params: Params,
        tenant: &Tenant,
        delivery: super::Delivery,
    ) -> Result<Answer, McpError> {
        let request = LegacyRequest::decode(method, params)?;
        let method = request.method();
        if self.config.tasks_only && !method.is_tasks() {
            return Err(McpError::method_not_found(method.as_str()));
        }
        let result = match request {
            LegacyRequest::Initialize(p) => self.legacy_initialize(p),
            LegacyRequest::Ping => Map::new(),
            LegacyRequest::ToolsList(p) => self.legacy_tools_list(p)?,
            LegacyRequest::ToolsCall(p) => return self.legacy_call(id, p, tenant, delivery).await,
            LegacyRequest::TasksGet(p) => self.legacy_get(task_id(p.task_id)?, tenant).await?,
            LegacyRequest::TasksCancel(p) => {
                self.legacy_cancel(task_id(p.task_id)?, tenant).await?
            }
            LegacyRequest::TasksResult(p) => {
                self.legacy_result(task_id(p.task_id)?, tenant).await?
            }
            LegacyRequest::TasksList(p) => self.legacy_list(p.cursor?, tenant).await?,
        };
        Ok(Answer::Json(result))
    }
}

/// The task id of a `tasks/*` request, made a [`TaskId`] once: a string no task could have is
/// an unknown task.
fn task_id(id: Field<String>) -> Result<TaskId, McpError> {
    TaskId::parse(id?).ok_or_else(McpError::task_not_found)
}

/// What the lane answers a request with.
enum Answer {
    /// A result, sent as one JSON response.
    Json(Map<String, Value>),
    /// An inline call's SSE stream of progress, then its response.
    Stream(Reply),
}

fn with_message(mut e: McpError, message: String) -> McpError {
    e.error.message = message;
    e
}

fn with_data(mut e: McpError, data: Value) -> McpError {
    e.error.data = Some(data);
    e
}

#[cfg(test)]
mod tests;
