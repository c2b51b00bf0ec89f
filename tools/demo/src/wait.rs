//! `wait`: waits `seconds`; a stand-in for slow I/O. As a task it sleeps without holding a
//! worker ([`Step::Sleep`]: parked, brought back by a delayed message, cancelled at once); as
//! an inline call, whose client is watching, it waits in one-second slices with progress.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use mcp_tasks_core::jobs::{JobContext, JobError, Step, text_result};
use mcp_tasks_core::tools::{Claim, Policy, TypedTool};

/// The tool.
pub struct Wait;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// How long to wait, in seconds
    #[schemars(range(min = 0, max = 86_400))]
    seconds: f64,
}

#[async_trait]
impl TypedTool for Wait {
    type Args = Args;
    const NAME: &'static str = "wait";
    const DESCRIPTION: &'static str = "Waits the given number of seconds (up to a day), then \
        says so. Stands in for any slow I/O-bound job.";
    const POLICY: Policy = Policy::Optional;

    fn claim(&self, a: &Args) -> Claim {
        Claim {
            wall: Duration::try_from_secs_f64(a.seconds).ok(),
            cpu: None,
        }
    }

    async fn step(&self, a: &Args, ctx: &JobContext) -> Result<Step, JobError> {
        let total = (a.seconds * 1000.0) as u64;
        let waited: u64 = ctx.checkpoint();
        if waited >= total {
            return Ok(Step::Done(text_result(format!(
                "Waited {} s.",
                total as f64 / 1000.0
            ))));
        }
        let left = total - waited;
        if ctx.sleep_is_free() && left > 1000 {
            ctx.expect_remaining(Duration::from_millis(left));
            ctx.progress(
                waited as f64,
                Some(total as f64),
                format!(
                    "Waiting {:.1} s more of {:.1} s",
                    left as f64 / 1000.0,
                    total as f64 / 1000.0
                ),
            );
            return Ok(Step::Sleep(json!(total), Duration::from_millis(left)));
        }
        let slice = left.min(1000);
        tokio::time::sleep(Duration::from_millis(slice)).await;
        let waited = waited + slice;
        ctx.expect_remaining(Duration::from_millis(total - waited));
        ctx.progress(
            waited as f64,
            Some(total as f64),
            format!(
                "Waited {:.1} of {:.1} s",
                waited as f64 / 1000.0,
                total as f64 / 1000.0
            ),
        );
        Ok(Step::Continue(json!(waited)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::task::TaskStatus;
    use mcp_tasks_core::tools::testkit::ToolKit;

    #[tokio::test(start_paused = true)]
    async fn as_a_task_it_sleeps_once_without_holding_a_worker() {
        let started = tokio::time::Instant::now();
        let mut job = ToolKit::new(Wait)
            .start(json!({"seconds": 3600}))
            .await
            .unwrap();
        match job.step().await.unwrap() {
            Step::Sleep(cp, d) => {
                assert_eq!(cp, json!(3_600_000), "it wakes done");
                assert_eq!(d, Duration::from_secs(3600));
            }
            other => panic!("expected a sleep, got {other:?}"),
        }
        assert_eq!(job.saved_checkpoint(), &json!(3_600_000), "saved before sleeping");
        assert_eq!(job.run().await, TaskStatus::Completed);
        assert_eq!(job.text(), "Waited 3600 s.");
        assert_eq!(job.steps(), 2, "one sleep, then done");
        assert!(started.elapsed() >= Duration::from_secs(3600));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_in_one_second_slices_with_progress() {
        let job = ToolKit::new(Wait)
            .start_inline(json!({"seconds": 2.5}))
            .await
            .unwrap();
        let mut job = job;
        job.run().await;
        assert_eq!(job.text(), "Waited 2.5 s.");
        let msgs: Vec<_> = job
            .progress()
            .into_iter()
            .filter_map(|p| p.message)
            .collect();
        assert_eq!(
            msgs,
            [
                "Waited 1.0 of 2.5 s",
                "Waited 2.0 of 2.5 s",
                "Waited 2.5 of 2.5 s"
            ]
        );
        assert_eq!(job.steps(), 4, "three slices, then done");
    }

    #[tokio::test(start_paused = true)]
    async fn a_crash_while_asleep_loses_nothing() {
        let mut job = ToolKit::new(Wait)
            .start(json!({"seconds": 10}))
            .await
            .unwrap();
        job.run_for(Duration::from_millis(4500)).await;
        assert_eq!(job.saved_checkpoint(), &json!(10_000), "saved as it fell asleep");
        job.crash();
        assert_eq!(job.run().await, TaskStatus::Completed);
        assert_eq!(job.text(), "Waited 10 s.");
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_mid_wait() {
        let mut job = ToolKit::new(Wait)
            .start(json!({"seconds": 86_400}))
            .await
            .unwrap();
        job.run_for(Duration::from_millis(2500)).await;
        assert!(job.cancel());
        assert_eq!(job.status(), TaskStatus::Cancelled);
        assert_eq!(job.checkpoint(), &json!(86_400_000), "asleep, to wake done");
        assert!(!job.cancel(), "already cancelled");
    }

    #[tokio::test]
    async fn bounds_and_claim() {
        let kit = ToolKit::new(Wait);
        assert!(kit.start(json!({"seconds": -1})).await.is_err());
        assert!(kit.start(json!({"seconds": 86_401})).await.is_err());
        assert!(kit.start(json!({"seconds": "1"})).await.is_err());
        assert_eq!(
            kit.claim(json!({"seconds": 1.5})).wall,
            Some(Duration::from_millis(1500))
        );
    }
}
