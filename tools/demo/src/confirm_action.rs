//! `confirm_action`: asks the user to confirm an action on a target (elicitation), then reports
//! the decision: `input_required` + `tasks/update` as a task, SEP-2322 rounds when synchronous.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use mcp_tasks_core::jobs::{JobContext, JobError, Step, accepted, elicitation, text_result};
use mcp_tasks_core::protocol::McpError;
use mcp_tasks_core::tools::{Policy, Preflight, TypedTool};

/// The tool.
pub struct ConfirmAction;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// What would be done, e.g. "delete"
    #[schemars(length(max = 200))]
    action: String,
    /// What it would be done to
    #[schemars(length(max = 200))]
    target: String,
}

#[async_trait]
impl TypedTool for ConfirmAction {
    type Args = Args;
    const NAME: &'static str = "confirm_action";
    const DESCRIPTION: &'static str =
        "Asks the user to confirm an action on a target, then reports the decision.";
    const POLICY: Policy = Policy::Optional;

    async fn preflight(&self, _: &Args, ctx: &JobContext) -> Result<Preflight, JobError> {
        if !ctx.client_declares("elicitation") {
            return Err(JobError::Protocol(
                McpError::missing_capability(
                    "confirm_action needs the elicitation capability",
                    json!({"elicitation": {}}),
                )
                .error,
            ));
        }
        Ok(Preflight::Proceed(Value::Null))
    }

    async fn step(&self, a: &Args, ctx: &JobContext) -> Result<Step, JobError> {
        let Some(answer) = ctx.input("confirm") else {
            let schema = json!({"type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
                "required": ["confirm"]});
            return Ok(Step::NeedInput(
                [(
                    "confirm".to_owned(),
                    elicitation(&format!("{} {}?", a.action, a.target), schema),
                )]
                .into(),
            ));
        };
        let yes = accepted(answer)?.is_some_and(|c| c.get("confirm") == Some(&json!(true)));
        Ok(Step::Done(text_result(if yes {
            format!("Confirmed: {} {}.", a.action, a.target)
        } else {
            format!("Not confirmed: {} {} was not done.", a.action, a.target)
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::task::TaskStatus;
    use mcp_tasks_core::tools::testkit::ToolKit;

    fn args() -> Value {
        json!({"action": "delete", "target": "report.txt"})
    }

    #[tokio::test]
    async fn as_a_task_it_asks_then_acts_on_the_answer() {
        let kit = ToolKit::new(ConfirmAction);
        let mut job = kit.run(args()).await.unwrap();
        assert!(job.is_task());
        assert_eq!(job.status(), TaskStatus::InputRequired);
        let ask = &job.input_requests()["confirm"];
        assert_eq!(ask["method"], "elicitation/create");
        assert_eq!(ask["params"]["message"], "delete report.txt?");

        assert!(job.accept("confirm", json!({"confirm": true})));
        assert_eq!(job.run().await, TaskStatus::Completed);
        assert_eq!(job.text(), "Confirmed: delete report.txt.");
        assert_eq!(job.runs(), 2, "asked in one run, answered in the next");

        let mut job = kit.run(args()).await.unwrap();
        job.decline("confirm");
        job.run().await;
        assert_eq!(job.text(), "Not confirmed: delete report.txt was not done.");
    }

    #[tokio::test]
    async fn inline_it_asks_in_rounds() {
        let mut job = ToolKit::new(ConfirmAction)
            .start_inline(args())
            .await
            .unwrap();
        assert!(!job.is_task());
        assert_eq!(job.run().await, TaskStatus::InputRequired);
        job.accept("confirm", json!({"confirm": false}));
        job.run().await;
        assert_eq!(job.text(), "Not confirmed: delete report.txt was not done.");
    }

    #[tokio::test]
    async fn a_client_without_elicitation_is_refused_before_a_task_exists() {
        let kit = ToolKit::new(ConfirmAction).client_capabilities(json!({}));
        let Err(JobError::Protocol(e)) = kit.start(args()).await else {
            panic!("not refused");
        };
        assert_eq!(e.message, "confirm_action needs the elicitation capability");
    }

    #[tokio::test]
    async fn cancelled_while_waiting_for_the_answer() {
        let mut job = ToolKit::new(ConfirmAction).run(args()).await.unwrap();
        assert!(job.cancel());
        assert_eq!(job.status(), TaskStatus::Cancelled);
        assert!(!job.accept("confirm", json!({"confirm": true})), "too late");
    }
}
