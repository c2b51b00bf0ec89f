//! The tool test kit on the conformance fixtures: the paths they take that the demonstration
//! tools do not (a preflight that asks first, inline rounds, inline progress), the kit used
//! from a crate outside the core library, as a team's own tools use it.

use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::tools::Registry;
use mcp_tasks_core::tools::testkit::ToolKit;
use serde_json::json;

fn fixture(name: &str) -> ToolKit {
    let registry = Registry::new(mcp_tasks_conformance_tools::tools());
    ToolKit::for_tool(registry.get(name).expect("a fixture").clone())
}

#[tokio::test]
async fn a_preflight_that_asks_first_creates_the_task_from_its_checkpoint() {
    let kit = fixture("test_tool_with_task");
    let mut job = kit.start(json!({})).await.unwrap();
    assert!(job.is_task());
    assert_eq!(job.status(), TaskStatus::InputRequired);
    assert_eq!(job.runs(), 0, "no task yet");
    job.accept("user_name", json!({"name": "Ada"}));
    assert_eq!(job.run().await, TaskStatus::Completed);
    assert_eq!(job.text(), "Task finished for Ada");
    assert!(
        job.record().input_responses.is_empty(),
        "answers stay with the request"
    );
}

#[tokio::test]
async fn inline_rounds_keep_the_answers_and_the_checkpoint() {
    let mut job = fixture("test_input_required_result_multi_round")
        .start(json!({}))
        .await
        .unwrap();
    assert!(!job.is_task());
    job.run().await;
    assert!(job.input_requests().contains_key("step1"));
    job.accept("step1", json!({"name": "a"}));
    job.run().await;
    assert!(job.input_requests().contains_key("step2"));
    job.accept("step2", json!({"color": "red"}));
    job.run().await;
    assert_eq!(job.text(), "Both rounds answered.");
    assert_eq!(job.runs(), 3, "one round per answer");
}

#[tokio::test]
async fn progress_is_streamed_inline() {
    let job = fixture("test_tool_with_progress")
        .run(json!({}))
        .await
        .unwrap();
    let at: Vec<f64> = job.progress().iter().map(|p| p.progress).collect();
    assert_eq!(at, [0.0, 50.0, 100.0]);
    assert_eq!(job.text(), "Progress reported.");
}

#[tokio::test]
#[should_panic(expected = "answer its input requests first")]
async fn stepping_a_job_that_waits_for_input_is_a_test_bug() {
    let mut job = fixture("confirm_delete").run(json!({})).await.unwrap();
    let _ = job.step().await;
}
