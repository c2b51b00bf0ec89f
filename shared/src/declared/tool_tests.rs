//! The step protocol through the tool kit, over a scripted target: what each answer does to the
//! task, what each request carries, and how failures are retried or end the task.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::*;
use crate::declared::entry::Wire;
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
        protocol: Wire::Step,
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

/// A declared job is saved at the worker's pace (here: once a minute), not after every step:
/// after a crash the steps since the last save are asked again, the first of them saying it
/// may have run before (docs/step-protocol.md, "At least once").
#[tokio::test(start_paused = true)]
async fn a_crash_repeats_the_steps_since_the_last_save_with_a_higher_attempt() {
    let target = Scripted::with(vec![
        Ok(json!({"continue": {"checkpoint": 1}})),
        Ok(json!({"continue": {"checkpoint": 2}})),
        Ok(json!({"continue": {"checkpoint": 1}})),
        Ok(json!({"continue": {"checkpoint": 2}})),
        Ok(json!({"continue": {"checkpoint": 3}})),
        Ok(json!({"done": text("3")})),
    ]);
    let mut job = kit(target.clone(), |_| {})
        .save_every(Duration::from_secs(60))
        .start(json!({}))
        .await
        .unwrap();
    job.step().await.unwrap();
    job.step().await.unwrap();
    assert_eq!(job.saved_checkpoint(), &Value::Null, "not saved yet");
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
            (json!(null), json!(2)),
            (json!(1), json!(1)),
            (json!(2), json!(1)),
            (json!(3), json!(1)),
        ]
    );
}

/// A `done` is the tool's result and nothing else: a `resultType` or `_meta` in it cannot turn
/// a synchronous answer into a task handle or an input round.
#[tokio::test(start_paused = true)]
async fn done_sets_the_result_never_the_envelope() {
    for forged in [json!("task"), json!("input_required")] {
        let target = Scripted::with(vec![Ok(json!({"done": {
            "content": [{"type": "text", "text": "ok"}], "isError": false,
            "resultType": forged, "task": {"taskId": "tsk_fake"},
            "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "tsk_fake"}}}}))]);
        let mut job = kit(target, |_| {}).start_inline(json!({})).await.unwrap();
        assert_eq!(job.run().await, TaskStatus::Completed);
        assert_eq!(
            job.result(),
            Some(&json!({"content": [{"type": "text", "text": "ok"}], "isError": false}))
        );
    }
}

/// MCP progress only increases: a report at or below the highest so far, or below zero, is
/// dropped (its message with it), on the task lane and across a crash alike.
#[tokio::test(start_paused = true)]
async fn progress_only_goes_up() {
    let step = |p: f64| Ok(json!({"continue": {"checkpoint": p, "progress": {"progress": p}}}));
    let target = Scripted::with(vec![
        step(-5.0),
        step(50.0),
        step(90.0),
        step(10.0),
        step(10.0),
        step(95.0),
        Ok(json!({"done": text("ok")})),
    ]);
    let mut job = kit(target, |_| {}).start(json!({})).await.unwrap();
    assert_eq!(job.run().await, TaskStatus::Completed);
    let seen: Vec<f64> = job.progress().iter().map(|p| p.progress).collect();
    assert_eq!(seen, [50.0, 90.0, 95.0]);
}

/// Only answers to keys the target asked for reach it, each checked for its method's shape: a
/// first call's `inputResponses` (a synchronous call may carry them without a `requestState`)
/// are not the target's to see.
#[tokio::test(start_paused = true)]
async fn only_answers_to_asked_keys_reach_the_target() {
    let ask = json!({"input": {"checkpoint": "asked", "requests": {"confirm": {
        "method": "elicitation/create", "params": {"message": "Go?",
        "requestedSchema": {"type": "object", "properties": {}}}}}}});
    let target = Scripted::with(vec![Ok(ask), Ok(json!({"done": text("ok")}))]);
    let tool = DeclaredTool::new(&entry(|_| {}), target.clone());
    let mut sent = serde_json::Map::new();
    sent.insert("confirm".into(), json!({"action": "accept", "content": {}}));
    sent.insert("junk".into(), json!("not-an-object"));
    let ctx = |cp: Value, inputs: serde_json::Map<String, Value>| {
        JobContext::new(
            json!({}),
            cp,
            inputs,
            json!({"elicitation": {}}),
            crate::jobs::ProgressSink::latest_only(),
        )
    };
    // The first step: nothing was asked, nothing is passed.
    let Step::NeedInputAt(state, _) = tool.step(&ctx(Value::Null, sent.clone())).await.unwrap()
    else {
        panic!("an ask")
    };
    assert_eq!(target.requests()[0]["input"], json!({}));
    // The answered step: the asked key only.
    tool.step(&ctx(state.clone(), sent.clone())).await.unwrap();
    assert_eq!(
        target.requests()[1]["input"],
        json!({"confirm": {"action": "accept", "content": {}}})
    );
    // An answer of the wrong shape to an asked key is refused, not passed on.
    let mut bad = serde_json::Map::new();
    bad.insert("confirm".into(), json!({"action": "maybe"}));
    let refused = tool.step(&ctx(state, bad)).await.unwrap_err();
    assert!(
        matches!(refused, JobError::InvalidParams(ref m) if m.contains("confirm")),
        "{refused:?}"
    );
    assert_eq!(target.requests().len(), 2, "not asked again");
}

/// A checkpoint is bounded by the room a record has for it, whatever `max_answer_bytes` says,
/// so a checkpoint that passes is always saved (and one that does not fails the task here, the
/// same on both lanes, not later in the store).
#[tokio::test(start_paused = true)]
async fn a_checkpoint_over_its_bound_fails_the_task_when_it_arrives() {
    let big = "x".repeat(MAX_CHECKPOINT_BYTES);
    let target = Scripted::with(vec![Ok(json!({"continue": {"checkpoint": big}}))]);
    let mut job = kit(target, |l| l.max_answer_bytes = 256 * 1024)
        .start_inline(json!({}))
        .await
        .unwrap();
    assert_eq!(job.run().await, TaskStatus::Failed);
    assert_eq!(
        job.error().unwrap().message,
        format!(
            "Tool report failed: its target's checkpoint is larger than {MAX_CHECKPOINT_BYTES} bytes"
        )
    );
}

/// A step that timed out may still be running in its target: the next try waits at least the
/// step's timeout again, never just the first back-off.
#[tokio::test(start_paused = true)]
async fn a_timed_out_step_is_not_retried_before_its_timeout_again() {
    let target = Scripted::with(vec![Err(TargetError::Timeout)]);
    let tool = DeclaredTool::new(&entry(|_| {}), target);
    let ctx = JobContext::new(
        json!({}),
        Value::Null,
        serde_json::Map::new(),
        json!({}),
        crate::jobs::ProgressSink::latest_only(),
    );
    match tool.step(&ctx).await.unwrap() {
        Step::Sleep(_, d) => assert!(d >= Duration::from_secs(5), "{d:?}"),
        other => panic!("a retry: {other:?}"),
    }
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
