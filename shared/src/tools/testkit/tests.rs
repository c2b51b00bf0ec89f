//! The kit's own tests: the paths the demonstration tools do not take (those the conformance
//! fixtures take are tested with them, in `tools/conformance/tests/testkit.rs`).

use super::*;
use crate::jobs::{elicitation, text_result};
use async_trait::async_trait;

enum Action {
    Go,
    Ask(&'static [&'static str]),
    Done,
    Panic,
}

/// A scripted job: its checkpoint counts its steps, and `plan(steps, answers)` says what
/// the next step does.
struct Script(fn(u64, usize) -> Action);

#[async_trait]
impl Tool for Script {
    fn def(&self) -> &ToolDef {
        static DEF: std::sync::LazyLock<ToolDef> = std::sync::LazyLock::new(|| ToolDef {
            name: "script",
            description: "Does as told.",
            input_schema: json!({"type": "object"}),
            policy: Policy::Optional,
        });
        &DEF
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let n: u64 = ctx.checkpoint();
        let answers = ctx.inputs().len();
        Ok(match (self.0)(n, answers) {
            Action::Go => Step::Continue(json!(n + 1)),
            Action::Ask(keys) => Step::NeedInput(
                keys.iter()
                    .map(|k| (k.to_string(), elicitation("?", json!({"type": "object"}))))
                    .collect(),
            ),
            Action::Done => Step::Done(text_result(format!("{n} steps, {answers} answers"))),
            Action::Panic => panic!("step {n}"),
        })
    }
}

fn script(plan: fn(u64, usize) -> Action) -> ToolKit {
    ToolKit::for_tool(Arc::new(Script(plan)))
}

#[tokio::test]
async fn every_request_is_awaited_and_answers_to_other_keys_are_ignored() {
    let mut job = script(|n, answers| match (n, answers) {
        (1, 0) => Action::Ask(&["a", "b"]),
        (2, 2) => Action::Ask(&["c"]),
        (3, _) => Action::Done,
        _ => Action::Go,
    })
    .run(json!({}))
    .await
    .unwrap();
    assert_eq!(job.status(), TaskStatus::InputRequired);
    assert_eq!(job.saved_checkpoint(), &json!(1), "saved with the requests");
    assert!(!job.accept("zzz", json!({})));
    assert!(job.accept("a", json!({})));
    assert_eq!(job.status(), TaskStatus::InputRequired, "b is outstanding");
    assert!(!job.accept("a", json!({})), "answered already");
    assert!(job.decline("b"));
    assert_eq!(job.run().await, TaskStatus::InputRequired);
    job.accept("c", json!({}));
    assert_eq!(job.run().await, TaskStatus::Completed);
    assert_eq!(job.text(), "3 steps, 3 answers");
    assert_eq!(job.runs(), 3);
}

#[tokio::test]
async fn asking_wrongly_fails_the_task_as_the_worker_does() {
    let mut job = script(|n, _| match n {
        0 => Action::Go,
        _ => Action::Ask(&["a"]),
    })
    .run(json!({}))
    .await
    .unwrap();
    job.accept("a", json!({}));
    assert_eq!(job.run().await, TaskStatus::Failed, "asked for \"a\" twice");
    assert_eq!(
        job.error().unwrap().message,
        "The job asked for input incorrectly"
    );

    let job = script(|_, _| Action::Ask(&[]))
        .run(json!({}))
        .await
        .unwrap();
    assert_eq!(job.status(), TaskStatus::Failed, "asked for nothing");
}

#[tokio::test]
async fn a_panicking_step_fails_the_task() {
    let mut job = script(|n, _| if n == 0 { Action::Go } else { Action::Panic })
        .start(json!({}))
        .await
        .unwrap();
    assert_eq!(job.step().await, Ok(Step::Continue(json!(1))));
    assert!(job.step().await.is_err());
    assert_eq!(job.status(), TaskStatus::Failed);
    assert_eq!(job.error().unwrap().message, "The job failed unexpectedly");
    assert_eq!(job.steps(), 2);
}

#[tokio::test]
async fn a_hand_over_saves_and_a_crash_does_not() {
    let kit = script(|n, _| if n < 3 { Action::Go } else { Action::Done })
        .save_every(Duration::from_secs(3600));
    let mut job = kit.start(json!({})).await.unwrap();
    job.step().await.unwrap();
    assert_eq!(job.checkpoint(), &json!(1));
    assert_eq!(job.saved_checkpoint(), &Value::Null, "not due");
    job.crash();
    assert_eq!(job.checkpoint(), &Value::Null);
    assert_eq!(job.record().interruptions, 1);
    job.step().await.unwrap();
    job.hand_over();
    assert_eq!(job.saved_checkpoint(), &json!(1));
    assert_eq!(job.run().await, TaskStatus::Completed);
    assert_eq!((job.steps(), job.runs()), (5, 3));
    assert_eq!(job.text(), "3 steps, 0 answers");
}

/// A tool whose schema names a draft the checker does not take.
struct Draft7;

#[async_trait]
impl Tool for Draft7 {
    fn def(&self) -> &ToolDef {
        static DEF: std::sync::LazyLock<ToolDef> = std::sync::LazyLock::new(|| ToolDef {
            name: "draft7",
            description: "Declares draft-07.",
            input_schema: json!({"$schema": "http://json-schema.org/draft-07/schema#",
                                 "type": "object"}),
            policy: Policy::Sync,
        });
        &DEF
    }
    async fn step(&self, _ctx: &JobContext) -> Result<Step, JobError> {
        Ok(Step::Done(text_result("never")))
    }
}

#[test]
fn a_schema_that_does_not_compile_fails_the_tools_tests_and_its_calls() {
    let panic = std::panic::catch_unwind(|| ToolKit::for_tool(Arc::new(Draft7)))
        .err()
        .expect("the kit refuses the tool");
    let message = panic.downcast_ref::<String>().expect("a message");
    assert!(
        message.contains("tool draft7: its inputSchema does not compile")
            && message.contains("is not JSON Schema 2020-12"),
        "{message}"
    );
    // On a server, every call is refused, the same way each time.
    let registry = Registry::new(vec![Arc::new(Draft7)]).checking_arguments();
    for _ in 0..2 {
        assert_eq!(
            registry.validate("draft7", &json!({})),
            Err("Tool draft7 has an invalid input schema".to_owned())
        );
    }
}
