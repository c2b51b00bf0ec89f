//! The tool test kit: runs a tool's job in memory, step by step, the way the server runs it —
//! arguments checked against the schema at the edge, preflight, steps with checkpoints and
//! progress, input requests answered, a cancel, a crash and a resume from the last saved
//! checkpoint — so a tool is tested with `cargo test` and no server, store or queue.
//!
//! Behind the `testkit` feature (always on for this crate's own tests). Another crate with its
//! own tools enables it in its dev-dependencies, with tokio's `test-util` feature for
//! `#[tokio::test(start_paused = true)]`.
//!
//! ```ignore
//! use mcp_tasks_core::tools::testkit::ToolKit;
//! use mcp_tasks_core::task::TaskStatus;
//!
//! #[tokio::test(start_paused = true)] // sleeps in steps take no real time
//! async fn counts_down_and_survives_a_crash() {
//!     let mut job = ToolKit::new(Countdown).start(json!({"from": 3})).await.unwrap();
//!     job.step().await.unwrap();                  // one step: Continue(2)
//!     job.crash();                                // the process dies; resume from what was saved
//!     assert_eq!(job.run().await, TaskStatus::Completed);
//!     assert_eq!(job.text(), "Lift-off!");
//! }
//! ```
//!
//! Its steps are taken by the server's own job runner ([`crate::jobs::runner`]), over a lane
//! that keeps the task record in memory, so it does what the worker does ([`crate::worker`]):
//! a run is one [`JobContext`] (so [`JobContext::first_step_of_run`] is true on its first
//! step); `Continue` moves the checkpoint on and saves it when [`ToolKit::save_every`] has
//! passed since the last save (by default after every step; the worker's is a second); a task's
//! sleep of a second or more parks it (saved, then slept through in place), a shorter one is
//! slept in place; `NeedInput` saves the checkpoint and parks the task `input_required` (an
//! empty request or a reused key fails it, as the worker does); the answers are kept, and the
//! next run sees them all; a tool error completes the task with `isError: true`, a protocol
//! error or invalid arguments fail it; a panicking step fails it with the worker's error. A
//! synchronous call ([`ToolKit::start_inline`], and synchronous tools always) runs as the
//! request handler runs it: the preflight again at the start of every round, input asked in
//! SEP-2322 rounds, nothing saved.
//!
//! What it leaves out: the per-task quotas (see [`ToolKit::claim`]), the synchronous time
//! budget, leases, hand-over between processes other than [`Job::hand_over`], and the
//! throttling of `statusMessage` (here it is the latest progress message at once).
//!
//! Misuse (stepping a job that waits for input, answering malformed input) panics with a
//! message: it is a mistake in the test, not something a client could do.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{Claim, Policy, Preflight, Registry, Tool, ToolDef, TypedTool, typed};
use crate::jobs::runner::{Final, Lane, Runner, Taken, panicked, task_end};
use crate::jobs::{JobContext, JobError, Progress, ProgressSink, Step};
use crate::protocol::{ErrorObject, McpError};
use crate::task::{TaskId, TaskRecord, TaskStatus};
use crate::tenant::Tenant;

/// Runs one tool the way the server does. Cheap to make; one per test is fine.
pub struct ToolKit {
    tool: Arc<dyn Tool>,
    registry: Registry,
    client_capabilities: Value,
    save_every: Duration,
    tenant: Tenant,
}

impl ToolKit {
    /// A kit for a typed tool.
    pub fn new<T: TypedTool>(tool: T) -> Self {
        Self::for_tool(typed(tool))
    }

    /// A kit for any [`Tool`] (an untyped one, or one taken from a registry). Panics if the
    /// tool's `inputSchema` does not compile (see [`crate::schema`] for what it takes):
    /// on a server, every call of that tool would be refused.
    pub fn for_tool(tool: Arc<dyn Tool>) -> Self {
        if let Err(e) = crate::schema::Validator::new(&tool.def().input_schema) {
            panic!(
                "tool {}: its inputSchema does not compile: {e}",
                tool.def().name
            );
        }
        Self {
            registry: Registry::new(vec![tool.clone()]).checking_arguments(),
            tool,
            client_capabilities: json!({"elicitation": {}, "sampling": {}, "roots": {}}),
            save_every: Duration::ZERO,
            tenant: "testkit".into(),
        }
    }

    /// The calling client's capabilities (default: elicitation, sampling and roots).
    pub fn client_capabilities(mut self, capabilities: Value) -> Self {
        self.client_capabilities = capabilities;
        self
    }

    /// The least time between two checkpoint saves of a task (default zero: every step's
    /// checkpoint is saved, so a crash loses only the step in flight; the worker saves at most
    /// once a second). Measured on tokio's clock, so paused time works.
    pub fn save_every(mut self, every: Duration) -> Self {
        self.save_every = every;
        self
    }

    /// The tool's definition; `def().input_schema` is what `tools/list` serves.
    pub fn def(&self) -> &ToolDef {
        self.tool.def()
    }

    /// The work a call with these arguments claims (checked against the per-task quotas at
    /// the edge).
    pub fn claim(&self, arguments: Value) -> Claim {
        self.tool.claim(&arguments)
    }

    /// Calls the tool as a client that declared the tasks extension: the arguments are checked
    /// against the schema, the preflight runs, and the job is a task, unless the tool is
    /// synchronous (then it runs inline, as the server runs it). A refused call is the error
    /// the client would get: [`JobError::InvalidParams`] for arguments the schema refuses (the
    /// message the client reads), or whatever the preflight returned. A preflight that asks
    /// first gives a job waiting for input (no task exists yet; answering runs the preflight
    /// again, and the task starts from the checkpoint it returns).
    pub async fn start(&self, arguments: Value) -> Result<Job, JobError> {
        let inline = self.def().policy == Policy::Sync;
        self.begin(arguments, inline).await
    }

    /// Calls the tool as a client that did not declare the tasks extension: inline, in
    /// SEP-2322 rounds; a task-only tool refuses it.
    pub async fn start_inline(&self, arguments: Value) -> Result<Job, JobError> {
        if self.def().policy == Policy::TaskOnly {
            let name = self.def().name;
            return Err(JobError::Protocol(
                McpError::tasks_extension_required(format!(
                    "Tool {name} only runs as a task: declare the {} extension",
                    crate::protocol::TASKS_EXTENSION
                ))
                .error,
            ));
        }
        self.begin(arguments, true).await
    }

    /// [`start`](Self::start), then [`Job::run`]: the job as it stands once it finished or
    /// waits for input.
    pub async fn run(&self, arguments: Value) -> Result<Job, JobError> {
        let mut job = self.start(arguments).await?;
        job.run().await;
        Ok(job)
    }

    async fn begin(&self, arguments: Value, inline: bool) -> Result<Job, JobError> {
        let name = self.def().name;
        self.registry
            .validate(name, &arguments)
            .map_err(JobError::InvalidParams)?;
        let mut job = Job {
            tool: self.tool.clone(),
            arguments,
            inline,
            save_every: self.save_every,
            tenant: self.tenant.clone(),
            record: TaskRecord::new(
                self.tenant.clone(),
                TaskId::from_static("tsk_testkit"),
                name,
                None,
                1000,
                self.client_capabilities.clone(),
            ),
            before_task: !inline,
            checkpoint: Value::Null,
            run: None,
            progress: Arc::default(),
            steps: 0,
            runs: 0,
        };
        job.new_run();
        match job.preflight().await {
            Ok(None) => Ok(job),
            Ok(Some(requests)) => {
                job.ask(requests);
                Ok(job)
            }
            Err(e) => Err(e),
        }
    }
}

/// One run of a job: the runner (its context and cadence), and whether its preflight has run.
struct Run {
    runner: Runner,
    ready: bool,
}

/// The kit's lane: the task record in memory, saved at the kit's pace (an inline call's
/// checkpoint after every step: it is what its request state would carry).
struct Memory<'j> {
    record: &'j mut TaskRecord,
    save_every: Duration,
    inline: bool,
}

impl Lane for Memory<'_> {
    type Stop = Infallible;
    type Error = Infallible;

    fn save_gap(&self) -> Duration {
        if self.inline {
            Duration::ZERO
        } else {
            self.save_every
        }
    }

    async fn save(
        &mut self,
        ctx: &JobContext,
        _by: Option<Instant>,
    ) -> Result<Option<Infallible>, Infallible> {
        self.record.checkpoint = ctx.raw_checkpoint().clone();
        self.record.interruptions = 0;
        Ok(None)
    }
}

/// A call of a tool in progress: a task (or an inline call) and the job behind it.
pub struct Job {
    tool: Arc<dyn Tool>,
    arguments: Value,
    inline: bool,
    save_every: Duration,
    tenant: Tenant,
    /// The task as the store would hold it: status, saved checkpoint, requests, answers,
    /// result or error.
    record: TaskRecord,
    /// Still asking in the preflight, before the task exists.
    before_task: bool,
    /// This run's checkpoint (the saved one is `record.checkpoint`).
    checkpoint: Value,
    run: Option<Run>,
    progress: Arc<Mutex<Vec<Progress>>>,
    steps: u64,
    runs: u64,
}

impl Job {
    /// The status a client would read (`tasks/get`).
    pub fn status(&self) -> TaskStatus {
        self.record.status
    }

    /// Whether this call runs as a task (false: inline, answered on the request).
    pub fn is_task(&self) -> bool {
        !self.inline
    }

    /// The checkpoint the job is at (its last `Continue`; after a crash, the saved one).
    pub fn checkpoint(&self) -> &Value {
        &self.checkpoint
    }

    /// The checkpoint, deserialized.
    pub fn checkpoint_as<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.checkpoint.clone())
            .unwrap_or_else(|e| panic!("checkpoint {}: {e}", self.checkpoint))
    }

    /// The checkpoint saved in the store: where a crash resumes.
    pub fn saved_checkpoint(&self) -> &Value {
        &self.record.checkpoint
    }

    /// Every progress report so far, in order (a synchronous call streams each one).
    pub fn progress(&self) -> Vec<Progress> {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The task's `statusMessage`: the latest progress message while it works.
    pub fn status_message(&self) -> Option<&str> {
        self.record.status_message.as_deref()
    }

    /// The outstanding input requests (key → `{method, params}`).
    pub fn input_requests(&self) -> &BTreeMap<String, Value> {
        &self.record.input_requests
    }

    /// The `CallToolResult`, once completed.
    pub fn result(&self) -> Option<&Value> {
        self.record.result.as_ref()
    }

    /// Whether the result is a tool error (`isError: true`).
    pub fn is_error(&self) -> bool {
        self.result()
            .is_some_and(|r| r.get("isError") == Some(&json!(true)))
    }

    /// The text of the result (its text items, one per line). Panics unless completed.
    pub fn text(&self) -> String {
        let Some(result) = self.result() else {
            panic!(
                "the job is {:?}, not completed (error: {:?})",
                self.status(),
                self.error()
            );
        };
        let items = result["content"].as_array().into_iter().flatten();
        items
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The JSON-RPC error, once failed.
    pub fn error(&self) -> Option<&ErrorObject> {
        self.record.error.as_ref()
    }

    /// Steps completed so far (a step dropped by [`run_for`](Self::run_for), a cancel or a
    /// crash does not count).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Runs so far: the first, and one more after each answer, crash or hand-over.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// The task record as the store would hold it.
    pub fn record(&self) -> &TaskRecord {
        &self.record
    }

    /// Runs one step and returns what the tool answered (a round's preflight asking or failing
    /// is answered as the step). Panics unless the job is working.
    pub async fn step(&mut self) -> Result<Step, JobError> {
        assert_eq!(
            self.status(),
            TaskStatus::Working,
            "the job cannot step: it is {:?} (answer its input requests first?)",
            self.status()
        );
        if self.run.is_none() {
            self.new_run();
        }
        match self.preflight().await {
            Ok(None) => {}
            Ok(Some(requests)) => {
                self.ask(requests.clone());
                return Ok(Step::NeedInput(requests));
            }
            Err(e) => {
                self.end(task_end(e.clone()));
                return Err(e);
            }
        }
        let run = self.run.as_mut().expect("a run");
        let mut lane = Memory {
            record: &mut self.record,
            save_every: self.save_every,
            inline: self.inline,
        };
        let Ok(taken) = run.runner.take(&self.tool, &mut lane).await;
        self.steps += 1;
        // What the test sees: the step's answer (a panic: the error its task fails with).
        let shown = match &taken {
            Taken::Stepped(out) => out.clone(),
            Taken::Panicked => Err(JobError::Protocol(panicked())),
            Taken::HandOver => Ok(Step::Continue(run.runner.ctx().raw_checkpoint().clone())),
            Taken::Stopped(never) => match *never {},
        };
        let Ok(end) = run.runner.apply(taken, &mut lane).await;
        self.checkpoint = run.runner.ctx().raw_checkpoint().clone();
        if !matches!(end, Some(Final::Panicked)) {
            self.flush_progress();
        }
        match end {
            None => {}
            // A task parks with its checkpoint saved and comes back when the time is up; here
            // it sleeps in place (virtual time, under a paused clock), in the same run.
            Some(Final::Park(d)) => {
                self.record.checkpoint = self.checkpoint.clone();
                self.record.interruptions = 0;
                let lane = Memory {
                    record: &mut self.record,
                    save_every: self.save_every,
                    inline: self.inline,
                };
                let run = self.run.as_mut().expect("a run");
                run.runner.saved(&lane);
                tokio::time::sleep(d).await;
            }
            Some(Final::Ask(requests)) => self.ask(requests),
            Some(Final::Done(result)) => self.end(Ok(result)),
            Some(Final::Failed(e)) => self.end(task_end(e)),
            Some(Final::Panicked) => self.end(Err(panicked())),
            Some(Final::OverQuota(over)) => self.end(Ok(over.to_tool_result())),
            Some(Final::HandOver) => self.hand_over(),
            Some(Final::Stopped(never)) => match never {},
        }
        shown
    }

    /// Runs steps until the job finishes or waits for input; returns its status then.
    pub async fn run(&mut self) -> TaskStatus {
        while self.status() == TaskStatus::Working {
            let _ = self.step().await;
        }
        self.status()
    }

    /// Runs steps for `time` (tokio's clock): the step in flight then is dropped, as a cancel,
    /// a crash or a deadline drops it, and its work is lost. Returns the status.
    pub async fn run_for(&mut self, time: Duration) -> TaskStatus {
        let until = Instant::now() + time;
        while self.status() == TaskStatus::Working {
            if tokio::time::timeout_at(until, self.step()).await.is_err() {
                break;
            }
        }
        self.status()
    }

    /// Answers an outstanding input request, as `tasks/update` (or the next round of an inline
    /// call) does; once every request is answered the job works again. Returns whether the
    /// answer counted (an unknown, answered or no longer outstanding key is ignored). Panics
    /// on an answer the server would refuse (an elicitation answer without a known `action`,
    /// a `roots/list` answer without `roots`).
    pub fn answer(&mut self, key: &str, response: Value) -> bool {
        let mut responses = Map::new();
        responses.insert(key.to_owned(), response);
        if let Err(e) = self.record.check_answers(&responses) {
            panic!("the server refuses this answer: {e}");
        }
        self.record.answer(&responses)
    }

    /// Accepts an elicitation request with `content`.
    pub fn accept(&mut self, key: &str, content: Value) -> bool {
        self.answer(key, json!({"action": "accept", "content": content}))
    }

    /// Declines an elicitation request.
    pub fn decline(&mut self, key: &str) -> bool {
        self.answer(key, json!({"action": "decline"}))
    }

    /// Cancels, as `tasks/cancel` does (or a client closing an inline call): a working job
    /// stops (a step in flight would be dropped), a job waiting for input ends. Returns
    /// whether it applied (false once the job has finished).
    pub fn cancel(&mut self) -> bool {
        let applied = self.record.cancel().is_ok();
        if applied {
            self.run = None;
        }
        applied
    }

    /// The process dies: this run's unsaved checkpoints are lost, and the next step starts a
    /// new run from the saved checkpoint (as a worker taking over the expired lease does).
    /// Panics for an inline call (there is nothing to resume: the client calls again).
    pub fn crash(&mut self) {
        assert!(self.is_task(), "an inline call has nothing to resume");
        if self.run.take().is_some() {
            self.record.interruptions += 1;
            self.record.deaths = self.record.deaths.saturating_add(1);
        }
        self.checkpoint = self.record.checkpoint.clone();
    }

    /// The run hands over (a Lambda invocation near its deadline): the checkpoint is saved,
    /// and the next step starts a new run from it.
    pub fn hand_over(&mut self) {
        assert!(self.is_task(), "an inline call has no hand-over");
        self.record.checkpoint = self.checkpoint.clone();
        self.run = None;
    }

    /// Starts a run: a fresh context over the saved checkpoint (an inline call: the one its
    /// request state carries) and every answer so far.
    fn new_run(&mut self) {
        let reports = self.progress.clone();
        let sink = ProgressSink::streaming(move |p| {
            reports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(p.clone());
        });
        let inputs = self.record.input_responses.clone().into_iter().collect();
        let ctx = JobContext::new(
            self.arguments.clone(),
            self.record.checkpoint.clone(),
            inputs,
            self.record.client_capabilities.clone(),
            sink,
        )
        .for_tenant(&self.tenant);
        let ctx = if self.inline {
            ctx
        } else {
            ctx.parking()
                .for_task(&self.record.task_id, self.record.interruptions)
        };
        self.checkpoint = self.record.checkpoint.clone();
        if !self.before_task {
            self.runs += 1;
        }
        let lane = Memory {
            record: &mut self.record,
            save_every: self.save_every,
            inline: self.inline,
        };
        self.run = Some(Run {
            runner: Runner::new(ctx, &lane),
            // The preflight runs before the task exists, and at the start of every round of
            // an inline call; a task's runs go straight to their steps.
            ready: !(self.before_task || self.inline),
        });
    }

    /// Runs the preflight if this run needs it: `Some(requests)` when it asks first.
    async fn preflight(&mut self) -> Result<Option<BTreeMap<String, Value>>, JobError> {
        let run = self.run.as_mut().expect("a run");
        if run.ready {
            return Ok(None);
        }
        match self.tool.preflight(run.runner.ctx()).await? {
            Preflight::NeedInput(requests) => Ok(Some(requests)),
            Preflight::Proceed(cp) => {
                run.ready = true;
                if self.before_task {
                    // The task is created, with this first checkpoint and no answers.
                    self.before_task = false;
                    self.record.checkpoint = cp;
                    self.record.input_responses.clear();
                    self.record.issued_input_keys.clear();
                    self.new_run();
                    self.run.as_mut().expect("a run").ready = true;
                } else if run.runner.ctx().raw_checkpoint().is_null() && !cp.is_null() {
                    run.runner.ctx_mut().set_checkpoint(cp.clone());
                    self.checkpoint = cp;
                }
                Ok(None)
            }
        }
    }

    /// Parks the job on input requests, as the worker (or the inline handler) does.
    fn ask(&mut self, requests: BTreeMap<String, Value>) {
        self.run = None;
        self.record.checkpoint = self.checkpoint.clone();
        if self.inline || self.before_task {
            // Asked on the request (SEP-2322 rounds): no task keeps the keys issued.
            self.record.issued_input_keys.clear();
        }
        if let Err(e) = self.record.require_input(requests) {
            tracing::error!(error = %e, "job asked for input incorrectly");
            let err = ErrorObject::internal("The job asked for input incorrectly");
            let _ = self.record.fail(err);
        }
    }

    /// Ends the job: `Ok(result)` completes it, `Err(error)` fails it.
    fn end(&mut self, out: Result<Value, ErrorObject>) {
        self.run = None;
        let _ = match out {
            Ok(result) => self.record.complete(result),
            Err(err) => self.record.fail(err),
        };
    }

    /// Moves the latest progress message into `statusMessage`, as the worker's flush does.
    fn flush_progress(&mut self) {
        let reports = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = reports.last().and_then(|p| p.message.clone()) {
            self.record.status_message = Some(m);
        }
    }
}

#[cfg(test)]
mod tests;
