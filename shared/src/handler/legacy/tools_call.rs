//! `tools/call` (2025): as a 2025-11-25 task (`params.task`) or answered synchronously, with
//! what both lanes share from `handler::call`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Answer, legacy_task, strip, with_message};
use crate::handler::McpService;
use crate::handler::call::{CallOutcome, InlineRun};
use crate::handler::deadline::Delivery;
use crate::jobs::{JobContext, ProgressSink};
use crate::protocol::request::LegacyCallParams;
use crate::protocol::{McpError, Method};
use crate::tenant::Tenant;
use crate::tools::{Policy, Preflight};

impl McpService {
    pub(super) async fn legacy_call(
        self: &Arc<Self>,
        id: &Value,
        p: LegacyCallParams,
        tenant: &Tenant,
        delivery: Delivery,
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
                let run = InlineRun {
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
                let run = InlineRun {
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
