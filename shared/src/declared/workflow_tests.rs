//! A workflow task through the tool kit, over a scripted Step Functions API: started once,
//! parked between looks, its question asked and answered, its end read without its cause, and
//! stopped when the task ends early.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::*;
use crate::declared::entry::{Limits, TargetKind, Wire};
use crate::task::TaskStatus;
use crate::tools::Policy;
use crate::tools::testkit::ToolKit;

const MACHINE: &str = "arn:aws:states:eu-west-1:123456789012:stateMachine:approve";

/// Answers each action from its own script (`DescribeExecution`, `GetExecutionHistory`) or
/// with `{}`, and keeps every call.
#[derive(Default)]
struct Scripted {
    calls: Mutex<Vec<(String, Value)>>,
    start: Mutex<VecDeque<Result<Value, StatesError>>>,
    describe: Mutex<VecDeque<Value>>,
    history: Mutex<VecDeque<Value>>,
}

#[async_trait]
impl StatesApi for Scripted {
    async fn call(
        &self,
        action: &'static str,
        body: Value,
        _timeout: Duration,
    ) -> Result<Value, StatesError> {
        self.calls
            .lock()
            .unwrap()
            .push((action.to_owned(), body.clone()));
        let pop = |q: &Mutex<VecDeque<Value>>| q.lock().unwrap().pop_front().unwrap_or(json!({}));
        match action {
            "StartExecution" => self.start.lock().unwrap().pop_front().unwrap_or_else(|| {
                Ok(json!({"executionArn": execution_arn(MACHINE, body["name"].as_str().unwrap())}))
            }),
            "DescribeExecution" => Ok(pop(&self.describe)),
            "GetExecutionHistory" => Ok(pop(&self.history)),
            _ => Ok(json!({})),
        }
    }
}

impl Scripted {
    fn actions(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(a, _)| a.clone())
            .collect()
    }
    fn body_of(&self, action: &str) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(a, _)| a == action)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

fn entry(wall: Option<Duration>) -> DeclaredEntry {
    DeclaredEntry {
        name: "approve".into(),
        title: None,
        description: "An approval workflow.".into(),
        input_schema: json!({"type": "object"}),
        policy: Policy::Optional,
        target: TargetKind::StepFunctions {
            machine: MACHINE.into(),
            poll: Duration::from_secs(10),
        },
        limits: Limits {
            step_timeout: Duration::from_secs(10),
            max_answer_bytes: 4096,
            max_retries: 2,
            max_task_wall: wall,
            pass_tenant: false,
            protocol: Wire::Step,
        },
    }
}

fn kit(api: Arc<Scripted>) -> ToolKit {
    let tool = WorkflowTool::new(&entry(None), MACHINE, Duration::from_secs(10), api);
    ToolKit::for_tool(Arc::new(tool)).client_capabilities(json!({"elicitation": {}}))
}

fn running() -> Value {
    json!({"status": "RUNNING"})
}

fn entered(state: &str) -> Value {
    json!({"events": [{"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": state}}]})
}

/// The history of a state waiting for a token with the marker in its parameters.
fn asking(token: &str) -> Value {
    let params = json!({"Entries": [{"Detail": {INPUT_MARKER: {"taskToken": token,
        "inputRequests": {"approve": {"method": "elicitation/create", "params": {
            "message": "Deploy?", "requestedSchema": {"type": "object", "properties": {}}}}}}}}]});
    json!({"events": [
        {"type": "TaskScheduled", "taskScheduledEventDetails": {"parameters": params.to_string()}},
        {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "Approve"}}
    ]})
}

#[tokio::test(start_paused = true)]
async fn a_workflow_runs_as_one_parked_execution_and_its_output_is_the_result() {
    let api = Arc::new(Scripted::default());
    api.describe.lock().unwrap().extend([
        running(),
        json!({"status": "SUCCEEDED", "output": "{\"deployed\":true}"}),
    ]);
    api.history.lock().unwrap().push_back(entered("Build"));
    let mut job = kit(api.clone())
        .start(json!({"service": "web"}))
        .await
        .unwrap();
    job.step().await.unwrap();
    let started = api.body_of("StartExecution");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["name"], "mcp-tasks-tsk_testkit");
    assert_eq!(
        started[0]["input"], r#"{"service":"web"}"#,
        "exactly the arguments"
    );
    // The first look: running, in state Build; parked for poll_seconds.
    match job.step().await.unwrap() {
        Step::Sleep(_, d) => assert_eq!(d, Duration::from_secs(10)),
        other => panic!("parked: {other:?}"),
    }
    assert_eq!(job.status_message(), Some("Workflow running: Build"));
    assert_eq!(job.run().await, TaskStatus::Completed);
    assert_eq!(
        job.result().unwrap()["structuredContent"],
        json!({"deployed": true})
    );
    assert_eq!(api.body_of("StartExecution").len(), 1, "one execution");
}

#[tokio::test(start_paused = true)]
async fn a_repeated_start_resolves_to_the_same_execution_and_failures_name_no_cause() {
    let api = Arc::new(Scripted::default());
    api.start
        .lock()
        .unwrap()
        .push_back(Err(StatesError::Refused("ExecutionAlreadyExists".into())));
    api.describe
        .lock()
        .unwrap()
        .push_back(json!({"status": "FAILED",
        "error": "Deploy.Rejected", "cause": "password=hunter2 in the workflow's own text"}));
    let mut job = kit(api.clone()).start(json!({})).await.unwrap();
    assert_eq!(job.run().await, TaskStatus::Failed);
    let described = api.body_of("DescribeExecution");
    assert_eq!(
        described[0]["executionArn"],
        "arn:aws:states:eu-west-1:123456789012:execution:approve:mcp-tasks-tsk_testkit"
    );
    let message = &job.error().unwrap().message;
    assert_eq!(
        message,
        "Tool approve failed: its workflow ended FAILED (Deploy.Rejected)"
    );
    assert!(!message.contains("hunter2"));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_state_is_a_question_and_its_answer_goes_back_with_the_token() {
    let api = Arc::new(Scripted::default());
    api.describe.lock().unwrap().extend([
        running(),
        running(),
        json!({"status": "SUCCEEDED",
        "output": "\"deployed\""}),
    ]);
    // Asked; after the answer the history still shows the same token once (not asked again).
    api.history
        .lock()
        .unwrap()
        .extend([asking("tok-1"), asking("tok-1")]);
    let mut job = kit(api.clone()).start(json!({})).await.unwrap();
    assert_eq!(job.run().await, TaskStatus::InputRequired);
    assert_eq!(
        job.input_requests()["approve"]["params"]["message"],
        "Deploy?"
    );
    job.accept("approve", json!({}));
    assert_eq!(job.run().await, TaskStatus::Completed);
    let sent = api.body_of("SendTaskSuccess");
    assert_eq!(sent.len(), 1, "{:?}", api.actions());
    assert_eq!(sent[0]["taskToken"], "tok-1");
    let output: Value = serde_json::from_str(sent[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        output,
        json!({"approve": {"action": "accept", "content": {}}})
    );
    assert_eq!(job.text(), "deployed");
}

#[tokio::test(start_paused = true)]
async fn ending_the_task_early_stops_the_execution_and_fails_its_question() {
    let api = Arc::new(Scripted::default());
    let tool = WorkflowTool::new(&entry(None), MACHINE, Duration::from_secs(10), api.clone());
    // Cancelled before its first step saved anything: the execution is found by its name.
    tool.abandon("tsk_1", &Value::Null).await;
    assert_eq!(api.actions(), ["StopExecution"]);
    assert_eq!(
        api.body_of("StopExecution")[0]["executionArn"],
        "arn:aws:states:eu-west-1:123456789012:execution:approve:mcp-tasks-tsk_1"
    );
    // Cancelled while it asks: the question's token is failed first.
    let cp = json!({"execution": "arn:x", "asked": {"token": "tok-9", "keys": ["approve"]}});
    tool.abandon("tsk_1", &cp).await;
    assert_eq!(api.actions()[1..], ["SendTaskFailure", "StopExecution"]);
    assert_eq!(api.body_of("SendTaskFailure")[0]["taskToken"], "tok-9");
}

#[tokio::test(start_paused = true)]
async fn a_workflow_past_the_tools_running_time_is_stopped() {
    let api = Arc::new(Scripted::default());
    api.describe.lock().unwrap().push_back(running());
    let tool = WorkflowTool::new(
        &entry(Some(Duration::from_secs(60))),
        MACHINE,
        Duration::from_secs(10),
        api.clone(),
    );
    let ctx = JobContext::new(
        json!({}),
        json!({"execution": "arn:x", "startedMs": 1}),
        Map::new(),
        json!({}),
        crate::jobs::ProgressSink::latest_only(),
    );
    match tool.step(&ctx).await.unwrap() {
        Step::Done(r) => assert!(
            r["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("stopped")
        ),
        other => panic!("stopped: {other:?}"),
    }
    assert_eq!(api.body_of("StopExecution")[0]["executionArn"], "arn:x");
}

#[test]
fn state_machine_arns_are_checked() {
    assert!(is_state_machine_arn(MACHINE));
    for bad in [
        "arn:aws:states:eu-west-1:123456789012:execution:approve:x",
        "arn:aws:lambda:eu-west-1:123456789012:function:approve",
        "approve",
        "arn:aws:states:eu-west-1:1234:stateMachine:approve",
    ] {
        assert!(!is_state_machine_arn(bad), "{bad}");
    }
}

/// A parked workflow task whose TTL passes before its next look: the wake-up finds it expired
/// and stops its execution, instead of leaving the workflow to run on with no task to report
/// to. Real time: expiry is a wall-clock time.
#[tokio::test]
async fn a_workflow_task_past_its_ttl_stops_its_execution_at_the_next_wake() {
    use crate::engine::{Engine, TaskSettings};
    use crate::queue::{LocalQueue, WorkKind, WorkMessage};
    use crate::store::TaskStore as _;
    use crate::store::memory::MemoryStore;
    use crate::worker::{Outcome, Worker, WorkerSettings};

    let api = Arc::new(Scripted::default());
    api.describe.lock().unwrap().push_back(running());
    let tool = WorkflowTool::new(&entry(None), MACHINE, Duration::from_secs(10), api.clone());
    let store = Arc::new(MemoryStore::new());
    let (queue, mut rx) = LocalQueue::new();
    let queue = Arc::new(queue);
    let ttl = Duration::from_millis(1500);
    let settings = TaskSettings {
        ttl_ms: Some(ttl.as_millis() as u64),
        ..TaskSettings::default()
    };
    let engine = Engine::new(store.clone(), queue.clone(), settings);
    let tools = Arc::new(crate::tools::Registry::new(vec![
        Arc::new(tool) as Arc<dyn Tool>
    ]));
    let worker = Worker::new(store.clone(), queue, tools, WorkerSettings::default());
    let task = engine
        .create_task(&"t".into(), "approve", json!({}), Value::Null, json!({}))
        .await
        .unwrap();
    let msg = rx.recv().await.unwrap();
    // Started, parked for poll_seconds.
    let out = worker.handle(&msg, None).await.unwrap();
    assert!(matches!(out, Outcome::Sleeping(_)), "{out:?}");
    let parked = store.get(msg.key()).await.unwrap().unwrap();
    assert_eq!(parked.status, TaskStatus::Working);
    assert_eq!(api.body_of("StartExecution").len(), 1);
    assert!(api.body_of("StopExecution").is_empty());
    let looks = api.body_of("DescribeExecution").len();
    // The TTL passes while it is parked.
    let expires = parked.expires_at_ms().expect("a TTL");
    while crate::clock::now_ms() < expires {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wake = WorkMessage {
        kind: WorkKind::Wake(parked.wake_seq),
        ..msg.clone()
    };
    assert_eq!(worker.handle(&wake, None).await.unwrap(), Outcome::Dropped);
    let stopped = api.body_of("StopExecution");
    assert_eq!(stopped.len(), 1, "{:?}", api.actions());
    assert_eq!(
        stopped[0]["executionArn"],
        format!(
            "arn:aws:states:eu-west-1:123456789012:execution:approve:mcp-tasks-{}",
            task.task_id
        )
    );
    assert_eq!(
        api.body_of("DescribeExecution").len(),
        looks,
        "no look after expiry"
    );
}
