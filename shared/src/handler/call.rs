//! `tools/call`: as a task or answered synchronously (one JSON body, or SSE with progress on a
//! host that streams), and the parts both lanes share (creating a task, answering with input
//! requests, running a tool inline).

use super::deadline::{Delivery, InlinePlan, token_expired, until};
use super::*;
use crate::protocol::method;
use crate::protocol::request::CallToolParams;

use crate::tenant::Tenant;

mod inline;
#[cfg(test)]
mod tests;

/// The tool, caller and arguments of one inline run (`S`: borrowed while the request is in
/// hand, owned once the run moves to its own task).
pub(super) struct InlineRun<S> {
    pub(super) tool: Arc<dyn Tool>,
    pub(super) tenant: Tenant,
    pub(super) name: S,
    pub(super) arguments: Value,
}

/// How a `tools/call` ends, before it becomes a response.
pub(super) enum CallOutcome {
    /// A result map (CallToolResult, InputRequiredResult or CreateTaskResult).
    Result(Map<String, Value>),
    /// A JSON-RPC error.
    Error(McpError),
}

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
        // Answers: those carried in the state, plus new ones for keys that are outstanding.
        // Without a state, every answer is offered to the job, which reads only the keys it
        // asks for and checks each answer's shape itself: SEP-2322 lets a client answer without
        // a `requestState` (a server need not issue one), and the conformance suite's
        // `input-required-result-ignore-extra-params` requires that such answers count.
        let mut inputs = Map::new();
        let mut checkpoint = Value::Null;
        if let Some(s) = &state {
            inputs.extend(s.answers.clone());
            checkpoint = s.checkpoint.clone();
        }
        if let Some(r) = &responses {
            for (k, v) in r {
                if state.as_ref().is_none_or(|s| s.outstanding.contains(k)) {
                    inputs.insert(k.clone(), v.clone());
                }
            }
        }
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
            let preflight = crate::jobs::runner::preflight_caught(tool.preflight(&ctx));
            let outcome = match preflight.await {
                Ok(Preflight::Proceed(cp)) => {
                    let caps = meta.client_capabilities.clone();
                    match self.create(tenant, name, &arguments, cp, caps).await {
                        Ok(task) => {
                            CallOutcome::Result(finish(task.to_create_result(), "task", &self.meta))
                        }
                        Err(CreateError::Quota(q)) => self.quota_refusal(&q),
                        Err(CreateError::Failed(e)) => return Err(e.into()),
                    }
                }
                Ok(Preflight::NeedInput(reqs)) => {
                    self.input_required(tenant, name, &arguments, &ctx, reqs.into_iter().collect())
                        .await
                }
                Err(e) => self.job_error(e),
            };
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

    /// Runs an inline call whose client asked for progress (both lanes). Nothing is committed
    /// to the client until the first event: a call that ends before reporting progress (an
    /// error above all, whose HTTP status the transport pins) comes back as `Err(outcome)`
    /// for the caller to answer as plain JSON; otherwise the answer is an SSE stream of
    /// `notifications/progress`, then the response. `finish` maps the run's outcome to the
    /// answer (the legacy lane reshapes some), on either path.
    pub(super) async fn stream_inline(
        self: &Arc<Self>,
        id: &Value,
        run: InlineRun<&str>,
        make_ctx: impl FnOnce(ProgressSink) -> JobContext,
        token: Option<Value>,
        plan: InlinePlan,
        finish: impl FnOnce(CallOutcome) -> CallOutcome + Send + 'static,
    ) -> Result<Reply, CallOutcome> {
        let (progress_tx, mut progress_rx) = mpsc::channel::<Value>(64);
        let (mut final_tx, mut final_rx) = oneshot::channel::<CallOutcome>();
        let mut progress_open = token.is_some();
        let sink = match token {
            Some(token) => ProgressSink::streaming(move |p| {
                let mut params = json!({"progressToken": token, "progress": p.progress});
                if let Some(t) = p.total {
                    params["total"] = json!(t);
                }
                if let Some(m) = &p.message {
                    params["message"] = json!(m);
                }
                // A client that reads slowly loses progress reports, never the response.
                let _ = progress_tx.try_send(
                    json!({"jsonrpc": "2.0", "method": method::PROGRESS, "params": params}),
                );
            }),
            // Nothing asked for progress: the stream carries keep-alives, then the answer.
            None => {
                drop(progress_tx);
                ProgressSink::latest_only()
            }
        };
        let ctx = make_ctx(sink);
        let run_tenant = run.tenant.clone();
        let run = InlineRun {
            tool: run.tool,
            tenant: run.tenant,
            name: run.name.to_owned(),
            arguments: run.arguments,
        };
        let this = self.clone();
        tokio::spawn(async move {
            let run = this.run_inline(&run, ctx, plan);
            // Closing the stream is how an HTTP client cancels: the receiving end is dropped
            // with it, and the work stops.
            let outcome = tokio::select! {
                o = run => Some(o),
                _ = final_tx.closed() => None,
            };
            if let Some(o) = outcome {
                let _ = final_tx.send(finish(o));
            }
        });
        // Nothing reaches the client before the first progress report or the commit time:
        // an answer ready before either is one JSON body, with its own HTTP status.
        let commit = tokio::time::sleep(plan.commit_after.unwrap_or_default());
        tokio::pin!(commit);
        let first = loop {
            tokio::select! {
                biased;
                f = &mut final_rx => break Err(f),
                p = progress_rx.recv(), if progress_open => match p {
                    Some(p) => break Ok(Some(p)),
                    // The run ended (dropping its sink); its outcome follows.
                    None => progress_open = false,
                },
                () = &mut commit, if plan.commit_after.is_some() => break Ok(None),
            }
        };
        let first = match first {
            Ok(first) => first,
            Err(Ok(outcome)) => return Err(outcome),
            Err(Err(_)) => return Err(CallOutcome::Error(McpError::internal())),
        };
        // A long answer holds a stream place of its tenant until it ends; without one the
        // run stops here (dropping `final_rx` cancels it).
        let slot = match plan.commit_after {
            Some(_) => match self.streams.take(&run_tenant, plan.budget).await {
                Ok(slot) => Some(slot),
                Err(e) => return Err(CallOutcome::Error(e)),
            },
            None => None,
        };
        let (out_tx, out_rx) = mpsc::channel::<Value>(64);
        let id = id.clone();
        tokio::spawn(async move {
            let outcome = forward(
                first,
                &mut progress_rx,
                progress_open,
                &mut final_rx,
                &out_tx,
            )
            .await;
            if let Some(slot) = slot {
                slot.release().await;
            }
            let msg = match outcome {
                Some(Ok(CallOutcome::Result(m))) => success(&id, m),
                Some(Ok(CallOutcome::Error(e))) => failure(Some(&id), &e.error),
                Some(Err(_)) => failure(Some(&id), &McpError::internal().error),
                None => return,
            };
            let _ = out_tx.send(msg).await;
        });
        Ok(Reply {
            status: 200,
            headers: vec![("x-accel-buffering", "no".into())],
            body: ReplyBody::Sse(out_rx),
        })
    }
}

/// Sends the progress of a committed streamed call (`first`, then each report) until its
/// outcome arrives; `None` when the client went away.
async fn forward(
    first: Option<Value>,
    progress_rx: &mut mpsc::Receiver<Value>,
    mut progress_open: bool,
    final_rx: &mut oneshot::Receiver<CallOutcome>,
    out_tx: &mpsc::Sender<Value>,
) -> Option<Result<CallOutcome, oneshot::error::RecvError>> {
    if let Some(first) = first {
        out_tx.send(first).await.ok()?;
    }
    let outcome = loop {
        tokio::select! {
            biased;
            p = progress_rx.recv(), if progress_open => match p {
                Some(p) => out_tx.send(p).await.ok()?,
                None => progress_open = false,
            },
            f = &mut *final_rx => break f,
            _ = out_tx.closed() => return None,
        }
    };
    while let Ok(p) = progress_rx.try_recv() {
        out_tx.send(p).await.ok()?;
    }
    Some(outcome)
}

impl McpService {
    /// Admits (tenant quotas) and creates a task, for both lanes.
    pub(super) async fn create(
        &self,
        tenant: &Tenant,
        name: &str,
        arguments: &Value,
        checkpoint: Value,
        client_capabilities: Value,
    ) -> Result<crate::task::TaskRecord, CreateError> {
        self.engine.admit(tenant).await?;
        self.engine
            .create_task(
                tenant,
                name,
                arguments.clone(),
                checkpoint,
                client_capabilities,
            )
            .await
    }

    /// A quota refusal: a tool error the model reads, naming the limit and when to retry.
    pub(super) fn quota_refusal(&self, q: &crate::quota::QuotaExceeded) -> CallOutcome {
        metrics::global().count(metric::QUOTA_REFUSALS, &[("limit", q.limit.as_str())], 1);
        CallOutcome::Result(finish(
            q.to_tool_result().as_object().cloned().unwrap_or_default(),
            "complete",
            &self.meta,
        ))
    }

    pub(super) fn respond(&self, id: &Value, outcome: CallOutcome) -> Reply {
        match outcome {
            CallOutcome::Result(m) => Reply::json(200, success(id, m)),
            CallOutcome::Error(e) => Reply::error(Some(id), &e),
        }
    }

    /// The state a client sent back, opened and checked against this call; a key that cannot
    /// be had yet is an internal error the client may retry ([`state_key_unavailable`]).
    pub(super) async fn open_state(
        &self,
        sealed: &str,
        tenant: &Tenant,
        tool: &str,
        arguments: &Value,
    ) -> Result<RoundState, McpError> {
        match self
            .sealer
            .open(sealed)
            .await
            .map_err(state_key_unavailable)?
        {
            Some(s)
                if s.tenant == tenant.as_str()
                    && s.tool == tool
                    && s.args == args_digest(arguments)
                    && now_ms().saturating_sub(s.issued_at_ms) <= MAX_STATE_AGE_MS =>
            {
                Ok(s)
            }
            _ => Err(McpError::invalid_params(
                "requestState is invalid, altered, expired, or belongs to another call",
            )),
        }
    }

    /// An `InputRequiredResult`, with everything the next round needs sealed in `requestState`
    /// (or, when the key cannot be had yet, [`state_key_unavailable`]).
    pub(super) async fn input_required(
        &self,
        tenant: &Tenant,
        tool: &str,
        arguments: &Value,
        ctx: &JobContext,
        requests: Map<String, Value>,
    ) -> CallOutcome {
        let state = RoundState {
            tenant: tenant.to_string(),
            tool: tool.to_owned(),
            args: args_digest(arguments),
            checkpoint: ctx.raw_checkpoint().clone(),
            answers: ctx.inputs().clone(),
            outstanding: requests.keys().cloned().collect(),
            issued_at_ms: now_ms(),
        };
        let mut m = Map::new();
        m.insert("resultType".into(), json!("input_required"));
        m.insert("inputRequests".into(), Value::Object(requests));
        let sealed = match self.sealer.seal(&state).await {
            Ok(sealed) => sealed,
            Err(e) => return CallOutcome::Error(state_key_unavailable(e)),
        };
        m.insert("requestState".into(), json!(sealed));
        CallOutcome::Result(finish(m, "input_required", &self.meta))
    }

    pub(super) fn job_error(&self, e: JobError) -> CallOutcome {
        match e {
            JobError::InvalidParams(m) => CallOutcome::Error(McpError::invalid_params(m)),
            JobError::Tool(m) => CallOutcome::Result(finish(
                crate::jobs::tool_error_result(m)
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                "complete",
                &self.meta,
            )),
            JobError::Protocol(err) => CallOutcome::Error(McpError::from_object(err)),
        }
    }
}

/// The answer to a request that needed the `requestState` key when it could not be had (its
/// source said why in the log): an internal error with a fixed message, naming no secret, that
/// the client may retry.
fn state_key_unavailable(e: KeyUnavailable) -> McpError {
    McpError::internal_with(&e.to_string())
}

/// Why an inline run stopped before its job ended.
pub(super) enum Ended {
    /// It used up its budget.
    Budget,
    /// The caller's token expired.
    TokenExpired,
}
