//! The `step_functions` target: an existing AWS Step Functions workflow (a Standard state
//! machine) as a durable task (docs/tool-manifest.md, "Step Functions targets").
//!
//! One execution per task, named after the task so that a repeated first step finds the same
//! execution instead of starting a second. Between looks the task is parked (`sleep`), holding
//! no compute while the workflow runs for hours. A state that waits for a task token with the
//! marker [`INPUT_MARKER`] in its parameters is a question to the user: the next look finds it
//! in the execution's recent history, the task shows `input_required`, and the answers go back
//! with `SendTaskSuccess`. Ending the task early (cancel, its running-time limit, its TTL) stops
//! the execution ([`Tool::abandon`]).
//!
//! The API is a port ([`StatesApi`]: one JSON call per action); the AWS adapter signs it, the
//! tests answer it from a stand-in.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::entry::DeclaredEntry;
use super::target::{StatesApi, StatesError};
use super::tool::plain_result;
use crate::jobs::{JobContext, JobError, Step};
use crate::protocol::method::InputMethod;
use crate::tools::{RunPolicy, Tool, ToolDef};

/// The key that marks a waiting state's parameters as a question for the user.
pub const INPUT_MARKER: &str = "mcp-tasks/input";

/// `poll_seconds`: default, least and most.
pub const POLL_SECONDS: (u64, u64, u64) = (10, 1, 3600);

/// The recent history events read at each look (newest first): where the current state's name
/// and a waiting question are found.
const HISTORY_EVENTS: u32 = 20;

/// The largest answer read from the Step Functions API (an execution's output is at most
/// 256 KiB; a history page of 20 events with their data at most about 5 MiB).
pub const MAX_API_ANSWER: usize = 6 * 1024 * 1024;

/// A tool whose task is one execution of a state machine.
pub struct WorkflowTool {
    def: ToolDef,
    title: Option<String>,
    machine: String,
    poll: Duration,
    call_timeout: Duration,
    max_retries: u32,
    max_wall: Option<Duration>,
    api: Arc<dyn StatesApi>,
}

/// What the task keeps between looks (its checkpoint).
#[derive(Debug, Default, Clone, PartialEq)]
struct Run {
    /// The execution's ARN, once started.
    execution: Option<String>,
    /// When the task started it (epoch ms): its running-time limit counts from here.
    started_ms: u64,
    /// The question in flight: its token and the keys asked.
    asked: Option<(String, Vec<String>)>,
    /// The token of the last question answered (a later look may still see it).
    answered: Option<String>,
    /// Looks so far (the status message's progress, which only increases).
    looks: u64,
    /// Failed calls in a row.
    retries: u32,
}

impl Run {
    fn read(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Self {
            execution: s("execution"),
            started_ms: v.get("startedMs").and_then(Value::as_u64).unwrap_or(0),
            asked: v.get("asked").and_then(|a| {
                let token = a.get("token")?.as_str()?.to_owned();
                let keys = a.get("keys")?.as_array()?;
                Some((
                    token,
                    keys.iter()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect(),
                ))
            }),
            answered: s("answered"),
            looks: v.get("looks").and_then(Value::as_u64).unwrap_or(0),
            retries: v.get("retries").and_then(Value::as_u64).unwrap_or(0) as u32,
        }
    }

    fn write(&self) -> Value {
        let mut m = Map::new();
        m.insert("execution".into(), json!(self.execution));
        m.insert("startedMs".into(), json!(self.started_ms));
        if let Some((token, keys)) = &self.asked {
            m.insert("asked".into(), json!({"token": token, "keys": keys}));
        }
        if let Some(t) = &self.answered {
            m.insert("answered".into(), json!(t));
        }
        m.insert("looks".into(), json!(self.looks));
        if self.retries > 0 {
            m.insert("retries".into(), json!(self.retries));
        }
        Value::Object(m)
    }
}

/// The execution name of a task: the same for every step of it, so a repeated start finds the
/// first execution (`ExecutionAlreadyExists`). A synchronous call (no task id) gets a fresh one.
pub fn execution_name(task_id: Option<&str>) -> String {
    match task_id {
        Some(id) => format!("mcp-tasks-{id}"),
        None => {
            let mut b = [0u8; 12];
            crate::clock::random_bytes(&mut b);
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("mcp-tasks-sync-{hex}")
        }
    }
}

/// The ARN of execution `name` of state machine `machine`
/// (`arn:aws:states:R:A:stateMachine:M` → `arn:aws:states:R:A:execution:M:name`).
pub fn execution_arn(machine: &str, name: &str) -> Option<String> {
    let (head, tail) = machine.split_once(":stateMachine:")?;
    Some(format!("{head}:execution:{tail}:{name}"))
}

/// Whether `arn` is a state machine ARN (`arn:PARTITION:states:REGION:ACCOUNT:stateMachine:NAME`).
pub fn is_state_machine_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.split(':').collect();
    parts.len() == 7
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "states"
        && !parts[3].is_empty()
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && parts[5] == "stateMachine"
        && !parts[6].is_empty()
        && parts[6].len() <= 80
        && parts[6]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// A waiting state's question: its task token and its input requests by key.
type Question = (String, Map<String, Value>);

/// What the recent history says: the state the execution is in, and a question waiting for an
/// answer (its token and requests), if the newest task waiting for a token carries
/// [`INPUT_MARKER`].
fn read_history(history: &Value) -> (Option<String>, Option<Question>) {
    let events = history["events"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let state = events.iter().find_map(|e| {
        e.get("stateEnteredEventDetails")?
            .get("name")?
            .as_str()
            .map(|n| crate::protocol::truncate(n, 80))
    });
    let mut ask = None;
    for e in events {
        let kind = e["type"].as_str().unwrap_or("");
        // A task that already ended (answered, failed, timed out) asks nothing any more.
        if kind.starts_with("Task")
            && kind != "TaskScheduled"
            && kind != "TaskStarted"
            && kind != "TaskSubmitted"
        {
            break;
        }
        if kind != "TaskScheduled" {
            continue;
        }
        let params = e["taskScheduledEventDetails"]["parameters"]
            .as_str()
            .and_then(|p| serde_json::from_str::<Value>(p).ok());
        ask = params
            .as_ref()
            .and_then(|p| find_marker(p, 6))
            .and_then(|m| {
                let token = m.get("taskToken")?.as_str()?.to_owned();
                let requests = m.get("inputRequests")?.as_object()?.clone();
                Some((token, requests))
            });
        break;
    }
    (state, ask)
}

/// The object under [`INPUT_MARKER`] in `v`, looked for `depth` levels down, through objects,
/// arrays and strings holding JSON (an SQS `MessageBody` or an EventBridge `Detail` as text).
fn find_marker(v: &Value, depth: u8) -> Option<Map<String, Value>> {
    match v {
        Value::Object(o) => {
            if let Some(m) = o.get(INPUT_MARKER).and_then(Value::as_object) {
                return Some(m.clone());
            }
            if depth == 0 {
                return None;
            }
            o.values().find_map(|c| find_marker(c, depth - 1))
        }
        Value::Array(a) if depth > 0 => a.iter().find_map(|c| find_marker(c, depth - 1)),
        Value::String(s) if depth > 0 && s.contains(INPUT_MARKER) => {
            find_marker(&serde_json::from_str(s).ok()?, depth - 1)
        }
        _ => None,
    }
}

/// Checks a workflow's question as a step-protocol `input` answer is checked: 1 to 16 keys of
/// at most 64 bytes, each an MCP input request.
fn check_requests(requests: &Map<String, Value>) -> bool {
    (1..=super::step_protocol::MAX_INPUT_REQUESTS).contains(&requests.len())
        && requests.iter().all(|(k, r)| {
            !k.is_empty()
                && k.len() <= 64
                && r["method"]
                    .as_str()
                    .and_then(InputMethod::from_name)
                    .is_some()
                && r.get("params").is_none_or(Value::is_object)
        })
}

impl WorkflowTool {
    /// The tool of a checked `step_functions` entry.
    pub fn new(
        entry: &DeclaredEntry,
        machine: &str,
        poll: Duration,
        api: Arc<dyn StatesApi>,
    ) -> Self {
        Self {
            def: entry.tool_def(),
            title: entry.title.clone(),
            machine: machine.to_owned(),
            poll,
            call_timeout: entry.limits.step_timeout.min(Duration::from_secs(30)),
            max_retries: entry.limits.max_retries,
            max_wall: entry.limits.max_task_wall,
            api,
        }
    }

    fn failed(&self, why: impl std::fmt::Display) -> JobError {
        super::tool::tool_failed(self.def.name, why)
    }

    async fn call(&self, action: &'static str, body: Value) -> Result<Value, StatesError> {
        self.api.call(action, body, self.call_timeout).await
    }

    /// A failed call: asked again after a pause (parked) while tries are left.
    fn retry(&self, mut run: Run, e: StatesError) -> Result<Step, JobError> {
        if e.retried() && run.retries < self.max_retries {
            tracing::warn!(tool = self.def.name, error = %e, "workflow: a call failed, retrying");
            run.retries += 1;
            let pause = super::tool::FIRST_BACKOFF
                .saturating_mul(1 << run.retries.min(5))
                .min(super::tool::MAX_BACKOFF);
            return Ok(Step::Sleep(run.write(), pause));
        }
        Err(self.failed(e))
    }

    async fn start(&self, ctx: &JobContext, mut run: Run) -> Result<Step, JobError> {
        let name = execution_name(ctx.task_id());
        let input = ctx.arguments().to_string();
        let body = json!({"stateMachineArn": self.machine, "name": name, "input": input});
        let arn = match self.call("StartExecution", body).await {
            Ok(v) => v["executionArn"].as_str().map(str::to_owned),
            // Started by an earlier try of this step (its answer lost): the same execution.
            Err(StatesError::Refused(code)) if code == "ExecutionAlreadyExists" => {
                execution_arn(&self.machine, &name)
            }
            Err(e) => return self.retry(run, e),
        };
        let Some(arn) = arn else {
            return Err(self.failed("Step Functions answered StartExecution without an execution"));
        };
        tracing::info!(tool = self.def.name, task_id = ctx.task_id().unwrap_or("-"), execution = %arn, "workflow.started");
        run.execution = Some(arn);
        run.started_ms = crate::clock::now_ms();
        run.retries = 0;
        ctx.progress(0.0, None, "Workflow started");
        Ok(Step::Sleep(
            run.write(),
            Duration::from_secs(1).min(self.poll),
        ))
    }

    /// Sends the answers to the question in flight.
    async fn answer(&self, ctx: &JobContext, mut run: Run) -> Result<Run, Result<Step, JobError>> {
        let Some((token, keys)) = run.asked.clone() else {
            return Ok(run);
        };
        let mut answers = Map::new();
        for k in &keys {
            match ctx.inputs().get(k) {
                Some(a) if a.is_object() => {
                    answers.insert(k.clone(), a.clone());
                }
                _ => {
                    return Err(Err(JobError::InvalidParams(format!(
                        "inputResponses[{k:?}] must be an object"
                    ))));
                }
            }
        }
        let body = json!({"taskToken": token, "output": Value::Object(answers).to_string()});
        match self.call("SendTaskSuccess", body).await {
            // Already answered (an earlier try whose answer was lost), or the state timed out:
            // the next look says what became of the execution.
            Ok(_) | Err(StatesError::Refused(_)) => {}
            Err(e) => return Err(self.retry(run, e)),
        }
        run.asked = None;
        run.answered = Some(token);
        run.retries = 0;
        Ok(run)
    }

    async fn look(&self, ctx: &JobContext, mut run: Run, arn: &str) -> Result<Step, JobError> {
        let described = match self
            .call("DescribeExecution", json!({"executionArn": arn}))
            .await
        {
            Ok(v) => v,
            Err(e) => return self.retry(run, e),
        };
        run.retries = 0;
        run.looks += 1;
        match described["status"].as_str().unwrap_or("") {
            "RUNNING" | "PENDING_REDRIVE" => {}
            "SUCCEEDED" => {
                let output = described["output"].as_str().unwrap_or("null");
                return plain_result(self.def.name, output.as_bytes()).map(Step::Done);
            }
            status @ ("FAILED" | "TIMED_OUT" | "ABORTED") => {
                let error = described["error"]
                    .as_str()
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(" ({})", crate::protocol::truncate(e, 128)))
                    .unwrap_or_default();
                return Err(self.failed(format!("its workflow ended {status}{error}")));
            }
            _ => return Err(self.failed("Step Functions answered an unknown execution status")),
        }
        if let Some(max) = self.max_wall
            && crate::clock::now_ms().saturating_sub(run.started_ms) > max.as_millis() as u64
        {
            self.stop(arn, None).await;
            return Ok(Step::Done(crate::jobs::tool_error_result(format!(
                "The job was stopped: its workflow ran longer than the {} s this tool allows.",
                max.as_secs()
            ))));
        }
        let history = json!({"executionArn": arn, "reverseOrder": true,
                             "maxResults": HISTORY_EVENTS, "includeExecutionData": true});
        let (state, ask) = match self.call("GetExecutionHistory", history).await {
            Ok(h) => read_history(&h),
            Err(_) => (None, None),
        };
        if let Some((token, requests)) = ask
            && run.answered.as_deref() != Some(token.as_str())
        {
            if !check_requests(&requests) {
                return Err(
                    self.failed("its workflow asked a question that is not MCP input requests")
                );
            }
            let requests: std::collections::BTreeMap<String, Value> =
                requests.into_iter().collect();
            for r in requests.values() {
                let capability = r["method"]
                    .as_str()
                    .and_then(InputMethod::from_name)
                    .unwrap_or(InputMethod::Elicitation)
                    .capability();
                if !ctx.client_declares(capability) {
                    self.fail_token(&token).await;
                    return Err(self.failed(format!(
                        "its workflow asked for {capability}, which this client did not declare"
                    )));
                }
            }
            run.asked = Some((token, requests.keys().cloned().collect()));
            return Ok(Step::NeedInputAt(run.write(), requests));
        }
        let message = match state {
            Some(s) => format!("Workflow running: {s}"),
            None => "Workflow running".to_owned(),
        };
        ctx.progress(run.looks as f64, None, message);
        Ok(Step::Sleep(run.write(), self.poll))
    }

    async fn fail_token(&self, token: &str) {
        let body = json!({"taskToken": token, "error": "mcp-tasks.Abandoned",
                          "cause": "The MCP task ended before the question was answered"});
        if let Err(e) = self.call("SendTaskFailure", body).await {
            tracing::warn!(tool = self.def.name, error = %e, "workflow: failing a task token failed");
        }
    }

    async fn stop(&self, arn: &str, token: Option<&str>) {
        if let Some(t) = token {
            self.fail_token(t).await;
        }
        let body = json!({"executionArn": arn, "error": "mcp-tasks.Stopped",
                          "cause": "The MCP task was cancelled or reached a limit"});
        match self.call("StopExecution", body).await {
            Ok(_) => tracing::info!(tool = self.def.name, execution = %arn, "workflow.stopped"),
            Err(e) => {
                tracing::warn!(tool = self.def.name, execution = %arn, error = %e, "workflow: stopping failed")
            }
        }
    }
}

#[async_trait]
impl Tool for WorkflowTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    fn run_policy(&self) -> RunPolicy {
        // The workflow's own time is bounded by the tool (from its start, parked or not).
        RunPolicy {
            max_task_wall: None,
        }
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let run = Run::read(ctx.raw_checkpoint());
        let Some(arn) = run.execution.clone() else {
            return self.start(ctx, run).await;
        };
        let run = match self.answer(ctx, run).await {
            Ok(run) => run,
            Err(step) => return step,
        };
        self.look(ctx, run, &arn).await
    }

    async fn abandon(&self, task_id: &str, checkpoint: &Value) {
        let run = Run::read(checkpoint);
        let arn = run
            .execution
            .or_else(|| execution_arn(&self.machine, &execution_name(Some(task_id))));
        if let Some(arn) = arn {
            let token = run.asked.as_ref().map(|(t, _)| t.as_str());
            self.stop(&arn, token).await;
        }
    }
}

#[cfg(test)]
#[path = "workflow_tests.rs"]
mod tests;
