//! The step protocol through the tool kit, over a scripted target: what each answer does to the
//! task, what each request carries, and how failures are retried or end the task.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::*;
use crate::declared::manifest::{DeclaredEntry, TargetKind};
use crate::task::TaskStatus;
use crate::tools::Policy;
use crate::tools::testkit::ToolKit;

/// A target that answers from a script and keeps every request it got.
#[derive(Default)]
struct Scripted {
    answers: Mutex<VecDeque<Result<Value, TargetError>>>,
    requests: Mutex<Vec<Value>>,
}

#[async_trait]
impl Target for Scripted {
    async fn call(&self, request: Vec<u8>, _: CallLimits) -> Result<Vec<u8>, TargetError> {
        self.requests
            .lock()
            .unwrap()
            .push(serde_json::from_slice(&request).unwrap());
        let next = self.answers.lock().unwrap().pop_front();
        match next.expect("the script has an answer for every step") {
            Ok(v) => Ok(serde_json::to_vec(&v).unwrap()),
            Err(e) => Err(e),
        }
    }
}

impl Scripted {
    fn with(answers: Vec<Result<Value, TargetError>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            requests: Mutex::default(),
        })
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

fn entry(limits: impl FnOnce(&mut Limits)) -> DeclaredEntry {
    let mut l = Limits {
        step_timeout: Duration::from_secs(5),
        max_answer_bytes: 4096,
        max_retries: 2,
        max_task_wall: None,
        pass_tenant: false,
    };
    limits(&mut l);
    DeclaredEntry {
        name: "report".into(),
        title: Some("Report".into()),
        description: "Builds a report.".into(),
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
        target: TargetKind::Command {
            argv: vec!["unused".into()],
            env: vec![],
        },
        limits: l,
    }
}

fn kit(target: Arc<Scripted>, limits: impl FnOnce(&mut Limits)) -> ToolKit {
    ToolKit::for_tool(Arc::new(DeclaredTool::new(&entry(limits), target)))
}

fn text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}]})
}

#[tokio::test(start_paused = true)]
async fn a_task_goes_through_progress_a_question_and_a_result() {
    let target = Scripted::with(vec![
        Ok(json!({"continue": {"checkpoint": {"part": 1},
            "progress": {"progress": 1, "total": 2, "message": "part 1 of 2"}}})),
        Ok(
            json!({"input": {"requests": {"go": {"method": "elicitation/create",
            "params": {"message": "Send it?", "requestedSchema": {"type": "object"}}}},
            "checkpoint": {"part": 2}}}),
        ),
        Ok(json!({"done": text("sent")})),
    ]);
    let mut job = kit(target.clone(), |_| {})
        .start(json!({"month": "2026-11"}))
        .await
        .unwrap();
    assert_eq!(job.run().await, TaskStatus::InputRequired);
    assert_eq!(job.status_message(), Some("part 1 of 2"));
    assert!(job.input_requests().contains_key("go"));
    job.accept("go", json!({}));
    assert_eq!(job.run().await, TaskStatus::Completed);
    assert_eq!(job.result(), Some(&text("sent")));
    let r = target.requests();
    assert_eq!(r.len(), 3);
    assert_eq!(
        r[0],
        json!({"protocol": "mcp-tasks-step/1", "tool": "report",
               "arguments": {"month": "2026-11"}, "checkpoint": null, "input": {},
               "attempt": 1, "deadlineMs": r[0]["deadlineMs"],
               "task": {"id": "tsk_testkit"}})
    );
    assert!(r[0]["deadlineMs"].as_u64().unwrap() > crate::clock::now_ms());
    assert_eq!(r[1]["checkpoint"], json!({"part": 1}));
    // The question's own checkpoint is where the answered step starts, with the answer.
    assert_eq!(r[2]["checkpoint"], json!({"part": 2}));
    assert_eq!(r[2]["input"]["go"]["action"], "accept");
    assert_eq!(r[2]["attempt"], 1);
}

#[tokio::test(start_paused = true)]
async fn retried_failures_are_parked_and_counted_then_fail_the_task() {
    let target = Scripted::with(vec![
        Err(TargetError::Timeout),
        Err(TargetError::Status(503)),
        Ok(json!({"done": text("ok")})),
    ]);
    let mut job = kit(target.clone(), |_| {}).start(json!({})).await.unwrap();
    for _ in 0..2 {
        match job.step().await {
            Ok(Step::Sleep(_, d)) => assert!(
                (Duration::from_millis(500)..=Duration::from_secs(30)).contains(&d),
                "{d:?}"
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(job.run().await, TaskStatus::Completed);
    let attempts: Vec<Value> = target
        .requests()
        .iter()
        .map(|r| r["attempt"].clone())
        .collect();
    assert_eq!(attempts, [json!(1), json!(2), json!(3)]);

    // Out of tries: the message names the tool and the kind, never what the target said.
    let target = Scripted::with(vec![Err(TargetError::Throttled); 3]);
    let mut job = kit(target, |_| {}).start(json!({})).await.unwrap();
    assert_eq!(job.run().await, TaskStatus::Failed);
    assert_eq!(
        job.error().unwrap().message,
        "Tool report failed: its target was throttled (3 tries)"
    );
}

#[tokio::test(start_paused = true)]
async fn failures_that_cannot_improve_end_the_task_at_once() {
    for (err, says) in [
        (
            TargetError::Status(404),
            "Tool report failed: its target answered HTTP 404",
        ),
        (
            TargetError::TooLarge(4096),
            "Tool report failed: its target answered more than 4096 bytes",
        ),
        (
            TargetError::InvokeRefused("access denied"),
            "Tool report failed: its target could not be invoked (access denied)",
        ),
    ] {
        let target = Scripted::with(vec![Err(err)]);
        let mut job = kit(target.clone(), |_| {}).start(json!({})).await.unwrap();
        assert_eq!(job.run().await, TaskStatus::Failed);
        assert_eq!(job.error().unwrap().message, says);
        assert_eq!(target.requests().len(), 1, "no retry");
    }
}

#[tokio::test(start_paused = true)]
async fn bad_answers_fail_the_task_without_repeating_them() {
    for bad in [
        json!({"finished": "SECRET-XYZ"}),
        json!("SECRET-XYZ"),
        json!({"done": {"text": "SECRET-XYZ"}}),
    ] {
        let target = Scripted::with(vec![Ok(bad.clone())]);
        let mut job = kit(target, |_| {}).start(json!({})).await.unwrap();
        assert_eq!(job.run().await, TaskStatus::Failed, "{bad}");
        let msg = &job.error().unwrap().message;
        assert_eq!(
            msg,
            "Tool report failed: its target answered with something that is not an \
             mcp-tasks-step/1 answer"
        );
    }
    // An answer over the limit, even a valid one, is refused by size.
    let big = json!({"done": text(&"x".repeat(5000))});
    let mut job = kit(Scripted::with(vec![Ok(big)]), |_| {})
        .start(json!({}))
        .await
        .unwrap();
    assert_eq!(job.run().await, TaskStatus::Failed);
    assert!(
        job.error()
            .unwrap()
            .message
            .contains("more than 4096 bytes")
    );
}

#[tokio::test(start_paused = true)]
async fn error_and_failed_answers_are_the_tools_words() {
    let mut job = kit(
        Scripted::with(vec![Ok(json!({"error": "no such month"}))]),
        |_| {},
    )
    .start(json!({}))
    .await
    .unwrap();
    assert_eq!(job.run().await, TaskStatus::Completed);
    assert!(job.is_error());
    assert_eq!(job.text(), "no such month");
    let mut job = kit(
        Scripted::with(vec![Ok(json!({"failed": "upstream gone"}))]),
        |_| {},
    )
    .start(json!({}))
    .await
    .unwrap();
    assert_eq!(job.run().await, TaskStatus::Failed);
    assert_eq!(
        job.error().unwrap().message,
        "Tool report failed: upstream gone"
    );
}

/// After a crash the step in flight is asked again, and says it may have run before; the steps
/// before it are not (every step's checkpoint is saved).
#[tokio::test(start_paused = true)]
async fn a_crash_repeats_only_the_step_in_flight_with_a_higher_attempt() {
    let target = Scripted::with(vec![
        Ok(json!({"continue": {"checkpoint": 1}})),
        Ok(json!({"continue": {"checkpoint": 2}})),
        Ok(json!({"continue": {"checkpoint": 3}})),
        Ok(json!({"done": text("3")})),
    ]);
    // Even when the kit would save only once a minute, a declared tool saves every step.
    let mut job = kit(target.clone(), |_| {})
        .save_every(Duration::from_secs(60))
        .start(json!({}))
        .await
        .unwrap();
    job.step().await.unwrap();
    job.step().await.unwrap();
    job.crash();
    assert_eq!(job.run().await, TaskStatus::Completed);
    let r = target.requests();
    let seen: Vec<(Value, Value)> = r
        .iter()
        .map(|r| (r["checkpoint"].clone(), r["attempt"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (json!(null), json!(1)),
            (json!(1), json!(1)),
            (json!(2), json!(2)),
            (json!(3), json!(1)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_question_the_client_cannot_answer_fails_the_task() {
    let target = Scripted::with(vec![Ok(json!({"input": {"requests": {"k": {
        "method": "sampling/createMessage", "params": {}}}, "checkpoint": null}}))]);
    let mut job = kit(target, |_| {})
        .client_capabilities(json!({"elicitation": {}}))
        .start(json!({}))
        .await
        .unwrap();
    assert_eq!(job.run().await, TaskStatus::Failed);
    let e = job.error().unwrap();
    assert_eq!(e.code, crate::protocol::MISSING_CAPABILITY);
    assert!(e.message.contains("sampling"), "{}", e.message);
}

#[tokio::test(start_paused = true)]
async fn the_tenant_is_passed_only_when_the_entry_says_so() {
    for pass in [false, true] {
        let target = Scripted::with(vec![Ok(json!({"done": text("ok")}))]);
        let mut job = kit(target.clone(), |l| l.pass_tenant = pass)
            .start(json!({}))
            .await
            .unwrap();
        job.run().await;
        let task = &target.requests()[0]["task"];
        match pass {
            true => assert_eq!(task, &json!({"id": "tsk_testkit", "tenant": "testkit"})),
            false => assert_eq!(task, &json!({"id": "tsk_testkit"})),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_synchronous_call_has_no_task_id_and_sleeps_in_place() {
    let target = Scripted::with(vec![
        Ok(json!({"sleep": {"seconds": 2, "checkpoint": "woke"}})),
        Ok(json!({"done": text("ok")})),
    ]);
    let mut job = kit(target.clone(), |_| {})
        .start_inline(json!({}))
        .await
        .unwrap();
    assert_eq!(job.run().await, TaskStatus::Completed);
    let r = target.requests();
    assert_eq!(r[0]["task"], json!({"id": null}));
    assert_eq!(r[1]["checkpoint"], "woke");
}

#[test]
fn backoff_doubles_with_jitter_up_to_the_cap() {
    for n in 0..20 {
        let full = FIRST_BACKOFF
            .saturating_mul(1 << n.min(16))
            .min(MAX_BACKOFF);
        let b = backoff(n);
        assert!(
            b <= full && b >= full / 2 && b >= FIRST_BACKOFF / 2,
            "{n}: {b:?}"
        );
    }
}

/// A target's `remainingSeconds` is the job's estimate: clients are asked to poll less often.
#[tokio::test]
async fn a_remaining_time_reaches_the_poll_interval() {
    let target = Scripted::with(vec![Ok(json!({"continue": {"checkpoint": 1,
        "progress": {"progress": 1, "remainingSeconds": 600}}}))]);
    let tool = DeclaredTool::new(&entry(|_| {}), target);
    let ctx = JobContext::new(
        json!({}),
        Value::Null,
        serde_json::Map::new(),
        json!({}),
        crate::jobs::ProgressSink::latest_only(),
    );
    assert_eq!(ctx.remaining(), None);
    tool.step(&ctx).await.unwrap();
    assert_eq!(ctx.remaining(), Some(Duration::from_secs(600)));
}
