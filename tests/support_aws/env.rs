//! [`Env`]: the four functions, their front, queue feed and counters, wired together.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use axum::Router;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::sqs::SqsQueue;
use mcp_tasks_core::task::TaskRef;
use mcp_tasks_core::tenant::Tenant;
use serde_json::Value;
use tokio::task::JoinHandle;

use super::binaries::binaries;
use super::esm::{EsmStats, esm};
use super::gateway::{Front, gateway};
use super::net::serve;
use super::proxy::{Counts, DYNAMO_READS, DYNAMO_WRITES, Proxy, forward, granted_actions};
use super::runtime::{RuntimeApi, pipe_lines};
use super::xray::xray_daemon;

/// The scheduled event the sweep is invoked with.
const SCHEDULE_EVENT: &str = include_str!("../../events/scheduled-sweep.json");
/// The sweep function's `Timeout` in template.yaml.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(60);

/// Choices a test makes.
#[derive(Clone, Copy)]
pub struct Options {
    /// The worker function's timeout: every worker invocation's deadline is this far away.
    pub worker_timeout: Duration,
    /// `SWEEP_STALE_SECONDS` of the sweep function.
    pub sweep_stale_seconds: u64,
    /// Whether the mcp API's integration streams, as template.yaml deploys it (the default):
    /// the mcp function runs with `RESPONSE_STREAMING=true` and a 900 s timeout, and the front
    /// passes its streamed answers on as they arrive. `false`: the buffered integration (the
    /// 29 s integration timeout, a 30 s function, whole answers).
    pub streaming: bool,
    /// `STREAM_SECONDS` of the mcp function when streaming (`None`: its default, 840).
    pub stream_seconds: Option<u64>,
    /// Every function is handed a deadline already past, as under `cargo lambda watch` (the
    /// local serverless run); each invocation is still stopped at its real timeout.
    pub past_deadlines: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            worker_timeout: Duration::from_secs(4),
            sweep_stale_seconds: 1,
            streaming: true,
            stream_seconds: None,
            past_deadlines: false,
        }
    }
}

/// A function, its binary and the environment it was started with.
type Spawned = (&'static str, PathBuf, Vec<(String, String)>);

/// The four functions, their front, queue feed and counters, over a fresh table and queue.
pub struct Env {
    pub test: String,
    pub table: String,
    pub queue_url: String,
    /// The API Gateway front's MCP endpoint (`http://127.0.0.1:port/mcp`).
    pub url: String,
    pub dynamo: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub counts: Arc<Counts>,
    pub esm: Arc<Mutex<EsmStats>>,
    pub mcp: Arc<RuntimeApi>,
    pub tasks: Arc<RuntimeApi>,
    pub worker: Arc<RuntimeApi>,
    pub sweep: Arc<RuntimeApi>,
    children: Vec<(&'static str, Child)>,
    /// How each function was started (its binary and environment), to start it again.
    spawns: Vec<Spawned>,
    background: Vec<JoinHandle<()>>,
    log: Arc<Mutex<String>>,
    /// What the functions sent to the X-Ray daemon (`AWS_XRAY_DAEMON_ADDRESS`), a datagram
    /// each.
    xray: Arc<Mutex<Vec<String>>>,
    started: Instant,
}

impl Env {
    /// Starts everything, or returns `None` after the loud SKIPPED line when the emulator
    /// endpoints are not set (a failure with `REQUIRE_EMULATORS`).
    pub async fn start(test: &str, options: Options) -> Option<Env> {
        Self::start_with(test, options, &[]).await
    }

    /// [`Env::start`], with `extra` variables (function, name, value) set after the harness's
    /// own (a later value wins).
    pub async fn start_with(
        test: &str,
        options: Options,
        extra: &[(&str, &str, String)],
    ) -> Option<Env> {
        let [dynamo_endpoint, sqs_endpoint] = crate::common::endpoints(
            "aws_functions",
            [crate::common::DYNAMODB, crate::common::SQS],
        )?;
        let bins = tokio::task::spawn_blocking(binaries).await.unwrap();
        let started = Instant::now();

        // The table and the queue, with the project's own code.
        let dynamo =
            aws_sdk_dynamodb::Client::new(&crate::common::sdk_config(&dynamo_endpoint).await);
        let sqs = aws_sdk_sqs::Client::new(&crate::common::sdk_config(&sqs_endpoint).await);
        let table = crate::common::unique("fn-tasks");
        create_table(&dynamo, &table)
            .await
            .expect("creating the table");
        let queue_url = SqsQueue::create_queue(&sqs, &crate::common::unique("fn-work"))
            .await
            .expect("creating the queue");
        // As on AWS, the queue's visibility timeout is at least the worker's timeout; short, so
        // that a failed batch comes back soon.
        let visibility = options.worker_timeout.as_secs().max(1) + 2;
        sqs.set_queue_attributes()
            .queue_url(&queue_url)
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                visibility.to_string(),
            )
            .send()
            .await
            .expect("setting the visibility timeout");

        let counts = Arc::new(Counts::default());
        let log = Arc::new(Mutex::new(String::new()));
        let mut background = Vec::new();
        // The X-Ray daemon Lambda runs beside a function with active tracing: here a UDP
        // socket that keeps every datagram.
        let (xray_addr, xray, daemon) = xray_daemon().await;
        background.push(daemon);
        let mut children = Vec::new();
        let mut spawns = Vec::new();
        let mut apis = Vec::new();
        let http = reqwest::Client::new();
        for (who, exe) in [
            ("mcp", &bins.mcp),
            ("tasks", &bins.tasks),
            ("worker", &bins.worker),
            ("sweep", &bins.sweep),
        ] {
            let (proxy_url, proxy) =
                serve(Router::new().fallback(forward).with_state(Arc::new(Proxy {
                    who,
                    dynamo: dynamo_endpoint.clone(),
                    sqs: sqs_endpoint.clone(),
                    http: http.clone(),
                    counts: counts.clone(),
                })))
                .await;
            background.push(proxy);
            let (api, server) = RuntimeApi::start(who).await;
            api.past_deadlines
                .store(options.past_deadlines, Ordering::Relaxed);
            background.push(server);
            let mut cmd = Command::new(exe);
            cmd.env_clear()
                .env("AWS_LAMBDA_FUNCTION_NAME", who)
                .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
                .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
                .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{who}"))
                .env("AWS_LAMBDA_LOG_STREAM_NAME", "local/[$LATEST]0")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_DEFAULT_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("AWS_EC2_METADATA_DISABLED", "true")
                .env("AWS_ENDPOINT_URL", &proxy_url)
                .env("RUST_LOG", "info")
                // What Lambda sets with the template's `LoggingConfig: {LogFormat: JSON}`.
                .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
                .env("AWS_LAMBDA_LOG_LEVEL", "INFO")
                .env("NO_COLOR", "1")
                .env("TABLE_NAME", &table)
                .env("QUEUE_URL", &queue_url)
                .env("TOOLS", "builtin")
                .env("AWS_XRAY_DAEMON_ADDRESS", &xray_addr);
            match who {
                "mcp" | "tasks" => {
                    cmd.env("AUTH_MODE", "none")
                        .env("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true");
                    if who == "mcp" {
                        cmd.env("STATE_KEY", "an-aws-functions-test-key-of-32-characters");
                        if options.streaming {
                            cmd.env("RESPONSE_STREAMING", "true");
                            if let Some(s) = options.stream_seconds {
                                cmd.env("STREAM_SECONDS", s.to_string());
                            }
                        }
                    }
                }
                "worker" => {
                    cmd.env("MAX_RECEIVES", "5");
                }
                _ => {
                    cmd.env(
                        "SWEEP_STALE_SECONDS",
                        options.sweep_stale_seconds.to_string(),
                    );
                }
            }
            for (_, k, v) in extra.iter().filter(|(w, ..)| *w == who) {
                cmd.env(k, v);
            }
            let env: Vec<(String, String)> = cmd
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
                .collect();
            children.push((who, spawn(who, exe, &env, &api, &log)));
            spawns.push((who, exe.clone(), env));
            apis.push(api);
        }
        let [mcp, tasks, worker, sweep]: [Arc<RuntimeApi>; 4] = apis.try_into().ok().unwrap();

        let front = Arc::new(Front {
            mcp: mcp.clone(),
            tasks: tasks.clone(),
            counts: counts.clone(),
            streaming: options.streaming,
        });
        let (front_url, server) = serve(Router::new().fallback(gateway).with_state(front)).await;
        background.push(server);

        let stats = Arc::new(Mutex::new(EsmStats::default()));
        background.push(tokio::spawn(esm(
            sqs.clone(),
            queue_url.clone(),
            worker.clone(),
            options.worker_timeout,
            stats.clone(),
        )));

        Some(Env {
            test: test.to_owned(),
            table,
            queue_url,
            url: format!("{front_url}/mcp"),
            dynamo,
            sqs,
            counts,
            esm: stats,
            mcp,
            tasks,
            worker,
            sweep,
            children,
            spawns,
            background,
            log,
            xray,
            started,
        })
    }

    /// Kills function `who` (`kill -9`: an execution environment lost mid-invocation, whose
    /// invocations fail) and starts a fresh one, as Lambda does for the next invocation.
    pub async fn restart(&mut self, who: &str) {
        let api = self.api(who);
        if let Some((_, child)) = self.children.iter_mut().find(|(w, _)| *w == who) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let started = Instant::now();
        while api.dead.lock().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{who} did not die"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        *api.dead.lock().unwrap() = None;
        let (name, exe, env) = self
            .spawns
            .iter()
            .find(|(w, ..)| *w == who)
            .cloned()
            .expect("a function of that name");
        let mut child = spawn(name, &exe, &env, &api, &self.log);
        match self.children.iter_mut().find(|(w, _)| *w == who) {
            Some(slot) => slot.1 = child,
            None => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    fn api(&self, who: &str) -> Arc<RuntimeApi> {
        match who {
            "mcp" => self.mcp.clone(),
            "tasks" => self.tasks.clone(),
            "worker" => self.worker.clone(),
            _ => self.sweep.clone(),
        }
    }

    /// A 2026-07-28 client of the front.
    pub fn client(&self) -> crate::support::Client {
        crate::support::Client::new(&self.url)
    }

    /// The task store over the same table (for tasks a client cannot create: a short TTL, a
    /// task stored but never enqueued).
    pub fn store(&self) -> DynamoStore {
        DynamoStore::new(self.dynamo.clone(), self.table.clone())
    }

    /// The item of `tenant`'s task as stored (`None`: no such item).
    pub async fn item(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Option<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>> {
        let pk = mcp_tasks_core::aws::dynamo::pk(TaskRef::new(
            &Tenant::from(tenant),
            &mcp_tasks_core::task::TaskId::parse(task_id).expect("a task id"),
        ));
        self.dynamo
            .get_item()
            .table_name(&self.table)
            .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(pk))
            .consistent_read(true)
            .send()
            .await
            .expect("reading the item")
            .item
    }

    /// Invokes the sweep function with the scheduled event; returns its report.
    pub async fn run_sweep(&self) -> Value {
        let out = self
            .sweep
            .invoke(SCHEDULE_EVENT.as_bytes().to_vec(), SWEEP_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("the sweep failed: {e}"));
        serde_json::from_slice(&out).expect("a JSON sweep report")
    }

    /// Worker invocations whose batch named `task_id`.
    pub fn worker_invocations_for(&self, task_id: &str) -> u32 {
        self.esm
            .lock()
            .unwrap()
            .invocations_by_task
            .get(task_id)
            .copied()
            .unwrap_or(0)
    }

    /// Prints the measured calls as one labelled line per function and one of totals.
    pub fn report(&self, lifecycle: &str) {
        self.assert_permitted();
        let snap = self.counts.snapshot();
        let mut line = format!("AWS CALLS [{}: {lifecycle}]", self.test);
        for who in ["mcp", "tasks", "worker", "sweep"] {
            let parts: Vec<String> = snap
                .iter()
                .filter(|((w, _, _), _)| w == who)
                .map(|((_, s, o), n)| format!("{s}.{o}={n}"))
                .collect();
            if !parts.is_empty() {
                line.push_str(&format!(" | {who}: {}", parts.join(" ")));
            }
        }
        let esm = self.esm.lock().unwrap();
        line.push_str(&format!(
            " || TOTAL dynamodb reads={} writes={} sqs sends={} | worker invocations={} \
             (esm batches={} deleted={} reported failed={} invoke errors={}; ms each: {:?})",
            self.counts.sum(None, Some("dynamodb"), Some(DYNAMO_READS)),
            self.counts.sum(None, Some("dynamodb"), Some(DYNAMO_WRITES)),
            self.counts.sum(
                None,
                Some("sqs"),
                Some(&["SendMessage", "SendMessageBatch"])
            ),
            self.worker.invocations.load(Ordering::Relaxed),
            esm.batches,
            esm.deleted,
            esm.reported_failed,
            esm.invoke_errors,
            esm.invocation_ms,
        ));
        line.push_str(&format!(
            " | billed ms: mcp={} tasks={} worker={} (invocations: mcp={} tasks={})",
            self.mcp.busy_ms.load(Ordering::Relaxed),
            self.tasks.busy_ms.load(Ordering::Relaxed),
            self.worker.busy_ms.load(Ordering::Relaxed),
            self.mcp.invocations.load(Ordering::Relaxed),
            self.tasks.invocations.load(Ordering::Relaxed),
        ));
        println!("{line}");
    }

    /// Every DynamoDB/SQS call a function made is an action its role in template.yaml grants:
    /// a missing permission fails here instead of in production.
    pub fn assert_permitted(&self) {
        let granted = granted_actions();
        for ((who, service, op), n) in self.counts.snapshot() {
            let action = match service.as_str() {
                "dynamodb" => format!("dynamodb:{op}"),
                "sqs" => format!("sqs:{op}"),
                _ => continue,
            };
            let theirs = granted.get(who.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            assert!(
                theirs.contains(&action),
                "{who} called {action} x{n}, but template.yaml grants it only {theirs:?}"
            );
        }
    }

    /// Every line a function logged is a JSON object (CloudWatch's JSON log format), and none
    /// contains any of `secrets` (task arguments, answers, results: never logged).
    pub fn assert_logs_are_json_without(&self, secrets: &[&str]) {
        let logs = self.logs();
        let mut lines = 0;
        for line in logs.lines() {
            let Some((who, text)) = line.split_once("] ") else {
                continue;
            };
            assert!(
                serde_json::from_str::<serde_json::Map<String, Value>>(text).is_ok(),
                "{who}] logged a line that is not a JSON object: {text}"
            );
            for s in secrets {
                assert!(!text.contains(s), "{who}] logged {s:?}: {text}");
            }
            lines += 1;
        }
        assert!(lines > 0, "the functions logged nothing");
    }

    /// The functions' logs so far.
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The X-Ray segments the functions sent so far, each checked to be a daemon datagram
    /// (the format header line, then one segment document).
    pub fn xray_segments(&self) -> Vec<serde_json::Value> {
        self.xray
            .lock()
            .unwrap()
            .iter()
            .map(|d| {
                let (head, body) = d.split_once('\n').expect("a header line");
                assert_eq!(head, r#"{"format":"json","version":1}"#, "{d}");
                serde_json::from_str(body).expect("a JSON segment")
            })
            .collect()
    }

    /// The raw datagrams sent to the X-Ray daemon so far.
    pub fn xray_datagrams(&self) -> Vec<String> {
        self.xray.lock().unwrap().clone()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for task in &self.background {
            task.abort();
        }
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Let the reader threads drain the pipes.
        std::thread::sleep(Duration::from_millis(100));
        let log = self.logs();
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("aws_functions-{}.log", self.test));
        let _ = std::fs::write(&file, &log);
        if std::thread::panicking() {
            eprintln!(
                "\n==== {} failed after {:.1?}; the functions' logs (also in {}) ====\n{log}==== end of logs ====",
                self.test,
                self.started.elapsed(),
                file.display()
            );
        } else {
            eprintln!(
                "aws_functions: {} took {:.1?} (logs in {})",
                self.test,
                self.started.elapsed(),
                file.display()
            );
        }
    }
}

/// Starts function `who` from `exe` with exactly `env`, against `api`, its output into `log`.
fn spawn(
    who: &'static str,
    exe: &std::path::Path,
    env: &[(String, String)],
    api: &Arc<RuntimeApi>,
    log: &Arc<Mutex<String>>,
) -> Child {
    let mut cmd = Command::new(exe);
    cmd.env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    *api.spawned.lock().unwrap() = Some(Instant::now());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", exe.display()));
    pipe_lines(who, child.stdout.take().unwrap(), log.clone(), None);
    pipe_lines(
        who,
        child.stderr.take().unwrap(),
        log.clone(),
        Some(api.clone()),
    );
    child
}
