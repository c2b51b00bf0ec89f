//! A declared tool: a [`Tool`] whose steps are asked of a [`Target`] over the step protocol.
//! Everything durable stays with the worker (the checkpoint, the answers, progress, cancel,
//! parking); this file turns one step into one request and the answer into a [`Step`], and
//! retries what may be retried, parked between tries.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::entry::{DeclaredEntry, Limits, Wire};
use super::step_protocol::{
    Answer, MAX_ANSWER_BYTES, MAX_CHECKPOINT_BYTES, PROTOCOL, StepProgress, StepRequest, StepTask,
    parse_answer,
};
use super::target::{CallLimits, Target, TargetError};
use crate::jobs::{JobContext, JobError, Step};
use crate::protocol::method::InputMethod;
use crate::protocol::{ErrorObject, McpError};
use crate::tools::{RunPolicy, Tool, ToolDef};

/// The first pause before a retry; it doubles up to [`MAX_BACKOFF`], with jitter.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause before a retry.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A tool from the manifest.
pub struct DeclaredTool {
    def: ToolDef,
    title: Option<String>,
    target: Arc<dyn Target>,
    limits: Limits,
}

impl DeclaredTool {
    /// The tool of a checked entry over its target.
    pub fn new(entry: &DeclaredEntry, target: Arc<dyn Target>) -> Self {
        Self {
            def: entry.tool_def(),
            title: entry.title.clone(),
            target,
            limits: entry.limits.clone(),
        }
    }

    fn failed(&self, why: impl std::fmt::Display) -> JobError {
        tool_failed(self.def.name, why)
    }
}

/// The worker's copy of a declared tool's state, stored as the task's checkpoint (and on the
/// synchronous lane sealed in `requestState`): the target's checkpoint, the retries of the step
/// it is on, the keys it asked for (only answers to those reach it), and the highest progress
/// it reported (progress only goes up). The target only ever sees `checkpoint`.
#[derive(Debug, Default, PartialEq)]
struct State {
    checkpoint: Value,
    retries: u32,
    asked: Map<String, Value>,
    progress: Option<f64>,
}

impl State {
    fn read(raw: &Value) -> Self {
        Self {
            checkpoint: raw.get("checkpoint").cloned().unwrap_or(Value::Null),
            retries: raw
                .get("retries")
                .and_then(Value::as_u64)
                .map_or(0, |r| r.min(u64::from(u32::MAX)) as u32),
            asked: raw
                .get("asked")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            progress: raw.get("progress").and_then(Value::as_f64),
        }
    }

    /// The stored form; a job that never asked nor reported keeps the old `{"checkpoint"}`.
    fn stored(&self, checkpoint: Value, retries: u32) -> Value {
        let mut m = Map::new();
        m.insert("checkpoint".into(), checkpoint);
        if retries > 0 {
            m.insert("retries".into(), json!(retries));
        }
        if !self.asked.is_empty() {
            m.insert("asked".into(), Value::Object(self.asked.clone()));
        }
        if let Some(p) = self.progress {
            m.insert("progress".into(), json!(p));
        }
        Value::Object(m)
    }

    /// Moving on from a new checkpoint (the step's retries start again).
    fn of(&self, checkpoint: Value) -> Value {
        self.stored(checkpoint, 0)
    }

    fn retrying(&self) -> Value {
        self.stored(self.checkpoint.clone(), self.retries + 1)
    }

    /// The answers the target may see: those to keys it asked for, each of the shape its
    /// request's method answers with. Anything else a client sent (a first call's unasked
    /// `inputResponses`, a key of its own) never reaches the target.
    fn answers(&self, inputs: &Map<String, Value>) -> Result<Map<String, Value>, JobError> {
        let mut out = Map::new();
        for (key, method) in &self.asked {
            let Some(answer) = inputs.get(key) else {
                continue;
            };
            let Some(fields) = answer.as_object() else {
                return Err(JobError::InvalidParams(format!(
                    "inputResponses[{key:?}] must be an object"
                )));
            };
            if let Some(m) = method.as_str().and_then(InputMethod::from_name) {
                m.check_answer(key, fields)
                    .map_err(JobError::InvalidParams)?;
            }
            out.insert(key.clone(), answer.clone());
        }
        Ok(out)
    }
}

/// The pause before retry number `n` (from 0): `FIRST_BACKOFF · 2ⁿ`, at most [`MAX_BACKOFF`],
/// of which a random part (up to half) is taken off, so that a target's many callers do not
/// come back all at once.
fn backoff(n: u32) -> Duration {
    let full = FIRST_BACKOFF
        .saturating_mul(1u32 << n.min(16))
        .min(MAX_BACKOFF);
    let mut b = [0u8; 2];
    let jitter = match getrandom::fill(&mut b) {
        Ok(()) => f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX),
        Err(_) => 0.5,
    };
    full.mul_f64(1.0 - jitter / 2.0).max(FIRST_BACKOFF / 2)
}

#[async_trait]
impl Tool for DeclaredTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    fn run_policy(&self) -> RunPolicy {
        // Saved at the worker's pace like any job's (at most about once a second, a large
        // checkpoint less often, always before parking, asking or ending): a crash repeats the
        // steps since the last save (docs/step-protocol.md, "At least once").
        RunPolicy {
            max_task_wall: self.limits.max_task_wall,
        }
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let state = State::read(ctx.raw_checkpoint());
        let now = tokio::time::Instant::now();
        let mut timeout = self.limits.step_timeout;
        if let Some(stop) = ctx.deadline() {
            let left = stop.saturating_duration_since(now);
            if left < timeout && !ctx.first_step_of_run() {
                // This run cannot give the step its time: hand over to a fresh one (the first
                // step of a run always goes ahead, or a short run would hand over forever).
                return Ok(Step::Sleep(
                    ctx.raw_checkpoint().clone(),
                    crate::jobs::PARK_AFTER,
                ));
            }
            timeout = timeout.min(left.max(Duration::from_secs(1)));
        }
        let attempt = 1
            + state.retries
            + if ctx.first_step_of_run() {
                ctx.interruptions()
            } else {
                0
            };
        let body = match self.limits.protocol {
            Wire::Step => self.request(&state, ctx, attempt, timeout)?,
            // A plain target gets exactly the (checked) arguments, once per task.
            Wire::Plain => serde_json::to_vec(ctx.arguments())
                .map_err(|_| self.failed("its request could not be written"))?,
        };
        let limits = CallLimits {
            timeout,
            max_answer_bytes: self.limits.max_answer_bytes,
            trace: ctx.task_id().map(super::target::TraceId::of_task),
        };
        let called = tokio::time::timeout(timeout, self.target.call(body, limits))
            .await
            .unwrap_or(Err(TargetError::Timeout));
        let bytes = match called {
            Ok(bytes) => bytes,
            Err(e) if e.retried() && state.retries < self.limits.max_retries => {
                tracing::warn!(tool = self.def.name, task_id = ctx.task_id().unwrap_or("-"), attempt, error = %e, "declared tool: step failed, retrying");
                // A step that timed out may still be running in its target (an Invoke is not
                // stopped by giving up on it): the next try waits at least as long as the
                // step had, so tries overlap as little as the timeout allows.
                let mut pause = backoff(state.retries);
                if e == TargetError::Timeout {
                    pause = pause.max(timeout);
                }
                return Ok(Step::Sleep(state.retrying(), pause));
            }
            Err(e) if e.retried() && state.retries > 0 => {
                tracing::warn!(tool = self.def.name, task_id = ctx.task_id().unwrap_or("-"), attempt, error = %e, "declared tool: step failed, no tries left");
                return Err(self.failed(format!("{e} ({} tries)", state.retries + 1)));
            }
            Err(e) => {
                tracing::warn!(tool = self.def.name, task_id = ctx.task_id().unwrap_or("-"), error = %e, "declared tool: step failed");
                return Err(self.failed(e));
            }
        };
        if bytes.len() > self.limits.max_answer_bytes {
            return Err(self.failed(TargetError::TooLarge(self.limits.max_answer_bytes)));
        }
        if self.limits.protocol == Wire::Plain {
            return plain_result(self.def.name, &bytes).map(Step::Done);
        }
        let answer = parse_answer(&bytes).map_err(|bad| {
            tracing::warn!(tool = self.def.name, task_id = ctx.task_id().unwrap_or("-"), why = %bad, "declared tool: a bad answer");
            self.failed("its target answered with something that is not an mcp-tasks-step/1 answer")
        })?;
        if bytes.len() > MAX_CHECKPOINT_BYTES
            && let Some(cp) = answer.checkpoint()
            && serde_json::to_vec(cp).map_or(usize::MAX, |b| b.len()) > MAX_CHECKPOINT_BYTES
        {
            return Err(self.failed(format!(
                "its target's checkpoint is larger than {MAX_CHECKPOINT_BYTES} bytes"
            )));
        }
        self.apply(answer, state, ctx)
    }
}

impl DeclaredTool {
    /// What the worker does with an answer.
    fn apply(&self, answer: Answer, mut state: State, ctx: &JobContext) -> Result<Step, JobError> {
        match answer {
            Answer::Done(result) => Ok(Step::Done(result)),
            Answer::Continue(cp, progress) => {
                if let Some(p) = progress {
                    self.report(p, &mut state, ctx);
                }
                Ok(Step::Continue(state.of(cp)))
            }
            Answer::Sleep(cp, d) => Ok(Step::Sleep(state.of(cp), d)),
            Answer::Input(cp, requests) => {
                for request in requests.values() {
                    let method = request["method"].as_str().unwrap_or("");
                    let capability = InputMethod::from_name(method)
                        .unwrap_or(InputMethod::Elicitation)
                        .capability();
                    if !ctx.client_declares(capability) {
                        return Err(JobError::Protocol(
                            McpError::missing_capability(
                                format!(
                                    "Tool {} asked for {method}, which needs the {capability} \
                                     capability this client did not declare",
                                    self.def.name
                                ),
                                json!({ capability: {} }),
                            )
                            .error,
                        ));
                    }
                }
                for (key, request) in &requests {
                    state.asked.insert(key.clone(), request["method"].clone());
                }
                Ok(Step::NeedInputAt(state.of(cp), requests))
            }
            Answer::Error(message) => Err(JobError::Tool(message)),
            Answer::Failed(message) => Err(self.failed(message)),
        }
    }
}

/// A declared tool's failure as the task shows it: `Tool NAME failed: WHY` (`-32603`), `why`
/// never holding what the target sent.
pub(super) fn tool_failed(tool: &str, why: impl std::fmt::Display) -> JobError {
    JobError::Protocol(ErrorObject::internal(&format!("Tool {tool} failed: {why}")))
}

/// A plain answer as the tool's result (docs/tool-manifest.md, "Plain targets"), for `plain`
/// targets and a workflow's output alike: an object is `structuredContent` and its JSON as the
/// text; a string is the text; any other JSON value is its JSON as the text. Not JSON, or a
/// result over [`MAX_ANSWER_BYTES`], fails the task without quoting the answer.
pub(super) fn plain_result(tool: &str, bytes: &[u8]) -> Result<Value, JobError> {
    let failed = |why: String| tool_failed(tool, why);
    let value: Value = serde_json::from_slice(bytes).map_err(|_| {
        tracing::warn!(tool, "declared tool: a plain answer that is not JSON");
        failed("its target answered with something that is not JSON".into())
    })?;
    let text = match &value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": false});
    if value.is_object() {
        result["structuredContent"] = value;
    }
    if serde_json::to_vec(&result).map_or(usize::MAX, |b| b.len()) > MAX_ANSWER_BYTES {
        return Err(failed(format!(
            "its target's result is larger than {MAX_ANSWER_BYTES} bytes"
        )));
    }
    Ok(result)
}

impl DeclaredTool {
    /// One step's `mcp-tasks-step/1` request.
    fn request(
        &self,
        state: &State,
        ctx: &JobContext,
        attempt: u32,
        timeout: Duration,
    ) -> Result<Vec<u8>, JobError> {
        let deadline_ms = crate::clock::now_ms() + timeout.as_millis() as u64;
        let input = state.answers(ctx.inputs())?;
        let request = StepRequest {
            protocol: PROTOCOL,
            tool: self.def.name,
            arguments: ctx.arguments(),
            checkpoint: &state.checkpoint,
            input: &input,
            attempt,
            deadline_ms,
            task: StepTask {
                id: ctx.task_id(),
                tenant: self.limits.pass_tenant.then(|| ctx.tenant()),
            },
        };
        serde_json::to_vec(&request).map_err(|_| self.failed("its request could not be written"))
    }

    /// Passes a `continue`'s progress on, if it goes forward: MCP progress only ever
    /// increases, so a report at or below the highest so far (or below zero) is dropped, its
    /// message with it (docs/step-protocol.md, "Progress"). `remainingSeconds` is taken either
    /// way.
    fn report(&self, p: StepProgress, state: &mut State, ctx: &JobContext) {
        if let Some(left) = p.remaining {
            ctx.expect_remaining(left);
        }
        if p.progress < 0.0 || state.progress.is_some_and(|last| p.progress <= last) {
            return;
        }
        state.progress = Some(p.progress);
        let message = p.message.unwrap_or_else(|| match p.total {
            Some(t) => format!("{} of {}", p.progress, t),
            None => format!("{}", p.progress),
        });
        ctx.progress(p.progress, p.total, message);
    }
}

#[cfg(test)]
#[path = "tool_tests.rs"]
mod tests;
