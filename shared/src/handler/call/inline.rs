//! Running a tool inline for a synchronous call (both lanes): within the call's budget and the
//! caller's token, on one of its tenant's running places.

use std::convert::Infallible;

use super::*;
use crate::jobs::runner::{Final, Lane, Runner, caught, panicked};

/// The synchronous lane's: nothing is saved (the checkpoint travels in the sealed
/// `requestState` of an input round), nothing is checked (the client's connection is the
/// cancel), no per-task limit but the request's budget, which ends the run by dropping it.
struct Budget;

impl Lane for Budget {
    type Stop = Infallible;
    type Error = Infallible;

    fn save_gap(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    async fn save(
        &mut self,
        _ctx: &JobContext,
        _by: Option<tokio::time::Instant>,
    ) -> Result<Option<Self::Stop>, Self::Error> {
        Ok(None)
    }
}

/// The preflight, then the steps, as the synchronous lane runs them. A panicking preflight
/// or step ends the call with -32603, as it fails a task on the task lane: the connection, the
/// server and the tenant's place are kept.
async fn preflight_and_steps(tool: &Arc<dyn Tool>, runner: &mut Runner) -> Final<Infallible> {
    match caught(tool.preflight(runner.ctx())).await {
        Some(Ok(Preflight::Proceed(cp))) => {
            if runner.ctx().raw_checkpoint().is_null() && !cp.is_null() {
                runner.ctx_mut().set_checkpoint(cp);
            }
        }
        Some(Ok(Preflight::NeedInput(reqs))) => return Final::Ask(reqs),
        Some(Err(e)) => return Final::Failed(e),
        None => return Final::Panicked,
    }
    match runner.run(tool, &mut Budget).await {
        Ok(end) => end,
        Err(never) => match never {},
    }
}

impl McpService {
    /// Runs a job inline for a synchronous call, within the plan's budget and until the
    /// caller's token expires.
    pub(in crate::handler) async fn run_inline<S: AsRef<str>>(
        &self,
        run: &InlineRun<S>,
        ctx: JobContext,
        plan: InlinePlan,
    ) -> CallOutcome {
        let (tool, tenant, name, arguments) =
            (&run.tool, &run.tenant, run.name.as_ref(), &run.arguments);
        let policy = tool.def().policy;
        // The tenant's running place first, within the budget: the run gets what is left.
        let waiting = std::time::Instant::now();
        let place = match self.engine.running_place(tenant, plan.budget).await {
            Ok(place) => place,
            Err(CreateError::Quota(q)) => return self.quota_refusal(&q),
            Err(CreateError::Failed(e)) => return CallOutcome::Error(e.into()),
        };
        let budget = plan.budget.saturating_sub(waiting.elapsed());
        let mut runner = Runner::new(ctx, &Budget);
        let run = preflight_and_steps(tool, &mut runner);
        let started = std::time::Instant::now();
        let out = tokio::select! {
            out = tokio::time::timeout(budget, run) => out.map_err(|_| Ended::Budget),
            () = until(plan.token_expiry) => Err(Ended::TokenExpired),
        };
        // Dropped instead when the call is (its client gone): the place goes back then.
        place.release().await;
        let labels = [("tool", name)];
        metrics::global().count(metric::SYNC_CALLS, &labels, 1);
        metrics::global().time(
            metric::SYNC_CALL_MS,
            &labels,
            started.elapsed().as_millis() as u64,
        );
        match out {
            Ok(Final::Done(result)) => {
                let m = result.as_object().cloned().unwrap_or_default();
                CallOutcome::Result(finish(m, "complete", &self.meta))
            }
            Ok(Final::Ask(reqs)) => {
                let ctx = runner.ctx();
                self.input_required(tenant, name, arguments, ctx, reqs.into_iter().collect())
                    .await
            }
            Ok(Final::Failed(e)) => self.job_error(e),
            Ok(Final::Panicked) => {
                tracing::error!(tool = name, "job step panicked");
                self.job_error(JobError::Protocol(panicked()))
            }
            Ok(Final::OverQuota(q)) => self.quota_refusal(&q),
            // The lane has no deadline and sleeps in place: a run that still ended for time
            // ran out of it, as one over its budget does.
            Ok(Final::Park(_) | Final::HandOver) => {
                CallOutcome::Error(McpError::internal_with("The tool did not finish in time"))
            }
            Ok(Final::Stopped(never)) => match never {},
            Err(Ended::TokenExpired) => CallOutcome::Error(token_expired()),
            Err(Ended::Budget) if policy == Policy::Optional => {
                CallOutcome::Error(McpError::tasks_extension_required(format!(
                    "Tool {name} needs longer than the synchronous budget: declare the \
                     {TASKS_EXTENSION} extension to run it as a task"
                )))
            }
            Err(Ended::Budget) => {
                CallOutcome::Error(McpError::internal_with("The tool did not finish in time"))
            }
        }
    }
}
