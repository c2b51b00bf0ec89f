use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde_json::{Value, json};

use super::*;
use crate::queue::LocalQueue;
use crate::store::memory::MemoryStore;
use crate::store::{TaskKey, TaskRef, TaskStore};
use crate::task::{Lease, TaskRecord, TaskStatus};

const SQS_EVENT: &str = include_str!("../../../../events/sqs-work-message.json");
const SCHEDULE_EVENT: &str = include_str!("../../../../events/scheduled-sweep.json");

fn env(role: Role, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(role, |k| map.get(k).cloned())
}

const BASE: [(&str, &str); 3] = [
    ("TABLE_NAME", "tasks"),
    ("QUEUE_URL", "http://127.0.0.1:1/000000000000/work"),
    ("AUTH_MODE", "none"),
];

fn worker_config(max_receives: &str) -> Config {
    let mut vars = BASE.to_vec();
    vars.push(("MAX_RECEIVES", max_receives));
    env(Role::Worker, &vars).unwrap()
}

#[test]
fn a_missing_variable_fails_the_cold_start_by_name() {
    let err = env(Role::Tasks, &[("QUEUE_URL", "q")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "environment variable TABLE_NAME is required"
    );
    assert!(matches!(
        env(Role::Mcp, &BASE),
        Err(ConfigError::Missing("STATE_KEY or STATE_KEY_SECRET_ARN"))
    ));
    assert!(matches!(
        env(Role::Worker, &BASE),
        Err(ConfigError::Missing("MAX_RECEIVES"))
    ));
    assert!(env(Role::Tasks, &BASE).is_ok());
    assert!(env(Role::Sweep, &BASE).is_ok());
}

#[test]
fn malformed_variables_are_refused_without_echoing_them() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "short-secret"));
    let err = env(Role::Mcp, &vars).unwrap_err().to_string();
    assert!(!err.contains("short-secret"), "{err}");
    for (k, v) in [
        ("MAX_RECEIVES", "0"),
        ("SWEEP_STALE_SECONDS", "soon"),
        ("TASK_TTL_SECONDS", "59"),
        ("TASK_TTL_SECONDS", "31536001"),
        ("TASK_TTL_SECONDS", "1d"),
        ("METRICS_TENANTS", "1001"),
        ("METRICS_TENANTS", "-1"),
        ("METRICS_TENANTS", "all"),
    ] {
        let mut vars = BASE.to_vec();
        vars.push((k, v));
        assert!(
            matches!(env(Role::Sweep, &vars), Err(ConfigError::Invalid { name, .. }) if name == k),
            "{k}={v}"
        );
    }
}

#[test]
fn optional_variables_have_gateway_friendly_defaults() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let c = env(Role::Mcp, &vars).unwrap();
    assert!(c.allowed_hosts.is_empty(), "behind API Gateway any host");
    assert_eq!(c.tools_manifest, None);
    assert!(c.tool_target_functions.is_empty());
    assert!(c.state_key.is_some());
    assert!(!format!("{c:?}").contains("0123456789abcdef"));
    assert_eq!(c.tasks.ttl_ms, Some(24 * 3600 * 1000));
    vars.push(("ALLOWED_HOSTS", " mcp.example.com, ,api.example.com "));
    vars.push(("TASK_TTL_SECONDS", "3600"));
    let c = env(Role::Mcp, &vars).unwrap();
    assert_eq!(c.allowed_hosts, ["mcp.example.com", "api.example.com"]);
    assert_eq!(c.tasks.ttl_ms, Some(3600 * 1000));
}

const SECRET_ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:state-key-AbCdEf";

/// The deployed mcp function names its key's secret, not the key: nothing is read until
/// `fetch_secrets`, and the key and the secret together are refused (which one counts would
/// be a guess).
#[test]
fn the_state_key_comes_from_the_environment_or_a_secret_never_both() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY_SECRET_ARN", SECRET_ARN));
    let c = env(Role::Mcp, &vars).unwrap();
    assert_eq!(c.state_key, None, "not fetched yet");
    assert_eq!(
        c.state_key_secret,
        Some(SecretRef {
            arn: SECRET_ARN.into(),
            version: None
        })
    );
    vars.push((
        "STATE_KEY_SECRET_VERSION",
        "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE",
    ));
    let c = env(Role::Mcp, &vars).unwrap();
    assert_eq!(
        c.state_key_secret.unwrap().version.as_deref(),
        Some("EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE")
    );
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let err = env(Role::Mcp, &vars).unwrap_err().to_string();
    assert!(err.contains("not both"), "{err}");
    assert!(!err.contains("0123456789abcdef"), "{err}");
}

/// An SDK configuration whose every endpoint is `endpoint`.
async fn sdk_at(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(crate::aws::https_client())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(endpoint)
        .load()
        .await
}

/// A stand-in Secrets Manager that answers every request with `body` (status 200).
async fn secrets_stand_in(body: &'static str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The SDK's request fits one read on loopback; the answer closes the connection.
                let mut buf = [0u8; 8192];
                let _ = socket.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.1\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

/// The key read from the secret is the key the same text in `STATE_KEY` gives (a stack
/// upgraded from the environment variable keeps opening the `requestState`s it sealed), and a
/// secret too short is refused without its value.
#[tokio::test]
async fn a_fetched_state_key_is_the_key_the_same_text_gives_and_a_short_one_is_refused() {
    let key = "0123456789abcdef0123456789abcdef-from-the-secret";
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", key));
    let from_env = env(Role::Mcp, &vars).unwrap().state_key;

    let url = secrets_stand_in(
        r#"{"ARN":"a","Name":"n","SecretString":"0123456789abcdef0123456789abcdef-from-the-secret"}"#,
    )
    .await;
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY_SECRET_ARN", SECRET_ARN));
    let c = env(Role::Mcp, &vars)
        .unwrap()
        .fetch_secrets(&sdk_at(&url).await)
        .await
        .unwrap();
    assert!(from_env.is_some());
    assert_eq!(c.state_key, from_env);
    assert_eq!(c.state_key_secret, None, "read, and not kept");

    let url = secrets_stand_in(r#"{"ARN":"a","Name":"n","SecretString":"short-secret"}"#).await;
    let err = env(Role::Mcp, &vars)
        .unwrap()
        .fetch_secrets(&sdk_at(&url).await)
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains("STATE_KEY_SECRET_ARN"), "{text}");
    assert!(!text.contains("short-secret"), "{text}");
}

/// Without a secret named, nothing is fetched: the SDK's endpoint here is a closed port, so
/// any call would fail.
#[tokio::test]
async fn no_secret_named_no_call() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let c = env(Role::Mcp, &vars).unwrap();
    let key = c.state_key;
    let c = c
        .fetch_secrets(&sdk_at("http://127.0.0.1:1").await)
        .await
        .unwrap();
    assert_eq!(c.state_key, key);
    let c = env(Role::Tasks, &BASE).unwrap();
    assert_eq!(
        c.fetch_secrets(&sdk_at("http://127.0.0.1:1").await)
            .await
            .unwrap()
            .state_key,
        None
    );
}

#[test]
fn the_retry_policy_never_polls_forever_and_never_kills_a_live_run() {
    let busy = Ok(Outcome::Busy(Duration::from_secs(3)));
    let waiting = WorkMessage {
        tenant: "t".into(),
        task_id: "tsk_1".into(),
        kind: crate::queue::WorkKind::Start,
    };
    let err: Result<Outcome, WorkerError> = Err(StoreError::backend("down").into());
    assert_eq!(decide(&busy, false), Action::Retry);
    assert_eq!(decide(&busy, true), Action::Done);
    assert_eq!(decide(&err, false), Action::Retry);
    assert_eq!(decide(&err, true), Action::GiveUp);
    // A saved, handed-over job whose continuation could not be sent is never failed.
    let lost_continuation: Result<Outcome, WorkerError> =
        Err(crate::queue::QueueError::new("down").into());
    assert_eq!(decide(&lost_continuation, true), Action::Retry);
    assert_eq!(
        decide(
            &Ok(Outcome::Deferred(waiting, Duration::from_secs(5))),
            true
        ),
        Action::Done
    );
    for o in [
        Outcome::Dropped,
        Outcome::Continued,
        Outcome::Superseded,
        Outcome::WaitingForInput,
        Outcome::Finished(TaskStatus::Completed),
    ] {
        assert_eq!(decide(&Ok(o.clone()), false), Action::Done, "{o:?}");
        assert_eq!(decide(&Ok(o), true), Action::Done);
    }
}

/// A store whose first `fail_gets` reads fail (an outage that passes), and whose active
/// listing fails while `fail_listing` is set.
struct Flaky {
    inner: MemoryStore,
    fail_gets: AtomicUsize,
    fail_listing: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl TaskStore for Flaky {
    async fn create_within(
        &self,
        task: &TaskRecord,
        args: &Value,
        max: usize,
    ) -> Result<bool, StoreError> {
        self.inner.create_within(task, args, max).await
    }
    async fn arguments(&self, id: TaskRef<'_>) -> Result<Option<Value>, StoreError> {
        self.inner.arguments(id).await
    }
    async fn get(&self, id: TaskRef<'_>) -> Result<Option<TaskRecord>, StoreError> {
        if self
            .fail_gets
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StoreError::backend("throttled"));
        }
        self.inner.get(id).await
    }
    async fn update(&self, task: &TaskRecord) -> Result<u64, StoreError> {
        self.inner.update(task).await
    }
    async fn list_active(
        &self,
        after: Option<&TaskKey>,
        limit: usize,
    ) -> Result<Vec<TaskKey>, StoreError> {
        if self.fail_listing.load(Ordering::SeqCst) {
            return Err(StoreError::backend("index unavailable"));
        }
        self.inner.list_active(after, limit).await
    }
    async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
        self.inner.list_expired(now, limit).await
    }
    async fn delete(&self, id: TaskRef<'_>) -> Result<(), StoreError> {
        self.inner.delete(id).await
    }
}

struct Rig {
    store: Arc<Flaky>,
    ports: Ports,
    _rx: tokio::sync::mpsc::UnboundedReceiver<WorkMessage>,
}

fn rig() -> Rig {
    let store = Arc::new(Flaky {
        inner: MemoryStore::new(),
        fail_gets: AtomicUsize::new(0),
        fail_listing: Default::default(),
    });
    let (queue, rx) = LocalQueue::new();
    let ports = Ports {
        store: store.clone(),
        queue: Arc::new(queue),
        run_slots: None,
    };
    Rig {
        store,
        ports,
        _rx: rx,
    }
}

/// The worker's tools: the `wait` double (the sample event's task is a `wait`).
fn wait_tools() -> Arc<crate::tools::Registry> {
    Arc::new(crate::tools::Registry::new(vec![
        crate::tools::doubles::wait(),
    ]))
}

/// The task the sample event names, stored as `mcp` would have stored it.
async fn seed(r: &Rig, msg: &WorkMessage) {
    let task = TaskRecord::new(
        &msg.tenant,
        msg.task_id.clone(),
        "wait",
        Some(3_600_000),
        1000,
        json!({}),
    );
    r.store.create(&task, &json!({"seconds": 0})).await.unwrap();
}

fn sample() -> (SqsEvent, WorkMessage) {
    let event: SqsEvent = serde_json::from_str(SQS_EVENT).unwrap();
    let msg = serde_json::from_str(event.records[0].body.as_deref().unwrap()).unwrap();
    (event, msg)
}

fn with_receives(mut event: SqsEvent, n: u32) -> SqsEvent {
    event.records[0]
        .attributes
        .insert("ApproximateReceiveCount".into(), n.to_string());
    event
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

async fn status(r: &Rig, msg: &WorkMessage) -> TaskRecord {
    r.store.get(msg.key()).await.unwrap().unwrap()
}

#[tokio::test]
async fn the_sample_sqs_event_runs_its_task_to_completion() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let worker = SqsWorker::new(&worker_config("5"), &r.ports, wait_tools());
    let out = worker.handle(event, soon()).await;
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Completed);
    // The response is what the runtime sends back.
    assert_eq!(
        serde_json::to_value(&out).unwrap(),
        json!({"batchItemFailures": []})
    );
}

#[tokio::test]
async fn a_store_outage_retries_the_message_until_its_last_delivery() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let worker = SqsWorker::new(&worker_config("3"), &r.ports, wait_tools());
    r.store.fail_gets.store(1, Ordering::SeqCst);
    let out = worker.handle(with_receives(event.clone(), 2), soon()).await;
    let ids: Vec<_> = out
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, [event.records[0].message_id.as_deref().unwrap()]);
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Working);

    // The last delivery fails too: the task is failed and the message deleted.
    r.store.fail_gets.store(1, Ordering::SeqCst);
    let out = worker.handle(with_receives(event, 3), soon()).await;
    assert!(out.batch_item_failures.is_empty());
    let t = status(&r, &msg).await;
    assert_eq!(t.status, TaskStatus::Failed);
    assert!(t.error.is_some());
}

#[tokio::test]
async fn when_even_giving_up_fails_the_message_goes_to_the_dlq() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let worker = SqsWorker::new(&worker_config("3"), &r.ports, wait_tools());
    r.store.fail_gets.store(2, Ordering::SeqCst);
    let out = worker.handle(with_receives(event, 3), soon()).await;
    assert_eq!(out.batch_item_failures.len(), 1);
}

#[tokio::test]
async fn a_message_for_a_task_held_by_a_live_run_is_retried_then_dropped() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let mut t = status(&r, &msg).await;
    t.lease = Some(Lease {
        owner: "alive".into(),
        expires_at_ms: crate::clock::now_ms() + 60_000,
    });
    r.store.update(&t).await.unwrap();
    let worker = SqsWorker::new(&worker_config("3"), &r.ports, wait_tools());
    let out = worker.handle(with_receives(event.clone(), 1), soon()).await;
    assert_eq!(out.batch_item_failures.len(), 1);
    let out = worker.handle(with_receives(event, 3), soon()).await;
    assert!(out.batch_item_failures.is_empty());
    assert_eq!(
        status(&r, &msg).await.status,
        TaskStatus::Working,
        "the live run keeps its task"
    );
}

#[tokio::test]
async fn an_unreadable_record_fails_alone_not_the_batch() {
    let r = rig();
    let (event, msg) = sample();
    seed(&r, &msg).await;
    let mut bad = event.records[0].clone();
    bad.message_id = Some("bad-1".into());
    bad.body = Some("not json".into());
    let mut event = event;
    event.records.push(bad);
    let worker = SqsWorker::new(&worker_config("5"), &r.ports, wait_tools());
    let out = worker.handle(event, soon()).await;
    let ids: Vec<_> = out
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(ids, ["bad-1"]);
    assert_eq!(status(&r, &msg).await.status, TaskStatus::Completed);
}

#[tokio::test]
async fn the_sample_schedule_event_parses_and_a_sweep_requeues_orphans() {
    let event: EventBridgeEvent<Value> = serde_json::from_str(SCHEDULE_EVENT).unwrap();
    assert_eq!(event.detail_type, "Scheduled Event");
    let mut r = rig();
    let (_, msg) = sample();
    seed(&r, &msg).await; // persisted, never enqueued: an orphan
    let config = Config {
        sweep_stale: Duration::ZERO,
        ..env(Role::Sweep, &BASE).unwrap()
    };
    let report = Sweeper::new(&config, &r.ports).run(None).await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            requeued: 1,
            read: 1,
            complete: true,
            ..SweepReport::default()
        }
    );
    assert_eq!(r._rx.recv().await.unwrap().task_id, msg.task_id);
}

#[tokio::test]
async fn the_purge_runs_when_the_orphan_sweep_fails() {
    let r = rig();
    let mut expired = TaskRecord::new("t", "tsk_x".into(), "wait", Some(1000), 1000, json!({}));
    expired.created_at_ms = crate::clock::now_ms() - 60_000;
    r.store.create(&expired, &json!({})).await.unwrap();
    r.store.fail_listing.store(true, Ordering::SeqCst);
    let config = env(Role::Sweep, &BASE).unwrap();
    let out = Sweeper::new(&config, &r.ports).run(None).await;
    assert!(out.is_err(), "the failed half is reported");
    assert_eq!(
        r.store.get(expired.key()).await.unwrap(),
        None,
        "purged all the same"
    );
}

#[test]
fn a_worker_given_a_past_deadline_gets_lambdas_longest() {
    let past = SystemTime::now() - Duration::from_secs(5);
    let d = worker_deadline(past);
    assert!(d > Instant::now() + Duration::from_secs(890), "{d:?}");
    let soon = SystemTime::now() + Duration::from_secs(30);
    assert!(worker_deadline(soon) <= Instant::now() + Duration::from_secs(30));
}

#[test]
fn past_deadlines_are_the_functions_deployed_timeout() {
    let past = SystemTime::now() - Duration::from_secs(10);
    assert!(instant_at(past) <= Instant::now());
    // The local emulated runtime's past deadline: the tasks function gets its 10 s, not none.
    let d = request_deadline(past, Role::Tasks);
    assert!(d > Instant::now() + Duration::from_secs(9), "{d:?}");
    assert!(d <= Instant::now() + Duration::from_secs(10), "{d:?}");
    let soon = SystemTime::now() + Duration::from_secs(3);
    assert!(request_deadline(soon, Role::Tasks) <= Instant::now() + Duration::from_secs(3));
    let future = SystemTime::now() + Duration::from_secs(10);
    assert!(instant_at(future) > Instant::now() + Duration::from_secs(9));
}

/// Each role's fallback timeout is the `Timeout` template.yaml deploys the function with, and
/// the worker's batch is the event source mapping's.
#[test]
fn deployed_timeouts_are_the_templates() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml");
    for (resource, role) in [
        ("McpFunction", Role::Mcp),
        ("TasksFunction", Role::Tasks),
        ("WorkerFunction", Role::Worker),
        ("SweepFunction", Role::Sweep),
    ] {
        let head = format!("\n  {resource}:\n");
        let block = &text[text.find(&head).expect(resource) + head.len()..];
        let line = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("Timeout:"))
            .unwrap_or_else(|| panic!("{resource} has a Timeout"));
        let secs: u64 = line.split('#').next().unwrap().trim().parse().unwrap();
        assert_eq!(
            role.deployed_timeout(),
            Duration::from_secs(secs),
            "{resource}"
        );
    }
    let batch = format!("BatchSize: {}\n", super::worker::BATCH_SIZE);
    assert!(text.contains(&batch), "the event source mapping's {batch}");
}

#[test]
fn http_functions_are_authenticated_unless_open_access_is_chosen() {
    let base = [
        ("TABLE_NAME", "tasks"),
        ("QUEUE_URL", "q"),
        ("STATE_KEY", "a-test-key-of-at-least-32-characters"),
    ];
    assert!(matches!(
        env(Role::Mcp, &base),
        Err(ConfigError::Missing("AUTH_ISSUER"))
    ));
    let mut jwt = base.to_vec();
    jwt.extend([
        ("AUTH_ISSUER", "https://issuer.example"),
        ("AUTH_AUDIENCE", "https://mcp.example/mcp"),
        ("AUTH_JWKS_URL", "https://issuer.example/jwks.json"),
        ("AUTH_REQUIRED_SCOPES", "tasks:read tasks:write"),
    ]);
    let auth = env(Role::Tasks, &jwt).unwrap().auth.unwrap();
    assert_eq!(auth.tenant_claim, "sub");
    assert_eq!(auth.required_scopes, ["tasks:read", "tasks:write"]);
    let mut open = base.to_vec();
    open.push(("AUTH_MODE", "none"));
    assert!(env(Role::Mcp, &open).unwrap().auth.is_none());
    let mut bad = base.to_vec();
    bad.push(("AUTH_MODE", "maybe"));
    assert!(env(Role::Mcp, &bad).is_err());
    // Workers never read tokens.
    let mut worker = base.to_vec();
    worker.push(("MAX_RECEIVES", "3"));
    assert!(env(Role::Worker, &worker).unwrap().auth.is_none());
}

/// The mcp function runs a synchronous call's tool only in a running place of its tenant, in
/// the record every worker shares: with the tenant's one place held by a job, the call waits
/// out its budget and answers the quota refusal; with it free, the tool runs.
#[tokio::test]
async fn an_inline_call_of_the_mcp_function_takes_a_place_in_the_shared_record() {
    let mut vars = BASE.to_vec();
    vars.extend([
        ("STATE_KEY", "a-test-key-of-at-least-32-characters"),
        ("MAX_RUNNING_JOBS_PER_TENANT", "1"),
    ]);
    let config = env(Role::Mcp, &vars).unwrap();
    let (ports, _rx) = Ports::in_memory();
    let slots = ports.run_slots.clone().unwrap();
    let far = crate::clock::now_ms() + 60_000;
    assert!(slots.take("local", "a-job", 1, far).await.unwrap());
    let tools = crate::app::serving_registry(vec![crate::tools::doubles::wait()]);
    let service = super::service(&config, &ports, tools);
    let call = || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "wait", "arguments": {"seconds": 0},
            "_meta": {"io.modelcontextprotocol/protocolVersion": crate::protocol::PROTOCOL_VERSION,
                      "io.modelcontextprotocol/clientCapabilities": {}}}});
        let mut headers = http::HeaderMap::new();
        for (k, v) in [
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-protocol-version", crate::protocol::PROTOCOL_VERSION),
            ("mcp-method", "tools/call"),
            ("mcp-name", "wait"),
        ] {
            headers.insert(k, http::HeaderValue::from_static(v));
        }
        crate::handler::HttpRequest {
            method: http::Method::POST,
            path: "/mcp".into(),
            headers,
            body: bytes::Bytes::from(serde_json::to_vec(&body).unwrap()),
        }
    };
    // An invocation with 2.5 s left: the call's budget is half a second.
    let answer = || async {
        let deadline = Some(Instant::now() + Duration::from_millis(2500));
        match crate::clock::within_deadline(deadline, service.handle(call()))
            .await
            .body
        {
            crate::handler::ReplyBody::Json(v) => v,
            _ => panic!("one JSON body"),
        }
    };
    let refused = answer().await;
    let quota = &refused["result"]["_meta"][crate::quota::QUOTA_META];
    assert_eq!(quota["limit"], "running_jobs", "{refused}");
    slots.release("local", "a-job").await.unwrap();
    let ran = answer().await;
    assert_eq!(ran["result"]["content"][0]["text"], "Waited.", "{ran}");
    // Given back: the job takes its place again.
    assert!(slots.take("local", "a-job", 1, far).await.unwrap());
}
