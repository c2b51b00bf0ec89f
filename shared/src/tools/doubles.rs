//! A `wait` shaped like the demonstration tool of that name (which lives outside this crate,
//! in `tools/demo`): enough for the handler's own tests to call a tool inline, with progress,
//! or as a task.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Claim, Policy, Tool, TypedTool, typed};
use crate::jobs::{JobContext, JobError, Step, text_result};

struct Wait;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(range(min = 0, max = 86_400))]
    seconds: f64,
}

#[async_trait]
impl TypedTool for Wait {
    type Args = Args;
    const NAME: &'static str = "wait";
    const DESCRIPTION: &'static str = "Waits, in one-second slices with progress.";
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
            return Ok(Step::Done(text_result("Waited.")));
        }
        let slice = (total - waited).min(1000);
        tokio::time::sleep(Duration::from_millis(slice)).await;
        ctx.progress((waited + slice) as f64, Some(total as f64), "waiting");
        Ok(Step::Continue(json!(waited + slice)))
    }
}

/// The `wait` double.
pub(crate) fn wait() -> Arc<dyn Tool> {
    typed(Wait)
}
