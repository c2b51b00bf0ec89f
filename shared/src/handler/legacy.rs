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

use super::{CallOutcome, McpService, Reply};
use crate::jobs::{JobContext, ProgressSink};
use crate::protocol::request::{
    InitializeParams, LEGACY_VERSIONS, LegacyCallParams, LegacyRequest, Params,
};
use crate::protocol::{McpError, Method, failure, success};
use crate::task::TaskRef;
use crate::task::{TaskRecord, TaskStatus};
use crate::tenant::Tenant;
use crate::tools::{Policy, Preflight};

/// `_meta` key that ties a `tasks/result` answer to its task (2025-11-25).
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Largest `tasks/list` page.
const LIST_PAGE: usize = 100;

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

/// `execution.taskSupport` for a policy.
fn task_support(policy: Policy) -> &'static str {
    match policy {
        Policy::Sync => "forbidden",
        Policy::Optional => "optional",
        Policy::TaskOnly => "required",
    }
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
            LegacyRequest::ToolsList(p) => {
                if p.has_cursor {
                    return Err(McpError::invalid_params("Unknown cursor"));
                }
                self.legacy_tools_list()
            }
            LegacyRequest::ToolsCall(p) => return self.legacy_call(id, p, tenant, delivery).await,
            LegacyRequest::TasksGet(p) => {
                legacy_task(&self.engine.get(TaskRef::new(tenant, &p.task_id?)).await?)
            }
            LegacyRequest::TasksCancel(p) => {
                let id = p.task_id?;
                // 2025-11-25: the task is `cancelled` before the answer (a running job stops
                // at its next check, within about half a second, and writes nothing more); a
                // task that had already ended — also in a race with this call — is -32602.
                legacy_task(
                    &self
                        .engine
                        .cancel_at_once(TaskRef::new(tenant, &id))
                        .await?,
                )
            }
            LegacyRequest::TasksResult(p) => self.legacy_result(p.task_id?, tenant).await?,
            LegacyRequest::TasksList(p) => self.legacy_list(p.cursor?, tenant).await?,
        };
        Ok(Answer::Json(result))
    }

    fn legacy_initialize(&self, p: InitializeParams) -> Map<String, Value> {
        let requested = p.protocol_version.as_deref().unwrap_or("");
        let version = LEGACY_VERSIONS
            .iter()
            .find(|v| **v == requested)
            .copied()
            .unwrap_or(LEGACY_VERSIONS[0]);
        let mut m = Map::new();
        m.insert("protocolVersion".into(), json!(version));
        let mut caps = json!({"tools": {"listChanged": false}});
        if version == "2025-11-25" {
            caps["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        m.insert("capabilities".into(), caps);
        m.insert(
            "serverInfo".into(),
            json!({"name": self.config.server_name, "version": self.config.server_version}),
        );
        m.insert(
            "instructions".into(),
            json!(
                "Long-running tools can run as tasks (params.task): poll tasks/get, read the \
                 result with tasks/result, stop with tasks/cancel. This server keeps no \
                 session: every request stands alone."
            ),
        );
        m
    }

    fn legacy_tools_list(&self) -> Map<String, Value> {
        let names = self.tools.names();
        let tools: Vec<Value> = self
            .tools
            .list()
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or(&[])
            .iter()
            .zip(names)
            .map(|(entry, name)| {
                let mut e = entry.clone();
                if let Some(t) = self.tools.get(name) {
                    e["execution"] = json!({"taskSupport": task_support(t.def().policy)});
                }
                e
            })
            .collect();
        let mut m = Map::new();
        m.insert("tools".into(), Value::Array(tools));
        m
    }

    async fn legacy_call(
        self: &Arc<Self>,
        id: &Value,
        p: LegacyCallParams,
        tenant: &Tenant,
        delivery: super::Delivery,
    ) -> Result<Answer, McpError> {
        let name = p.name?;
        let Some(tool) = self.tools.get(&name).cloned() else {
            return Err(McpError::invalid_params(format!(
                "Unknown tool: {}",
                crate::protocol::truncate(&name, 64)
            )));
        };
        let arguments = Value::Object(p.arguments?);
        self.tools
            .validate(&name, &arguments)
            .map_err(McpError::invalid_params)?;
        let as_task = p.task?;
        let progress_token = p.progress_token?;
        let policy = tool.def().policy;
        // A client that asked for progress and takes SSE gets its `notifications/progress`
        // on the POST's stream, and on a streaming host a long call streams, as on the 2026
        // lane.
        let plan = self.inline_plan(delivery, progress_token.is_some());
        let caps = json!({});
        let make_ctx = |sink: ProgressSink| {
            JobContext::new(
                arguments.clone(),
                Value::Null,
                Map::new(),
                caps.clone(),
                sink,
            )
            .for_tenant(tenant)
        };
        // The work the call claims, against the per-task quotas, before anything runs.
        if let Err(q) = crate::engine::check_claim(self.engine.quotas(), tool.claim(&arguments)) {
            return self.legacy_quota(&q);
        }
        match (policy, as_task) {
            // 2025-11-25: a task-augmented call to a tool that forbids tasks, or a plain call
            // to one that requires them, is -32601.
            (Policy::Sync, true) => Err(with_message(
                McpError::method_not_found(Method::ToolsCall.as_str()),
                format!("Tool {name} does not run as a task (taskSupport: forbidden)"),
            )),
            (Policy::TaskOnly, false) => Err(with_message(
                McpError::method_not_found(Method::ToolsCall.as_str()),
                format!(
                    "Tool {name} only runs as a task (taskSupport: required): call it with params.task"
                ),
            )),
            (_, true) => {
                let ctx = make_ctx(ProgressSink::latest_only());
                let preflight = crate::jobs::runner::preflight_caught(tool.preflight(&ctx));
                let checkpoint = match preflight.await {
                    Ok(Preflight::Proceed(cp)) => cp,
                    Ok(Preflight::NeedInput(_)) => return Err(needs_input(&name)),
                    Err(e) => return self.legacy_job_error(e).map(Answer::Json),
                };
                let task = match self
                    .create(tenant, &name, &arguments, checkpoint, caps)
                    .await
                {
                    Ok(task) => task,
                    Err(crate::engine::CreateError::Quota(q)) => return self.legacy_quota(&q),
                    Err(crate::engine::CreateError::Failed(e)) => return Err(e.into()),
                };
                let mut m = Map::new();
                m.insert("task".into(), Value::Object(legacy_task(&task)));
                Ok(Answer::Json(m))
            }
            (_, false) if plan.stream => {
                let run = super::InlineRun {
                    tool,
                    tenant: tenant.clone(),
                    name: name.as_str(),
                    arguments: arguments.clone(),
                };
                let finished = name.clone();
                let finish = move |o| inline_answer(&finished, policy, o);
                match self
                    .stream_inline(id, run, make_ctx, progress_token, plan, finish)
                    .await
                {
                    Ok(reply) => Ok(Answer::Stream(reply)),
                    Err(CallOutcome::Result(m)) => Ok(Answer::Json(m)),
                    Err(CallOutcome::Error(e)) => Err(e),
                }
            }
            (_, false) => {
                let ctx = make_ctx(ProgressSink::latest_only());
                let run = super::InlineRun {
                    tool,
                    tenant: tenant.clone(),
                    name: name.as_str(),
                    arguments: arguments.clone(),
                };
                let outcome = self.run_inline(&run, ctx, plan).await;
                match inline_answer(&name, policy, outcome) {
                    CallOutcome::Result(m) => Ok(Answer::Json(m)),
                    CallOutcome::Error(e) => Err(e),
                }
            }
        }
    }

    /// A quota refusal in this lane: the tool error result, without `resultType`.
    fn legacy_quota(&self, q: &crate::quota::QuotaExceeded) -> Result<Answer, McpError> {
        match self.quota_refusal(q) {
            CallOutcome::Result(m) => Ok(Answer::Json(strip(m))),
            CallOutcome::Error(e) => Err(e),
        }
    }

    fn legacy_job_error(&self, e: crate::jobs::JobError) -> Result<Map<String, Value>, McpError> {
        match self.job_error(e) {
            CallOutcome::Result(m) => Ok(strip(m)),
            CallOutcome::Error(e) => Err(e),
        }
    }

    /// `tasks/result`: the task's `CallToolResult` (or its JSON-RPC error) once terminal,
    /// waiting up to the synchronous budget for that — or less, when the invocation serving
    /// it ends sooner (see [`result_deadline`]). The store's own time counts: a read starts
    /// only when the slowest read so far would still end by the deadline, and a read after
    /// the first is cut at the deadline (the status it would have told is the last one read).
    async fn legacy_result(
        &self,
        id: String,
        tenant: &Tenant,
    ) -> Result<Map<String, Value>, McpError> {
        let started = tokio::time::Instant::now();
        let deadline = result_deadline(
            started,
            self.config.sync_budget,
            crate::clock::invocation_deadline(),
        );
        let mut gap = std::time::Duration::from_millis(50);
        let mut slowest = std::time::Duration::ZERO;
        let mut last: Option<TaskStatus> = None;
        let task = loop {
            let began = tokio::time::Instant::now();
            let read = self.engine.get(TaskRef::new(tenant, &id));
            let task = match last {
                None => read.await?,
                Some(_) => match tokio::time::timeout_at(deadline, read).await {
                    Ok(task) => task?,
                    Err(_) => break None,
                },
            };
            slowest = slowest.max(began.elapsed());
            if task.status.is_terminal() {
                break Some(task);
            }
            last = Some(task.status);
            let now = tokio::time::Instant::now();
            // The next read, after the pause, must end by the deadline at the pace seen.
            let pause = gap.min(deadline.saturating_duration_since(now));
            if now >= deadline || now + pause + slowest > deadline {
                break None;
            }
            tokio::time::sleep(pause).await;
            gap = (gap * 2).min(std::time::Duration::from_millis(500));
        };
        let Some(task) = task else {
            let status = last.map_or("working", TaskStatus::as_str);
            return Err(with_data(
                McpError::invalid_params(format!(
                    "Task is still {status} after waiting {} s: poll tasks/get and call \
                     tasks/result again once it is terminal",
                    started.elapsed().as_secs()
                )),
                json!({"taskId": id, "status": status}),
            ));
        };
        let related = json!({RELATED_TASK: {"taskId": task.task_id}});
        match task.status {
            TaskStatus::Completed => {
                let mut m = task
                    .result
                    .as_ref()
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_else(|| {
                        let mut m = Map::new();
                        m.insert("content".into(), json!([]));
                        m
                    });
                m.remove("resultType");
                match m.get_mut("_meta") {
                    Some(Value::Object(own)) => {
                        own.insert(RELATED_TASK.into(), related[RELATED_TASK].clone());
                    }
                    _ => {
                        m.insert("_meta".into(), related);
                    }
                }
                Ok(m)
            }
            TaskStatus::Failed => {
                Err(McpError::from_object(task.error.clone().unwrap_or_else(
                    || crate::protocol::ErrorObject::internal("Task failed"),
                )))
            }
            _ => Err(with_data(
                McpError::invalid_params("Task was cancelled: it has no result"),
                json!({"taskId": id, "status": "cancelled"}),
            )),
        }
    }

    /// `tasks/list`: the caller's active tasks, oldest first, in pages of [`LIST_PAGE`]. The
    /// cursor is opaque to the client (see [`list_cursor`]); one that is not ours is `-32602`.
    /// A cursor stays good when its task finishes meanwhile: the listing continues after it.
    async fn legacy_list(
        &self,
        cursor: Option<String>,
        tenant: &Tenant,
    ) -> Result<Map<String, Value>, McpError> {
        let after = match cursor {
            None => None,
            Some(c) => Some(
                cursor_position(&c).ok_or_else(|| McpError::invalid_params("Invalid cursor"))?,
            ),
        };
        let page = self
            .engine
            .list_active_of(tenant, after.as_deref(), LIST_PAGE)
            .await?;
        let mut m = Map::new();
        m.insert(
            "tasks".into(),
            page.tasks
                .iter()
                .map(|t| Value::Object(legacy_task(t)))
                .collect(),
        );
        if let Some(next) = &page.next {
            m.insert("nextCursor".into(), json!(list_cursor(next)));
        }
        Ok(m)
    }
}

/// What `tasks/result` keeps of an invocation's time for its answer: the last read of the
/// task (milliseconds on DynamoDB), the reply, the runtime's hand-back.
const ANSWER_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// When `tasks/result` stops waiting and answers `-32602` with `data.status`: the synchronous
/// budget after `started`, but never later than [`ANSWER_MARGIN`] before the invocation's own
/// deadline. The `tasks` function runs 10 s (its Lambda timeout) where the budget is 25 s:
/// waiting the budget there would be a bare 502 from API Gateway, and 10 s billed, instead of
/// an answer the client can act on.
fn result_deadline(
    started: tokio::time::Instant,
    budget: std::time::Duration,
    invocation: Option<tokio::time::Instant>,
) -> tokio::time::Instant {
    let by_budget = started + budget;
    match invocation {
        Some(d) => by_budget.min(d.checked_sub(ANSWER_MARGIN).unwrap_or(started)),
        None => by_budget,
    }
}

/// Marks a `tasks/list` cursor (and versions its format).
const CURSOR_TAG: &str = "tasks/list:v1:";

/// The `tasks/list` cursor that continues after task `after`: base64url of a tag and the task
/// id. Opaque to clients; it names only a position in the caller's own listing, so a forged
/// one can show nothing a fresh listing would not.
fn list_cursor(after: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}{after}"))
}

/// The task id a `tasks/list` cursor continues after, or `None` when it is not one of ours.
fn cursor_position(cursor: &str) -> Option<String> {
    use base64::Engine as _;
    if cursor.len() > 256 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let id = std::str::from_utf8(&bytes).ok()?.strip_prefix(CURSOR_TAG)?;
    crate::task::is_valid_task_id(id).then(|| id.to_owned())
}

/// What the lane answers a request with.
enum Answer {
    /// A result, sent as one JSON response.
    Json(Map<String, Value>),
    /// An inline call's SSE stream of progress, then its response.
    Stream(Reply),
}

/// A legacy inline call's answer from the run's outcome: no `resultType`, no input rounds
/// (the lane cannot ask the user), and a run that outgrew the synchronous budget points at
/// `params.task` instead of the 2026 tasks extension.
fn inline_answer(name: &str, policy: Policy, outcome: CallOutcome) -> CallOutcome {
    match outcome {
        CallOutcome::Result(m)
            if m.get("resultType").and_then(Value::as_str) == Some("input_required") =>
        {
            CallOutcome::Error(needs_input(name))
        }
        CallOutcome::Result(m) => CallOutcome::Result(strip(m)),
        CallOutcome::Error(mut e)
            if e.error.code == crate::protocol::MISSING_CAPABILITY
                && policy == Policy::Optional
                && e.error.data.as_ref().is_some_and(|d| {
                    crate::protocol::declares_tasks(&d["requiredCapabilities"])
                }) =>
        {
            e.error.data = None;
            CallOutcome::Error(with_message(
                e,
                format!(
                    "Tool {name} needs longer than the synchronous budget: call it as a task \
                     (params.task)"
                ),
            ))
        }
        CallOutcome::Error(e) => CallOutcome::Error(e),
    }
}

fn needs_input(name: &str) -> McpError {
    McpError::missing_capability(
        format!(
            "Tool {name} needs to ask the user, which this server can only do for 2026-07-28 \
             clients (server/discover)"
        ),
        json!({"elicitation": {}}),
    )
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
