//! What both lanes' `tools/call` share: creating a task, answering with input requests, running
//! a tool inline (one JSON body, or SSE with progress on a host that streams). The 2026-07-28
//! method itself is `methods::tools_call`, the legacy one `legacy::tools_call`.

use super::deadline::{InlinePlan, token_expired, until};
use super::*;
use crate::protocol::method;

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
                if s.tenant == *tenant
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
            tenant: tenant.clone(),
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
