//! The job runner: the one state machine that runs a job's steps, whoever drives it.
//!
//! Three drivers run jobs: the worker (a task, against the store), the synchronous lane of
//! `tools/call` (inline, against the request's budget) and the tool test kit (in memory). What
//! a step's answer means is decided here, once, for all three:
//!
//! - **Checkpoint cadence.** A `Continue` moves the checkpoint on; it is saved when
//!   [`Lane::save_gap`] has passed since the last save (a second by default, longer for a large
//!   record: [`save_gap`]), and always before an answer that parks, asks or ends (the driver's
//!   ending saves it). Every tool, built-in or declared, is paced this way.
//! - **Checks.** While a step runs, and after a `Continue`, the lane is asked whether the run
//!   must stop (the worker: a cancel request or a lost lease) every [`Lane::check_every`]; a
//!   save stands in for a check (the next one is half an interval later).
//! - **Sleep and park.** A sleep shorter than [`PARK_AFTER`], or any sleep where sleeping costs
//!   something ([`JobContext::sleep_is_free`] false: an inline call), is slept in place and is
//!   then a `Continue`; a longer one where sleep is free parks the job ([`Final::Park`]), no
//!   sooner again than its next save would be due.
//! - **Input.** `NeedInput` and `NeedInputAt` end the run with [`Final::Ask`], the checkpoint
//!   moved on first for the latter.
//! - **Panics.** A panicking step is caught ([`Final::Panicked`]): its task fails, its
//!   synchronous call answers `-32603`, and nothing else (a worker, a connection) goes with it.
//! - **Deadline.** Between steps, and during any step but a run's first, the run hands over
//!   when [`JobContext::deadline`] passes or the lane is released ([`Final::HandOver`]): every
//!   run completes at least one step.
//! - **Budget.** After each step that goes on, the lane's per-task limits are consulted
//!   ([`Final::OverQuota`]).
//!
//! What differs per driver is a [`Lane`]: how a checkpoint is saved, how a run is checked, what
//! it may use. What becomes of a [`Final`] (a task record written, a JSON-RPC answer, a test's
//! record) is the driver's.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use futures_util::FutureExt as _;
use serde_json::Value;
use tokio::time::Instant;

use super::{JobContext, JobError, Step, tool_error_result};
use crate::protocol::{ErrorObject, INVALID_PARAMS};
use crate::quota::QuotaExceeded;

/// A sleep shorter than this is slept in place: a message, a write and an invocation cost
/// more than a second of the run it would free.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// The record bytes a job may write per checkpoint interval (a second by default): a record
/// larger than this is saved (and parked) proportionally less often, so one job costs at most
/// about four DynamoDB write units a second whatever its checkpoint's size, and a tenant at most
/// that many times its running places (docs/step-protocol.md, "At least once").
pub const SAVE_BYTES: usize = 4 * 1024;

/// The least time between two writes of a record `bytes` long: `every`, times the number of
/// [`SAVE_BYTES`] the record holds when it holds more than one.
pub fn save_gap(every: Duration, bytes: usize) -> Duration {
    every.mul_f64((bytes as f64 / SAVE_BYTES as f64).max(1.0))
}

/// A step in flight.
pub type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<Step, JobError>> + Send + 'a>>;

/// What the runner steps: a job's step function (every [`crate::tools::Tool`] is one). A trait
/// of its own so that jobs need not know tools.
pub trait Steps: Send + Sync {
    /// Runs one step.
    fn step<'a>(&'a self, ctx: &'a JobContext) -> StepFuture<'a>;
}

/// How a run ended.
#[derive(Debug)]
pub enum Final<S> {
    /// The job finished with this `CallToolResult`.
    Done(Value),
    /// The job failed ([`task_end`] says what that leaves in a task).
    Failed(JobError),
    /// A step panicked.
    Panicked,
    /// The job asks the client (key → `{method, params}`); the checkpoint to resume from is
    /// the runner's.
    Ask(BTreeMap<String, Value>),
    /// The job sleeps this long (paced: never sooner than its next save would be due); the
    /// checkpoint to resume from is the runner's.
    Park(Duration),
    /// The run's time is up ([`JobContext::deadline`], or the lane was released): another run
    /// goes on from the runner's checkpoint.
    HandOver,
    /// The job went past a per-task limit.
    OverQuota(QuotaExceeded),
    /// The lane stopped the run (the worker: a cancel, a lost lease, a record too large).
    Stopped(S),
}

/// What one step came to, before the runner applies it ([`Runner::take`]).
#[derive(Debug)]
pub enum Taken<S> {
    /// The step answered.
    Stepped(Result<Step, JobError>),
    /// The step panicked.
    Panicked,
    /// The run's time is up; the step was not run, or was dropped.
    HandOver,
    /// The lane stopped the run while the step ran (the step was dropped).
    Stopped(S),
}

/// What differs between the drivers of a run.
pub trait Lane {
    /// Why the lane stops a run ([`Final::Stopped`]).
    type Stop: Send;
    /// A failure of the lane itself (the worker: the store is unavailable).
    type Error: Send;

    /// The least time from now to the next save (after a save, judged by what was saved).
    fn save_gap(&self) -> Duration;

    /// How often a run is checked ([`Lane::check`]); `None`: never.
    fn check_every(&self) -> Option<Duration> {
        None
    }

    /// Saves the run's checkpoint, done by `by` if given; `Some(stop)` when the save found the
    /// run must stop.
    fn save(
        &mut self,
        ctx: &JobContext,
        by: Option<Instant>,
    ) -> impl Future<Output = Result<Option<Self::Stop>, Self::Error>> + Send;

    /// Whether the run must stop, found by `by` if given.
    fn check(
        &mut self,
        by: Option<Instant>,
    ) -> impl Future<Output = Result<Option<Self::Stop>, Self::Error>> + Send {
        let _ = by;
        std::future::ready(Ok(None))
    }

    /// Counts what the run used so far (after each step).
    fn account(&mut self, ctx: &JobContext) {
        let _ = ctx;
    }

    /// The per-task limit the job has gone past, if any.
    fn over_quota(&self) -> Option<QuotaExceeded> {
        None
    }

    /// Whether the run should hand over at its next step, deadline or not.
    fn released(&self) -> bool {
        false
    }
}

/// One run of a job: its context and where it stands in its cadence.
pub struct Runner {
    ctx: JobContext,
    /// A step completed in this run (the first is never cut short).
    stepped: bool,
    last_save: Instant,
    gap: Duration,
    next_check: Option<Instant>,
}

/// A step's answer, read: the shapes the runner acts on.
enum Said {
    Continue(Value),
    Sleep(Value, Duration),
    Ask(BTreeMap<String, Value>),
    Done(Value),
    Failed(JobError),
}

impl Runner {
    /// A run over `ctx`, whose last save was just now (taking the task, or none yet).
    pub fn new(ctx: JobContext, lane: &impl Lane) -> Self {
        let now = Instant::now();
        Self {
            ctx,
            stepped: false,
            last_save: now,
            gap: lane.save_gap(),
            next_check: lane.check_every().map(|every| now + every),
        }
    }

    /// The run's context (its checkpoint is the latest, saved or not).
    pub fn ctx(&self) -> &JobContext {
        &self.ctx
    }

    /// The run's context, to change before the first step (a preflight's checkpoint).
    pub fn ctx_mut(&mut self) -> &mut JobContext {
        &mut self.ctx
    }

    /// The checkpoint was saved outside the runner (a park the driver slept through in
    /// place): the cadence starts over.
    pub fn saved(&mut self, lane: &impl Lane) {
        self.last_save = Instant::now();
        self.gap = lane.save_gap();
    }

    /// Runs steps until the job ends, asks, parks, hands over or is stopped.
    pub async fn run<L: Lane>(
        &mut self,
        job: &dyn Steps,
        lane: &mut L,
    ) -> Result<Final<L::Stop>, L::Error> {
        // A job woken (or handed over) past its limit stops before it asks for another step:
        // the limit holds whatever the last step answered.
        if let Some(over) = lane.over_quota() {
            return Ok(Final::OverQuota(over));
        }
        loop {
            let taken = self.take(job, lane).await?;
            if let Some(end) = self.apply(taken, lane).await? {
                return Ok(end);
            }
        }
    }

    /// Runs one step (or hands over before it, when the time is up), checking the run while
    /// it is in flight.
    pub async fn take<L: Lane>(
        &mut self,
        job: &dyn Steps,
        lane: &mut L,
    ) -> Result<Taken<L::Stop>, L::Error> {
        let stop_at = self.ctx.deadline();
        // Between steps only: a step asked to stop early is never cut short.
        if self.stepped && (stop_at.is_some_and(|s| Instant::now() >= s) || lane.released()) {
            return Ok(Taken::HandOver);
        }
        // A panicking step fails its job instead of taking its driver down with it.
        let fut = AssertUnwindSafe(job.step(&self.ctx)).catch_unwind();
        tokio::pin!(fut);
        let taken = loop {
            tokio::select! {
                out = &mut fut => break out.map_or(Taken::Panicked, Taken::Stepped),
                () = sleep_until_opt(self.next_check) => {
                    self.next_check = lane.check_every().map(|every| Instant::now() + every);
                    // A hung check must not hold the run past its hand-over once a step is
                    // done (the first step always completes: every run makes progress).
                    let by = if self.stepped { stop_at } else { None };
                    if let Some(stop) = lane.check(by).await? {
                        break Taken::Stopped(stop);
                    }
                }
                // Dropping the step loses only its own work: the checkpoint before it is what
                // the next run resumes from.
                () = sleep_until_opt(stop_at), if self.stepped => break Taken::HandOver,
            }
        };
        self.stepped = true;
        Ok(taken)
    }

    /// Applies what a step came to: `None` when the job goes on in this run.
    pub async fn apply<L: Lane>(
        &mut self,
        taken: Taken<L::Stop>,
        lane: &mut L,
    ) -> Result<Option<Final<L::Stop>>, L::Error> {
        let said = match taken {
            Taken::Stepped(Ok(Step::Continue(cp))) => Said::Continue(cp),
            // Too short to be worth parking, or an inline call whose client waits: slept in
            // place, then saved like any step's checkpoint (a job pacing its steps this way
            // still saves its progress).
            Taken::Stepped(Ok(Step::Sleep(cp, d))) if !self.parks(d) => {
                tokio::time::sleep(d).await;
                Said::Continue(cp)
            }
            Taken::Stepped(Ok(Step::Sleep(cp, d))) => Said::Sleep(cp, d),
            Taken::Stepped(Ok(Step::NeedInput(requests))) => Said::Ask(requests),
            // Asking from a new checkpoint: the checkpoint moves on, then it is an ask.
            Taken::Stepped(Ok(Step::NeedInputAt(cp, requests))) => {
                self.ctx.set_checkpoint(cp);
                Said::Ask(requests)
            }
            Taken::Stepped(Ok(Step::Done(result))) => Said::Done(result),
            Taken::Stepped(Err(e)) => Said::Failed(e),
            Taken::Panicked => return Ok(Some(Final::Panicked)),
            Taken::HandOver => return Ok(Some(Final::HandOver)),
            Taken::Stopped(stop) => return Ok(Some(Final::Stopped(stop))),
        };
        lane.account(&self.ctx);
        // Every answer that goes on (a next step, a sleep, a question) is held to the limits;
        // one that ends the job is not stopped short of its end.
        if matches!(said, Said::Continue(_) | Said::Sleep(..) | Said::Ask(_))
            && let Some(over) = lane.over_quota()
        {
            return Ok(Some(Final::OverQuota(over)));
        }
        Ok(match said {
            Said::Continue(cp) => {
                self.ctx.set_checkpoint(cp);
                self.went_on(lane).await?.map(Final::Stopped)
            }
            Said::Sleep(cp, d) => {
                self.ctx.set_checkpoint(cp);
                // Parking writes the record: a large one parks no more often than it would be
                // saved (the sleep lasts longer than asked, never shorter).
                Some(Final::Park(
                    d.max(self.gap.saturating_sub(self.last_save.elapsed())),
                ))
            }
            Said::Ask(requests) => Some(Final::Ask(requests)),
            Said::Done(result) => Some(Final::Done(result)),
            Said::Failed(e) => Some(Final::Failed(e)),
        })
    }

    /// Whether a sleep of `d` parks the job rather than being slept in place.
    fn parks(&self, d: Duration) -> bool {
        self.ctx.sleep_is_free() && d >= PARK_AFTER
    }

    /// After a `Continue`: the save when due, the check when due.
    async fn went_on<L: Lane>(&mut self, lane: &mut L) -> Result<Option<L::Stop>, L::Error> {
        let stop_at = self.ctx.deadline();
        if self.last_save.elapsed() >= self.gap {
            self.last_save = Instant::now();
            if let Some(stop) = lane.save(&self.ctx, stop_at).await? {
                return Ok(Some(stop));
            }
            self.gap = lane.save_gap();
            // A save stands in for a check (the worker's is conditional on the version the
            // run holds: it finds a cancel request or a lost lease as a check would). The
            // next check waits half an interval more than the next save, so a job whose steps
            // are short is written, never read; one stuck in a long step is still checked
            // within one and a half intervals.
            if let Some(every) = lane.check_every() {
                self.next_check = Some(Instant::now() + every * 3 / 2);
            }
        }
        if self.next_check.is_some_and(|at| Instant::now() >= at) {
            self.next_check = lane.check_every().map(|every| Instant::now() + every);
            return lane.check(stop_at).await;
        }
        Ok(None)
    }
}

/// The error a panicked step leaves: a task fails with it, a synchronous call answers it. Its
/// text says nothing of the panic's.
pub fn panicked() -> ErrorObject {
    ErrorObject::internal("The job failed unexpectedly")
}

/// What a failed job leaves in its task: `Ok(result)` completes it (a tool error the model
/// reads, `isError: true`), `Err(error)` fails it (a protocol error, or invalid arguments as
/// `-32602`).
pub fn task_end(e: JobError) -> Result<Value, ErrorObject> {
    match e {
        JobError::Tool(msg) => Ok(tool_error_result(msg)),
        JobError::Protocol(err) => Err(err),
        JobError::InvalidParams(message) => Err(ErrorObject {
            code: INVALID_PARAMS,
            message,
            data: None,
        }),
    }
}

/// `f`'s output, or `None` when it panicked (a preflight, run as a step is).
pub async fn caught<T>(f: impl Future<Output = T>) -> Option<T> {
    AssertUnwindSafe(f).catch_unwind().await.ok()
}

/// A preflight's answer, or the error its panic leaves (as a panicking step's does): a task
/// lane's call answers it, its connection kept.
pub async fn preflight_caught<T>(
    f: impl Future<Output = Result<T, JobError>>,
) -> Result<T, JobError> {
    caught(f).await.unwrap_or_else(|| {
        tracing::error!("job preflight panicked");
        Err(JobError::Protocol(panicked()))
    })
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::sync::Mutex;

    use serde_json::{Map, json};

    use super::*;
    use crate::jobs::{ProgressSink, text_result};

    /// Answers from a script, one per step (`None`: panics).
    struct Script(Mutex<VecDeque<Option<Step>>>);

    impl Script {
        fn of(steps: Vec<Option<Step>>) -> Self {
            Self(Mutex::new(steps.into()))
        }
    }

    impl Steps for Script {
        fn step<'a>(&'a self, _ctx: &'a JobContext) -> StepFuture<'a> {
            let next = self.0.lock().unwrap().pop_front().expect("a scripted step");
            Box::pin(async move {
                match next {
                    Some(step) => Ok(step),
                    None => panic!("a scripted panic"),
                }
            })
        }
    }

    /// Records what it saved; its gap is `gap`.
    #[derive(Default)]
    struct Saves {
        gap: Duration,
        saved: Vec<Value>,
    }

    impl Lane for Saves {
        type Stop = Infallible;
        type Error = Infallible;

        fn save_gap(&self) -> Duration {
            self.gap
        }

        async fn save(
            &mut self,
            ctx: &JobContext,
            _by: Option<Instant>,
        ) -> Result<Option<Infallible>, Infallible> {
            self.saved.push(ctx.raw_checkpoint().clone());
            Ok(None)
        }
    }

    fn ctx(parking: bool) -> JobContext {
        let sink = ProgressSink::latest_only();
        let ctx = JobContext::new(json!({}), Value::Null, Map::new(), json!({}), sink);
        if parking { ctx.parking() } else { ctx }
    }

    async fn run(
        steps: Vec<Option<Step>>,
        lane: &mut Saves,
        parking: bool,
    ) -> (Final<Infallible>, Value) {
        let mut runner = Runner::new(ctx(parking), lane);
        let Ok(end) = runner.run(&Script::of(steps), lane).await;
        (end, runner.ctx().raw_checkpoint().clone())
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_step_ends_the_run_as_panicked() {
        let mut lane = Saves::default();
        let (end, cp) = run(vec![Some(Step::Continue(json!(1))), None], &mut lane, true).await;
        assert!(matches!(end, Final::Panicked), "{end:?}");
        assert_eq!((cp, lane.saved), (json!(1), vec![json!(1)]));
    }

    #[tokio::test(start_paused = true)]
    async fn asking_from_a_new_checkpoint_moves_it_on_first() {
        let asks = BTreeMap::from([("k".to_owned(), json!({"method": "elicitation/create"}))]);
        let mut lane = Saves::default();
        let steps = vec![Some(Step::NeedInputAt(json!("asked"), asks.clone()))];
        let (end, cp) = run(steps, &mut lane, true).await;
        assert!(matches!(end, Final::Ask(ref r) if *r == asks), "{end:?}");
        assert_eq!(cp, json!("asked"));
        assert!(
            lane.saved.is_empty(),
            "the driver saves an ask with its ending"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn continues_are_saved_at_the_lanes_pace() {
        let mut lane = Saves {
            gap: Duration::from_secs(1),
            ..Saves::default()
        };
        let steps = vec![
            Some(Step::Continue(json!(1))),
            // Slept in place (shorter than PARK_AFTER), then a Continue: due by now.
            Some(Step::Sleep(json!(2), Duration::from_millis(1500))),
            Some(Step::Continue(json!(3))),
            Some(Step::Done(text_result("done"))),
        ];
        let (end, _) = run(steps, &mut lane, false).await;
        assert!(matches!(end, Final::Done(_)), "{end:?}");
        assert_eq!(
            lane.saved,
            vec![json!(2)],
            "only the step a second after the start"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_sleep_parks_no_sooner_than_the_next_save_where_sleep_is_free() {
        let mut lane = Saves {
            gap: Duration::from_secs(10),
            ..Saves::default()
        };
        let steps = vec![Some(Step::Sleep(json!("s"), Duration::from_secs(2)))];
        let (end, cp) = run(steps, &mut lane, true).await;
        assert!(
            matches!(end, Final::Park(d) if d >= Duration::from_secs(9)),
            "{end:?}"
        );
        assert_eq!(cp, json!("s"));
        // Where sleep is not free (an inline call), the same sleep is slept in place.
        let steps = vec![
            Some(Step::Sleep(json!("s"), Duration::from_secs(2))),
            Some(Step::Done(text_result("done"))),
        ];
        let (end, _) = run(steps, &mut Saves::default(), false).await;
        assert!(matches!(end, Final::Done(_)), "{end:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_past_its_deadline_hands_over_after_its_first_step() {
        let mut lane = Saves::default();
        let ctx = ctx(true).until(Some(Instant::now()));
        let mut runner = Runner::new(ctx, &lane);
        let script = Script::of(vec![Some(Step::Continue(json!(1)))]);
        let Ok(end) = runner.run(&script, &mut lane).await;
        assert!(matches!(end, Final::HandOver), "{end:?}");
        assert_eq!(runner.ctx().raw_checkpoint(), &json!(1), "one step first");
    }

    #[test]
    fn a_failure_completes_or_fails_its_task_by_kind() {
        assert_eq!(
            task_end(JobError::Tool("no".into())),
            Ok(tool_error_result("no"))
        );
        assert_eq!(
            task_end(JobError::InvalidParams("bad".into()))
                .unwrap_err()
                .code,
            INVALID_PARAMS
        );
        assert_eq!(panicked().message, "The job failed unexpectedly");
    }
}
