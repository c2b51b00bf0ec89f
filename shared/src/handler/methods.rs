//! The 2026-07-28 lane's methods: [`McpService::dispatch`] checks what every method shares
//! (the lane, the `Mcp-Method` and version headers, the protocol version) and hands the
//! decoded request to its method's file, one file per method. The legacy lane's methods are
//! in `handler::legacy`, likewise.
//!
//! Adding a method: its name in `protocol/method.rs`, its request variant and parameters in
//! `protocol/request.rs`, one arm below and its file here (docs/architecture.md, "Adding an
//! MCP method").

use std::sync::Arc;

use http::HeaderMap;
use serde_json::{Map, Value};

use super::deadline::Delivery;
use super::{McpService, Reply};
use crate::protocol::headers::{MCP_METHOD, MCP_NAME, MCP_PROTOCOL_VERSION, expect_header};
use crate::protocol::request::{Field, McpRequest, Params};
use crate::protocol::{McpError, RequestMeta, SUPPORTED_VERSIONS, TASKS_EXTENSION, success};
use crate::task::TaskId;
use crate::tenant::Tenant;

pub(super) mod discover;
pub(super) mod subscriptions_listen;
mod tasks_cancel;
mod tasks_get;
mod tasks_update;
mod tools_call;
pub(super) mod tools_list;

impl McpService {
    pub(super) async fn dispatch(
        self: &Arc<Self>,
        id: &Value,
        method: &str,
        params: Params,
        headers: &HeaderMap,
        tenant: &Tenant,
        delivery: Delivery,
    ) -> Result<Reply, McpError> {
        let (request, meta) = McpRequest::decode(method, params)?;
        let method = request.method();
        if self.config.tasks_only && !method.is_tasks() {
            return Err(McpError::method_not_found(method.as_str()));
        }
        // Transport headers first: Mcp-Method needs nothing from the body but its method.
        expect_header(headers, MCP_METHOD, method.as_str(), true)?;
        let meta = meta?;
        // The header must mirror the body before the version itself is judged: a mismatch is
        // -32020 even when the body names a version we do not speak.
        expect_header(headers, MCP_PROTOCOL_VERSION, &meta.protocol_version, true)?;
        if !SUPPORTED_VERSIONS.contains(&meta.protocol_version.as_str()) {
            return Err(McpError::unsupported_version(&meta.protocol_version));
        }
        match request {
            McpRequest::ServerDiscover => Ok(self.reply(id, self.discover.clone())),
            McpRequest::ToolsList(p) => self.tools_list(id, p),
            McpRequest::ToolsCall(p) => {
                self.call_tool(id, p, headers, tenant, meta, delivery).await
            }
            McpRequest::SubscriptionsListen(p) => self.listen(id, p, &meta, tenant, delivery).await,
            McpRequest::TasksGet(p) => {
                let task_id = task_id(method, &meta, p.task_id, headers)?;
                self.tasks_get(id, tenant, &task_id).await
            }
            McpRequest::TasksUpdate(p) => {
                let task_id = task_id(method, &meta, p.task_id, headers)?;
                self.tasks_update(id, tenant, &task_id, p.input_responses)
                    .await
            }
            McpRequest::TasksCancel(p) => {
                let task_id = task_id(method, &meta, p.task_id, headers)?;
                self.tasks_cancel(id, tenant, &task_id).await
            }
        }
    }

    /// A result, as one JSON response.
    fn reply(&self, id: &Value, result: Map<String, Value>) -> Reply {
        Reply::json(200, success(id, result))
    }
}

/// The task id of a `tasks/*` request: the method is gated by the tasks extension before its
/// params are read, and `Mcp-Name`, when sent, must mirror the id. Made a [`TaskId`] here,
/// once: a string no task could have is an unknown task.
fn task_id(
    method: crate::protocol::Method,
    meta: &RequestMeta,
    task_id: Field<String>,
    headers: &HeaderMap,
) -> Result<TaskId, McpError> {
    if !meta.declares_tasks() {
        return Err(McpError::tasks_extension_required(format!(
            "{method} requires the {TASKS_EXTENSION} extension to be declared on the request"
        )));
    }
    let task_id = task_id?;
    expect_header(headers, MCP_NAME, &task_id, false)?;
    TaskId::parse(task_id).ok_or_else(McpError::task_not_found)
}
