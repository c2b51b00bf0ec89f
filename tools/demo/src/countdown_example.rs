//! `countdown`: counts down from `from`, one number a second, then says "Lift-off!".

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use mcp_tasks_core::jobs::{JobContext, JobError, Step, text_result};
use mcp_tasks_core::tools::{Policy, TypedTool};

/// The tool.
pub struct Countdown;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Where to count down from
    #[schemars(range(min = 1, max = 3600))]
    from: u64,
}

#[async_trait]
impl TypedTool for Countdown {
    type Args = Args;
    const NAME: &'static str = "countdown";
    const DESCRIPTION: &'static str = "Counts down from `from`, one number a second.";
    const POLICY: Policy = Policy::Optional;

    async fn step(&self, args: &Args, ctx: &JobContext) -> Result<Step, JobError> {
        // The checkpoint is how many are left; there is none on the first step.
        let left = ctx.checkpoint::<Option<u64>>().unwrap_or(args.from);
        if left == 0 {
            return Ok(Step::Done(text_result("Lift-off!")));
        }
        tokio::time::sleep(Duration::from_secs(1)).await; // a cancel drops this future
        let done = args.from - left + 1;
        ctx.progress(
            done as f64,
            Some(args.from as f64),
            format!("{} to go", left - 1),
        );
        Ok(Step::Continue(json!(left - 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::task::TaskStatus;
    use mcp_tasks_core::tools::testkit::ToolKit;

    #[tokio::test(start_paused = true)] // the sleeps take no real time
    async fn counts_down_and_resumes_after_a_crash() {
        let kit = ToolKit::new(Countdown);
        let mut job = kit.start(json!({"from": 3})).await.unwrap();
        job.step().await.unwrap(); // 3 -> 2, saved
        job.crash(); // the process dies; the next run resumes at 2
        assert_eq!(job.run().await, TaskStatus::Completed);
        assert_eq!(job.text(), "Lift-off!");
        assert_eq!((job.steps(), job.runs()), (4, 2));
        assert_eq!(job.status_message(), Some("0 to go"));
        let Err(JobError::InvalidParams(refused)) = kit.start(json!({"from": 0})).await else {
            panic!("the schema's minimum let 0 through");
        };
        assert_eq!(
            refused,
            "Invalid arguments for tool countdown: arguments/from: is less than 1"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_stops_it_mid_count() {
        let mut job = ToolKit::new(Countdown)
            .start(json!({"from": 60}))
            .await
            .unwrap();
        job.run_for(Duration::from_millis(2500)).await; // two steps; the third is dropped
        assert!(job.cancel());
        assert_eq!(job.status(), TaskStatus::Cancelled);
        assert_eq!(job.checkpoint(), &json!(58));
    }
}

// Not in the docs: docs/add-a-tool.md's copy of this file (its Rust example) is this file
// down to the line above, kept in step by this test.
#[cfg(test)]
#[test]
fn the_docs_show_this_file() {
    let docs = include_str!("../../../docs/add-a-tool.md");
    let this = include_str!("countdown_example.rs");
    let example = this.split("\n// Not in the docs").next().unwrap();
    let shown = docs
        .split("```rust\n")
        .find(|block| block.starts_with("//! `countdown`"))
        .and_then(|block| block.split("```").next())
        .expect("docs/add-a-tool.md shows countdown.rs in a ```rust block");
    assert_eq!(
        shown.trim_end(),
        example.trim_end(),
        "docs/add-a-tool.md and countdown_example.rs differ"
    );
}
