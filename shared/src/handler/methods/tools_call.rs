//! `tools/call` (2026-07-28): as a task or answered synchronously (one JSON body, or SSE with
//! progress on a host that streams); what both lanes share is in `handler::call`.

use std::sync::Arc;

use http::HeaderMap;
use serde_json::{Map, Value};

use crate::engine::CreateError;
use crate::handler::call::{CallOutcome, InlineRun};
use crate::handler::deadline::Delivery;
use crate::handler::{McpService, Reply, finish};
use crate::jobs::{JobContext, ProgressSink};
use crate::protocol::headers::{MCP_NAME, check_params, expect_header};
use crate::protocol::request::CallToolParams;
use crate::protocol::state::RoundState;
use crate::protocol::{McpError, RequestMeta, TASKS_EXTENSION};
use crate::tenant::Tenant;
use crate::tools::{Policy, Preflight, Tool};

impl McpService {
    pub(super) async fn call_tool(
        self: &Arc<Self>,
        id: &Value,
        p: CallToolParams,
        headers: &HeaderMap,
        tenant: &Tenant,
        meta: RequestMeta,
        delivery: Delivery,
    ) -> Result<Reply, McpError> {
        let name = p.name?;
        expect_header(headers, MCP_NAME, &name, true)?;
        let name = name.as_str();
        let Some(tool) = self.tools.get(name).cloned() else {
            return Err(McpError::invalid_params(format!(
                "Unknown tool: {}",
                crate::protocol::truncate(name, 64)
            )));
        };
        let arguments = p.arguments?;
        check_params(headers, self.tools.mirrored_params(name), &arguments)?;
        let arguments = Value::Object(arguments);
        self.tools
            .validate(name, &arguments)
            .map_err(McpError::invalid_params)?;
        let responses = p.input_responses?;
        let state = match p.request_state? {
            None => None,
            Some(s) => Some(self.open_state(&s, tenant, name, &arguments).await?),
        };
        let (inputs, checkpoint) = offered_answers(state.as_ref(), responses.as_ref());
        let policy = tool.def().policy;
        let as_task = match policy {
            Policy::Sync => false,
            Policy::Optional => meta.declares_tasks(),
            Policy::TaskOnly if meta.declares_tasks() => true,
            Policy::TaskOnly => {
                return Err(McpError::tasks_extension_required(format!(
                    "Tool {name} only runs as a task: declare the {TASKS_EXTENSION} extension"
                )));
            }
        };
        let plan = self.inline_plan(delivery, meta.progress_token.is_some());
        let make_ctx = |sink: ProgressSink| {
            JobContext::new(
                arguments.clone(),
                checkpoint.clone(),
                inputs.clone(),
                meta.client_capabilities.clone(),
                sink,
            )
            .for_tenant(tenant)
        };
        // The work the call claims, against the per-task quotas, before anything runs.
        if let Err(q) = crate::engine::check_claim(self.engine.quotas(), tool.claim(&arguments)) {
            return Ok(self.respond(id, self.quota_refusal(&q)));
        }
        if as_task {
            let ctx = make_ctx(ProgressSink::latest_only());
            let outcome = self
                .start_task(tenant, name, &tool, &arguments, &ctx, &meta)
                .await?;
            return Ok(self.respond(id, outcome));
        }
        let run = InlineRun {
            tool,
            tenant: tenant.clone(),
            name,
            arguments: arguments.clone(),
        };
        if !plan.stream {
            let ctx = make_ctx(ProgressSink::latest_only());
            let outcome = self.run_inline(&run, ctx, plan).await;
            return Ok(self.respond(id, outcome));
        }
        let token = meta.progress_token.clone();
        match self
            .stream_inline(id, run, make_ctx, token, plan, |o| o)
            .await
        {
            Ok(reply) => Ok(reply),
            Err(outcome) => Ok(self.respond(id, outcome)),
        }
    }

    /// A task-augmented call: the tool's preflight, then the task created (or the input its
    /// preflight asks for first, or its error).
    async fn start_task(
        &self,
        tenant: &Tenant,
        name: &str,
        tool: &Arc<dyn Tool>,
        arguments: &Value,
        ctx: &JobContext,
        meta: &RequestMeta,
    ) -> Result<CallOutcome, McpError> {
        let preflight = crate::jobs::runner::preflight_caught(tool.preflight(ctx));
        Ok(match preflight.await {
            Ok(Preflight::Proceed(cp)) => {
                let caps = meta.client_capabilities.clone();
                match self.create(tenant, name, arguments, cp, caps).await {
                    Ok(task) => {
                        CallOutcome::Result(finish(task.to_create_result(), "task", &self.meta))
                    }
                    Err(CreateError::Quota(q)) => self.quota_refusal(&q),
                    Err(CreateError::Failed(e)) => return Err(e.into()),
                }
            }
            Ok(Preflight::NeedInput(reqs)) => {
                self.input_required(tenant, name, arguments, ctx, reqs.into_iter().collect())
                    .await
            }
            Err(e) => self.job_error(e),
        })
    }
}

/// The answers a call offers its job, and the checkpoint it resumes from: those carried in the
/// state, plus new ones for keys that are outstanding. Without a state, every answer is
/// offered to the job, which reads only the keys it asks for and checks each answer's shape
/// itself: SEP-2322 lets a client answer without a `requestState` (a server need not issue
/// one), and the conformance suite's `input-required-result-ignore-extra-params` requires that
/// such answers count.
fn offered_answers(
    state: Option<&RoundState>,
    responses: Option<&Map<String, Value>>,
) -> (Map<String, Value>, Value) {
    let mut inputs = Map::new();
    let mut checkpoint = Value::Null;
    if let Some(s) = state {
        inputs.extend(s.answers.clone());
        checkpoint = s.checkpoint.clone();
    }
    if let Some(r) = responses {
        for (k, v) in r {
            if state.is_none_or(|s| s.outstanding.contains(k)) {
                inputs.insert(k.clone(), v.clone());
            }
        }
    }
    (inputs, checkpoint)
}
