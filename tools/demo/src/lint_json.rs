//! `lint_json`: checks that a text is valid JSON; invalid JSON is a tool error the model can
//! act on (`isError: true`), not a protocol error.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use mcp_tasks_core::jobs::{JobContext, JobError, Step, text_result};
use mcp_tasks_core::tools::{Policy, TypedTool};

/// The tool.
pub struct LintJson;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The text to check
    text: String,
}

#[async_trait]
impl TypedTool for LintJson {
    type Args = Args;
    const NAME: &'static str = "lint_json";
    const DESCRIPTION: &'static str =
        "Checks whether `text` is valid JSON and says where it is not.";
    const POLICY: Policy = Policy::Sync;

    async fn step(&self, a: &Args, _: &JobContext) -> Result<Step, JobError> {
        match serde_json::from_str::<Value>(&a.text) {
            Ok(v) => Ok(Step::Done(text_result(format!(
                "Valid JSON ({}).",
                match v {
                    Value::Object(_) => "an object",
                    Value::Array(_) => "an array",
                    _ => "a scalar",
                }
            )))),
            Err(e) => Err(JobError::Tool(format!(
                "Invalid JSON at line {}, column {}: {e}",
                e.line(),
                e.column()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::task::TaskStatus;
    use mcp_tasks_core::tools::testkit::ToolKit;
    use serde_json::json;

    #[tokio::test]
    async fn valid_json_is_named_and_invalid_json_is_a_tool_error() {
        let kit = ToolKit::new(LintJson);
        let job = kit.run(json!({"text": "[1, 2]"})).await.unwrap();
        assert!(!job.is_task(), "a synchronous tool never becomes a task");
        assert_eq!(job.text(), "Valid JSON (an array).");

        let job = kit.run(json!({"text": "{\"a\": }"})).await.unwrap();
        assert_eq!(job.status(), TaskStatus::Completed);
        assert!(job.is_error());
        assert!(
            job.text().starts_with("Invalid JSON at line 1, column 7: "),
            "{}",
            job.text()
        );
    }
}
