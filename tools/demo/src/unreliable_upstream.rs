//! `unreliable_upstream`: a job whose (simulated) upstream is down; it ends `failed` with a
//! JSON-RPC error, the protocol-level failure a task can end with.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use mcp_tasks_core::jobs::{JobContext, JobError, Step};
use mcp_tasks_core::protocol::{ErrorObject, INTERNAL_ERROR};
use mcp_tasks_core::tools::{Policy, TypedTool};

/// The tool.
pub struct UnreliableUpstream;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// How long the upstream takes to fail, in milliseconds
    #[serde(default = "default_after_ms")]
    #[schemars(range(max = 60_000))]
    after_ms: u64,
}

fn default_after_ms() -> u64 {
    500
}

#[async_trait]
impl TypedTool for UnreliableUpstream {
    type Args = Args;
    const NAME: &'static str = "unreliable_upstream";
    const DESCRIPTION: &'static str = "Simulates a job whose upstream service is unavailable: \
        the task fails with a JSON-RPC error after `after_ms` (default 500).";
    const POLICY: Policy = Policy::TaskOnly;

    async fn step(&self, a: &Args, ctx: &JobContext) -> Result<Step, JobError> {
        // The wait for the upstream is a sleep the worker sees (past a second it parks the
        // task, holding nothing), then the failure.
        let waited: bool = ctx.checkpoint();
        if !waited && a.after_ms > 0 {
            return Ok(Step::Sleep(json!(true), Duration::from_millis(a.after_ms)));
        }
        Err(JobError::Protocol(ErrorObject {
            code: INTERNAL_ERROR,
            message: "Upstream service unavailable (simulated)".into(),
            data: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::task::TaskStatus;
    use mcp_tasks_core::tools::testkit::ToolKit;

    #[tokio::test(start_paused = true)]
    async fn the_task_fails_with_a_json_rpc_error_after_the_default_delay() {
        let started = tokio::time::Instant::now();
        let job = ToolKit::new(UnreliableUpstream)
            .run(json!({}))
            .await
            .unwrap();
        assert_eq!(job.status(), TaskStatus::Failed);
        let e = job.error().unwrap();
        assert_eq!(
            (e.code, e.message.as_str()),
            (INTERNAL_ERROR, "Upstream service unavailable (simulated)")
        );
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_upstream_wait_is_a_sleep_the_worker_sees() {
        let mut job = ToolKit::new(UnreliableUpstream)
            .start(json!({"after_ms": 30_000}))
            .await
            .unwrap();
        match job.step().await.unwrap() {
            Step::Sleep(_, d) => assert_eq!(d, Duration::from_secs(30)),
            other => panic!("expected a sleep, got {other:?}"),
        }
        assert_eq!(job.run().await, TaskStatus::Failed);
        assert_eq!(job.steps(), 2, "one sleep, then the failure");
    }

    #[tokio::test]
    async fn it_only_runs_as_a_task() {
        let Err(JobError::Protocol(e)) = ToolKit::new(UnreliableUpstream)
            .start_inline(json!({"after_ms": 0}))
            .await
        else {
            panic!("ran inline");
        };
        assert_eq!(e.code, mcp_tasks_core::protocol::MISSING_CAPABILITY);
    }
}
