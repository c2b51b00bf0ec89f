//! Running a tool inline for a synchronous call (both lanes): within the call's budget and the
//! caller's token, on one of its tenant's running places.

use super::*;

impl McpService {
    /// Runs a job inline for a synchronous call, within the plan's budget and until the
    /// caller's token expires.
    pub(in crate::handler) async fn run_inline<S: AsRef<str>>(
        &self,
        run: &InlineRun<S>,
        mut ctx: JobContext,
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
        let run = async {
            match tool.preflight(&ctx).await {
                Ok(Preflight::Proceed(cp)) => {
                    if ctx.raw_checkpoint().is_null() && !cp.is_null() {
                        ctx.set_checkpoint(cp);
                    }
                }
                Ok(Preflight::NeedInput(reqs)) => return Ok(Step::NeedInput(reqs)),
                Err(e) => return Err(e),
            }
            loop {
                match tool.step(&ctx).await? {
                    Step::Continue(cp) => ctx.set_checkpoint(cp),
                    // The client waits on this call: the run sleeps in place (within the
                    // budget, like any step).
                    Step::Sleep(cp, d) => {
                        ctx.set_checkpoint(cp);
                        tokio::time::sleep(d).await;
                    }
                    // The checkpoint travels in the sealed requestState of the round.
                    Step::NeedInputAt(cp, reqs) => {
                        ctx.set_checkpoint(cp);
                        return Ok(Step::NeedInput(reqs));
                    }
                    other => return Ok(other),
                }
            }
        };
        // A panicking step ends this call with -32603, as it fails a task on the task lane:
        // the connection, the server and the tenant's place are kept.
        let run = async {
            use futures_util::FutureExt as _;
            std::panic::AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!(tool = name, "job step panicked");
                    Err(JobError::Protocol(crate::protocol::ErrorObject::internal(
                        "The job failed unexpectedly",
                    )))
                })
        };
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
            Ok(Ok(Step::Done(result))) => {
                let m = result.as_object().cloned().unwrap_or_default();
                CallOutcome::Result(finish(m, "complete", &self.meta))
            }
            Ok(Ok(Step::NeedInput(reqs))) => {
                self.input_required(tenant, name, arguments, &ctx, reqs.into_iter().collect())
                    .await
            }
            Ok(Ok(Step::Continue(_) | Step::Sleep(..) | Step::NeedInputAt(..))) => {
                unreachable!("the loop only returns final steps")
            }
            Ok(Err(e)) => self.job_error(e),
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
