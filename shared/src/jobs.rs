//! The step-wise job API every tool implements.
//!
//! A job runs as a sequence of bounded steps. Each step reads its arguments, its checkpoint and
//! the answers received so far from a [`JobContext`] and returns a [`Step`]:
//! *continue* with a new checkpoint, *need input* (a map of input requests), or *done* with a
//! `CallToolResult`; or a [`JobError`]. The same job runs
//! - as a task, driven by [`crate::worker::Worker`] (checkpoints persisted, resumable after a
//!   crash or across Lambda invocations, input asked through `tasks/get`/`tasks/update`), or
//! - inline for a synchronous `tools/call` (input asked through SEP-2322 `InputRequiredResult`
//!   rounds, the checkpoint travelling in the sealed `requestState`).
//!
//! Whoever drives it, one [`runner`] runs the steps: the checkpoint cadence, input, sleeping
//! and parking, a panicking step, the deadline and the per-task limits mean the same on every
//! lane.
//!
//! A step that asked for input is run again, with the same checkpoint, once answers arrive, so
//! it must look at [`JobContext::input`] before asking. Steps should stay short (about a second
//! or less); long waits are fine as they are cancelled by dropping the step's future.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::protocol::ErrorObject;
use crate::tenant::Tenant;

pub(crate) mod args;
pub mod runner;

pub use runner::{PARK_AFTER, SAVE_BYTES, save_gap};

/// What one step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// More to do; the value is the new checkpoint.
    Continue(Value),
    /// Ask the client: key → `{method, params}` input request. The step runs again, with the
    /// checkpoint it was given, once every key is answered.
    NeedInput(BTreeMap<String, Value>),
    /// [`Step::NeedInput`] from a new checkpoint: the step that runs once every key is
    /// answered gets this one (a step that did work before it asked).
    NeedInputAt(Value, BTreeMap<String, Value>),
    /// Finished with a `CallToolResult`.
    Done(Value),
    /// Nothing to do for this long (an upstream to poll later, a time to wait for); the value
    /// is the checkpoint to resume from. A task is parked without holding a worker: its
    /// checkpoint is saved and the queue brings it back when the time is up (on AWS, SQS
    /// `DelaySeconds`, chained past 15 minutes; locally, a timer), and a cancel ends it at
    /// once. An inline synchronous call simply sleeps (see [`JobContext::sleep_is_free`]).
    Sleep(Value, Duration),
}

/// How a step failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    /// The arguments are wrong: `-32602` for a synchronous call, `failed` for a task.
    #[error("invalid arguments: {0}")]
    InvalidParams(String),
    /// A failure the model should read: a `CallToolResult` with `isError: true`.
    #[error("tool error: {0}")]
    Tool(String),
    /// A protocol-level failure: a JSON-RPC error, `failed` for a task.
    #[error("protocol error: {}", .0.message)]
    Protocol(ErrorObject),
}

/// One progress report.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Work done so far.
    pub progress: f64,
    /// Total, when known.
    pub total: Option<f64>,
    /// Human-readable message (becomes the task's `statusMessage`).
    pub message: Option<String>,
}

/// A callback that forwards each progress report.
type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Where progress goes: a task's status message, a request's SSE stream, or nowhere.
#[derive(Clone, Default)]
pub struct ProgressSink {
    latest: Arc<Mutex<Option<Progress>>>,
    stream: Option<ProgressFn>,
}

impl ProgressSink {
    /// A sink that only keeps the latest report (the worker flushes it, throttled).
    pub fn latest_only() -> Self {
        Self::default()
    }

    /// A sink that also forwards every report (SSE `notifications/progress`).
    pub fn streaming(f: impl Fn(&Progress) + Send + Sync + 'static) -> Self {
        Self {
            latest: Arc::default(),
            stream: Some(Arc::new(f)),
        }
    }

    fn report(&self, p: Progress) {
        if let Some(f) = &self.stream {
            f(&p);
        }
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    }

    /// The newest report's message, if any.
    pub fn latest_message(&self) -> Option<String> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|p| p.message.clone())
    }
}

/// The process-wide CPU pool: as many places as cores, shared between tenants in turn, so a
/// tenant with many CPU-bound jobs waits behind its own steps, never in front of another
/// tenant's (see [`crate::quota::FairGate`]).
static CPU_POOL: LazyLock<Arc<crate::quota::FairGate>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    crate::quota::FairGate::new(cores, cores)
});

/// Runs CPU-bound work for `tenant` off the async threads, on a place of the fair CPU pool;
/// returns its result and the time it ran there.
pub async fn cpu<T: Send + 'static>(
    tenant: &Tenant,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<(T, Duration), JobError> {
    let _place = CPU_POOL.acquire(tenant).await;
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let out = work();
        (out, started.elapsed())
    })
    .await
    .map_err(|_| JobError::Protocol(ErrorObject::internal("The CPU-bound work stopped")))
}

/// The poll interval to suggest to clients (`pollIntervalMs`) for a job expected to need
/// `remaining` more: a tenth of it, so a client learns of the end within about 10% of the job's
/// remaining time, between `floor` (the deployment's default, 1 s) and 30 s, so a task is never
/// out of sight for long (a cancel, a question) and a client's own timeouts are not strained.
/// An hour-long `wait` is then polled ~150 times instead of 3,600.
pub fn poll_interval_for(remaining: Duration, floor: Duration) -> Duration {
    (remaining / 10).clamp(floor, Duration::from_secs(30).max(floor))
}

/// What a step can see and do.
pub struct JobContext {
    arguments: Value,
    checkpoint: Value,
    inputs: Map<String, Value>,
    client_capabilities: Value,
    progress: ProgressSink,
    steps_this_run: u64,
    tenant: Tenant,
    /// The task this run advances (`None`: an inline synchronous call).
    task_id: Option<String>,
    /// Runs of this task in a row that died since its checkpoint was last saved.
    interruptions: u32,
    /// When this run must hand over (`None`: no deadline).
    deadline: Option<tokio::time::Instant>,
    cpu_used_ms: Arc<AtomicU64>,
    /// The job's latest estimate of the time it still needs, in ms (`u64::MAX`: none given).
    remaining_ms: Arc<AtomicU64>,
    /// Whether a [`Step::Sleep`] parks the job without holding anything (a task run by the
    /// worker) rather than sleeping in place (an inline call, whose client is waiting).
    sleep_is_free: bool,
}

impl JobContext {
    /// A context for one run of a job.
    pub fn new(
        arguments: Value,
        checkpoint: Value,
        inputs: Map<String, Value>,
        client_capabilities: Value,
        progress: ProgressSink,
    ) -> Self {
        Self {
            arguments,
            checkpoint,
            inputs,
            client_capabilities,
            progress,
            steps_this_run: 0,
            tenant: Tenant::from(""),
            task_id: None,
            interruptions: 0,
            deadline: None,
            cpu_used_ms: Arc::default(),
            remaining_ms: Arc::new(AtomicU64::new(u64::MAX)),
            sleep_is_free: false,
        }
    }

    /// The same context, for a run whose [`Step::Sleep`] parks the task (the worker's).
    pub fn parking(mut self) -> Self {
        self.sleep_is_free = true;
        self
    }

    /// Whether a [`Step::Sleep`] costs nothing here: true for a task, whose worker is freed
    /// while it sleeps; false for an inline synchronous call, where the run sleeps in place
    /// and a client waits on its stream (a job may prefer short slices with progress there).
    pub fn sleep_is_free(&self) -> bool {
        self.sleep_is_free
    }

    /// The same context, run on behalf of `tenant` (whose turn on the CPU pool it takes).
    pub fn for_tenant(mut self, tenant: &Tenant) -> Self {
        self.tenant = tenant.clone();
        self
    }

    /// The same context, advancing task `task_id`, whose runs died `interruptions` times in a
    /// row since its checkpoint was last saved (the worker's).
    pub fn for_task(mut self, task_id: &str, interruptions: u32) -> Self {
        self.task_id = Some(task_id.to_owned());
        self.interruptions = interruptions;
        self
    }

    /// The same context, for a run that must hand over by `deadline`.
    pub fn until(mut self, deadline: Option<tokio::time::Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// The tenant this run is for (empty when none was given).
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The task this run advances; `None` for an inline synchronous call.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// How many runs of this task in a row died since its checkpoint was last saved: on the
    /// first step of a run, how many times the step it resumes may have run before.
    pub fn interruptions(&self) -> u32 {
        self.interruptions
    }

    /// When this run must hand over; a step that cannot finish by then is better left to the
    /// next run.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// Runs CPU-bound work off the async threads, on the caller's tenant's turn of the fair
    /// CPU pool; the time it takes counts against the task's CPU quota.
    pub async fn cpu<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, JobError> {
        let (out, took) = cpu(&self.tenant, work).await?;
        self.cpu_used_ms
            .fetch_add(took.as_millis() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// Tells how long the job expects still to need (call it from a step whenever the estimate
    /// changes; a `wait` knows exactly, a batch job from its progress rate). It sets how often
    /// clients are asked to poll the task ([`poll_interval_for`]): a job with an hour to go
    /// need not be polled every second.
    pub fn expect_remaining(&self, remaining: Duration) {
        let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX - 1);
        self.remaining_ms
            .store(ms.min(u64::MAX - 1), Ordering::Relaxed);
    }

    /// The job's latest [`expect_remaining`](Self::expect_remaining), if it gave one.
    pub fn remaining(&self) -> Option<Duration> {
        match self.remaining_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// CPU time used through [`cpu`](Self::cpu) since this context was made, in milliseconds.
    pub fn cpu_used_ms(&self) -> u64 {
        self.cpu_used_ms.load(Ordering::Relaxed)
    }

    /// The raw arguments object.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The arguments, deserialized; a mismatch is [`JobError::InvalidParams`] saying where and
    /// what, as the argument checker does (`arguments/rounds: is a string, expected a
    /// non-negative integer`), never quoting a value. An integral number written with a
    /// fraction (`1000.0`) fills an integer field: JSON Schema counts it an integer.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        args::from_value(&self.arguments).map_err(|e| JobError::InvalidParams(e.to_string()))
    }

    /// The checkpoint, or `T::default()` on the first step.
    pub fn checkpoint<T: DeserializeOwned + Default>(&self) -> T {
        if self.checkpoint.is_null() {
            return T::default();
        }
        serde_json::from_value(self.checkpoint.clone()).unwrap_or_default()
    }

    /// The raw checkpoint.
    pub fn raw_checkpoint(&self) -> &Value {
        &self.checkpoint
    }

    /// Replaces the checkpoint (the runner does this after `Step::Continue`).
    pub fn set_checkpoint(&mut self, checkpoint: Value) {
        self.checkpoint = checkpoint;
        self.steps_this_run += 1;
    }

    /// True on the first step of this run: a fresh start, or a resumption after a crash, a
    /// hand-over or an answer (the checkpoint tells which).
    pub fn first_step_of_run(&self) -> bool {
        self.steps_this_run == 0
    }

    /// The answer to an input request, once received.
    pub fn input(&self, key: &str) -> Option<&Value> {
        self.inputs.get(key)
    }

    /// All answers received so far.
    pub fn inputs(&self) -> &Map<String, Value> {
        &self.inputs
    }

    /// Whether the calling client declared a capability (`elicitation`, `sampling`, `roots`:
    /// a task remembers only these, see [`crate::protocol::task_capabilities`]).
    pub fn client_declares(&self, capability: &str) -> bool {
        crate::protocol::declares(&self.client_capabilities, capability)
    }

    /// Reports progress (throttled into `statusMessage` for tasks; streamed for synchronous
    /// calls that asked for progress).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: impl Into<String>) {
        self.progress.report(Progress {
            progress,
            total,
            message: Some(message.into()),
        });
    }
}

/// A `CallToolResult` with one text item.
pub fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}], "isError": false})
}

/// A `CallToolResult` carrying a tool error the model should read.
pub fn tool_error_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}], "isError": true})
}

/// An `elicitation/create` form request with a flat schema.
pub fn elicitation(message: &str, requested_schema: Value) -> Value {
    json!({"method": "elicitation/create",
           "params": {"mode": "form", "message": message, "requestedSchema": requested_schema}})
}

/// Reads an elicitation answer: `Some(content)` when accepted, `None` when declined or
/// cancelled, `Err` when the answer is not an elicitation result.
pub fn accepted(answer: &Value) -> Result<Option<&Map<String, Value>>, JobError> {
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| JobError::InvalidParams("input response lacks an action".into()))?;
    match action {
        "accept" => Ok(Some(
            answer
                .get("content")
                .and_then(Value::as_object)
                .ok_or_else(|| JobError::InvalidParams("accepted input lacks content".into()))?,
        )),
        "decline" | "cancel" => Ok(None),
        _ => Err(JobError::InvalidParams(format!(
            "unknown input action {:?}",
            crate::protocol::truncate(action, 32)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Args {
        rounds: u64,
        delta: i32,
        ratio: f64,
        #[serde(default)]
        tags: Vec<u8>,
        #[serde(default)]
        mode: Option<Mode>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Inner {
        k: u16,
    }

    fn args(arguments: Value) -> Result<Args, JobError> {
        let sink = ProgressSink::latest_only();
        JobContext::new(arguments, Value::Null, Map::new(), Value::Null, sink).args()
    }

    #[test]
    fn integral_numbers_written_with_a_fraction_fill_integer_fields() {
        let got = args(
            json!({"rounds": 1000.0, "delta": -3.0, "ratio": 2, "tags": [1.0, 2],
                             "mode": "slow", "inner": {"k": 7.0}}),
        );
        let want = Args {
            rounds: 1000,
            delta: -3,
            ratio: 2.0,
            tags: vec![1, 2],
            mode: Some(Mode::Slow),
            inner: Some(Inner { k: 7 }),
        };
        assert_eq!(got, Ok(want));
        let big = args(json!({"rounds": 1.8e19, "delta": 0, "ratio": 0.5}));
        assert_eq!(big.map(|a| a.rounds), Ok(18_000_000_000_000_000_000));
    }

    #[test]
    fn a_mismatch_says_where_and_what_never_the_value() {
        let base = json!({"rounds": 1, "delta": 0, "ratio": 1});
        let with = |k: &str, v: Value| {
            let mut a = base.clone();
            a[k] = v;
            a
        };
        for (arguments, want) in [
            (
                with("rounds", json!(1000.5)),
                "arguments/rounds: is a number, expected a non-negative integer",
            ),
            (
                with("rounds", json!("12345-secret")),
                "arguments/rounds: is a string, expected a non-negative integer",
            ),
            (
                with("rounds", json!(-7.0)),
                "arguments/rounds: is an integer out of what this tool takes here, expected a \
                 non-negative integer",
            ),
            (
                with("tags", json!([1, 300])),
                "arguments/tags/1: is an integer out of what this tool takes here, expected a \
                 non-negative integer",
            ),
            (
                with("mode", json!("secret-mode")),
                "arguments/mode: is not one of \"fast\", \"slow\"",
            ),
            (
                with("inner", json!({"k": [true]})),
                "arguments/inner/k: is an array, expected a non-negative integer",
            ),
            (
                with("inner", json!({})),
                "arguments/inner: lacks the required property \"k\"",
            ),
            (
                with("extra", json!("secret")),
                "arguments: has the property \"extra\", which is not allowed",
            ),
            (
                json!({"delta": 0, "ratio": 1}),
                "arguments: lacks the required property \"rounds\"",
            ),
            (
                json!("secret"),
                "arguments: is a string, expected an object",
            ),
        ] {
            assert_eq!(
                args(arguments.clone()),
                Err(JobError::InvalidParams(want.into())),
                "{arguments}"
            );
        }
    }

    #[test]
    fn the_poll_interval_follows_the_time_left_within_bounds() {
        let s = Duration::from_secs;
        let floor = s(1);
        assert_eq!(poll_interval_for(s(3600), floor), s(30));
        assert_eq!(poll_interval_for(s(120), floor), s(12));
        assert_eq!(poll_interval_for(s(5), floor), floor);
        assert_eq!(poll_interval_for(Duration::ZERO, floor), floor);
        assert_eq!(poll_interval_for(s(5), s(2)), s(2));
        assert_eq!(
            poll_interval_for(s(3600), s(60)),
            s(60),
            "a floor above the cap wins"
        );
    }

    /// A client that honours `pollIntervalMs` polls an hour-long `wait` ~150 times, not 3,600
    /// (each interval it is given follows the job's latest estimate of the time left).
    #[test]
    fn an_hour_long_wait_is_polled_about_150_times() {
        let (total, floor) = (Duration::from_secs(3600), Duration::from_secs(1));
        let (mut t, mut polls) = (Duration::ZERO, 0u32);
        while t < total {
            polls += 1;
            t += poll_interval_for(total - t, floor);
        }
        println!("polls of an hour-long wait: {polls} (3600 at a fixed 1 s)");
        assert!((100..=200).contains(&polls), "{polls}");
    }
}
