//! What a running job writes, and when its running-time limit stops it: declared tools are
//! paced like Rust tools, a large record is written less often, and every kind of answer that
//! goes on is held to the limit.

use std::sync::Mutex;

use super::*;
use crate::declared::entry::{DeclaredEntry, Limits, TargetKind, Wire};
use crate::declared::{CallLimits, DeclaredTool, Target, TargetError};

/// A target that answers each step with what `answer` makes of the step's number, taking
/// `step` (virtual time) to do it.
struct Answers {
    step: Duration,
    answer: Box<dyn Fn(u64) -> Value + Send + Sync>,
    calls: Mutex<u64>,
}

#[async_trait]
impl Target for Answers {
    async fn call(&self, _request: Vec<u8>, _: CallLimits) -> Result<Vec<u8>, TargetError> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            *calls += 1;
            *calls
        };
        tokio::time::sleep(self.step).await;
        Ok(serde_json::to_vec(&(self.answer)(n)).unwrap())
    }
}

fn declared(target: Arc<Answers>, wall: Option<Duration>) -> Arc<dyn Tool> {
    let entry = DeclaredEntry {
        name: "declared".into(),
        title: None,
        description: "a declared tool".into(),
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
        target: TargetKind::Command {
            argv: vec!["unused".into()],
            env: vec![],
        },
        limits: Limits {
            step_timeout: Duration::from_secs(60),
            max_answer_bytes: crate::declared::step_protocol::MAX_ANSWER_BYTES,
            max_retries: 0,
            max_task_wall: wall,
            pass_tenant: false,
            protocol: Wire::Step,
        },
    };
    Arc::new(DeclaredTool::new(&entry, target))
}

/// A worker with the default cadence (one save a second at most) over a store that counts its
/// writes, running `tool`; the task's first message.
async fn counted(
    tool: Arc<dyn Tool>,
) -> (
    Arc<HangsAfter>,
    Worker,
    WorkMessage,
    tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
) {
    let store = Arc::new(HangsAfter {
        reads: AtomicUsize::new(0),
        inner: MemoryStore::new(),
        ok: usize::MAX,
        writes: AtomicUsize::new(0),
    });
    let (queue, mut rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let name = tool.def().name;
    let tools = Arc::new(Registry::new(vec![tool]));
    let engine = Engine::new(store.clone(), queue.clone(), TaskSettings::default());
    let settings = WorkerSettings {
        lease: Duration::from_secs(30),
        ..WorkerSettings::default()
    };
    let worker = Worker::new(store.clone(), queue, tools, settings);
    engine
        .create_task(&"t".into(), name, json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    (store, worker, msg, rx)
}

/// A declared target that answers `continue` at once (1 ms a step) used to have its task
/// written after every step; it is written at the worker's pace, as a Rust tool's is.
#[tokio::test(start_paused = true)]
async fn a_fast_declared_job_is_written_at_most_about_once_a_second() {
    let target = Arc::new(Answers {
        step: Duration::from_millis(1),
        answer: Box::new(|n| match n {
            3000.. => json!({"done": {"content": [{"type": "text", "text": "done"}]}}),
            _ => json!({"continue": {"checkpoint": {"n": n}}}),
        }),
        calls: Mutex::default(),
    });
    let (store, worker, msg, _rx) = counted(declared(target.clone(), None)).await;
    let started = Instant::now();
    let out = worker.handle(&msg, None).await.unwrap();
    assert_eq!(out, Outcome::Finished(TaskStatus::Completed));
    let secs = started.elapsed().as_secs_f64();
    let writes = store.writes.load(Ordering::SeqCst);
    assert!(secs >= 3.0, "3000 steps of 1 ms: {secs}");
    // The lease, one save a second, the end.
    assert!(
        writes as f64 <= secs + 3.0,
        "{writes} writes in {secs:.1} s of 3000 steps"
    );
}

/// A record of 40 KB is saved every ten seconds (four kilobytes a second), not every second.
#[tokio::test(start_paused = true)]
async fn a_large_checkpoint_is_saved_less_often() {
    let pad = "x".repeat(40 * 1024);
    let target = Arc::new(Answers {
        step: Duration::from_millis(10),
        answer: Box::new(move |n| match n {
            3000.. => json!({"done": {"content": [{"type": "text", "text": "done"}]}}),
            _ => json!({"continue": {"checkpoint": {"n": n, "pad": pad}}}),
        }),
        calls: Mutex::default(),
    });
    let (store, worker, msg, _rx) = counted(declared(target, None)).await;
    let started = Instant::now();
    assert_eq!(
        worker.handle(&msg, None).await.unwrap(),
        Outcome::Finished(TaskStatus::Completed)
    );
    let secs = started.elapsed().as_secs_f64();
    let writes = store.writes.load(Ordering::SeqCst);
    assert!(secs >= 30.0, "{secs}");
    assert!(
        (writes as f64) <= secs / 10.0 + 3.0,
        "{writes} writes of a 40 KB record in {secs:.1} s"
    );
    assert!(writes >= 3, "still saved while running: {writes}");
}

/// A tool's own running-time limit (`max_task_seconds`) holds for an answer that sleeps as
/// for one that goes on: a 31 s step answering `sleep 1` under a 1 s limit is stopped after
/// that step, not given a second one (the server's 60 s grace is for claimed jobs only).
#[tokio::test(start_paused = true)]
async fn a_sleep_does_not_escape_the_running_time_limit() {
    for answer in [
        json!({"sleep": {"seconds": 1, "checkpoint": {}}}),
        json!({"sleep": {"seconds": 0.2, "checkpoint": {}}}),
        json!({"continue": {"checkpoint": {}}}),
    ] {
        let target = Arc::new(Answers {
            step: Duration::from_secs(31),
            answer: Box::new({
                let answer = answer.clone();
                move |_| answer.clone()
            }),
            calls: Mutex::default(),
        });
        let tool = declared(target.clone(), Some(Duration::from_secs(1)));
        let (store, worker, msg, _rx) = counted(tool).await;
        let out = worker.handle(&msg, None).await.unwrap();
        // Stopped at the answer, not parked to be woken for another step.
        assert_eq!(out, Outcome::Finished(TaskStatus::Completed), "{answer}");
        let task = store.inner.get(msg.key()).await.unwrap().unwrap();
        let text = task.result.as_ref().unwrap()["content"][0]["text"].to_string();
        assert!(text.contains("The job was stopped"), "{text}");
        assert_eq!(*target.calls.lock().unwrap(), 1, "one step, not two");
    }
}
