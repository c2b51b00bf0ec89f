//! The Lambda wiring: configuration from the environment, the ports built once per cold start,
//! and the handlers the function crates hand to the runtime. Each function's `main.rs` is
//! `Config::from_env` → [`Ports::connect`] → one of these → `run`.
//!
//! | function | event                            | here                             |
//! |----------|----------------------------------|----------------------------------|
//! | `mcp`    | API Gateway proxy (REST or HTTP) | [`http_router`] (everything)     |
//! | `tasks`  | API Gateway proxy (REST or HTTP) | [`http_router`] (`tasks/*` only) |
//! | `worker` | SQS batch                        | [`SqsWorker::handle`]            |
//! | `sweep`  | EventBridge schedule             | [`Sweeper::run`]                 |
//!
//! The HTTP functions serve the very router the local server serves ([`crate::http::router`]);
//! the tasks function differs by one flag ([`ServiceConfig::tasks_only`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::future::join_all;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::sqs::SqsQueue;
use crate::auth::{AuthSettings, Authenticator, JwksSource};
use crate::engine::{Engine, TaskSettings};
use crate::handler::{McpService, ServiceConfig};
use crate::local::ToolSet;
use crate::protocol::state::StateSealer;
use crate::queue::{WorkMessage, WorkQueue};
use crate::quota::Quotas;
use crate::store::metered::Metered;
use crate::store::{StoreError, TaskStore};
use crate::tools::{Registry, Tool};
use crate::worker::{Outcome, Worker, WorkerError, WorkerSettings};

/// Which function is starting: decides which variables are required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The MCP endpoint (`functions/mcp`).
    Mcp,
    /// The `tasks/*` endpoint (`functions/tasks`).
    Tasks,
    /// The SQS worker (`functions/worker`).
    Worker,
    /// The scheduled sweep (`functions/sweep`).
    Sweep,
}

/// Bounds of `STREAM_SECONDS` (default [`crate::handler::DEFAULT_STREAM_BUDGET`]): at least
/// the buffered budget's order, at most 10 s under Lambda's 900-second limit.
pub const MIN_STREAM_SECONDS: u64 = 30;
/// See [`MIN_STREAM_SECONDS`].
pub const MAX_STREAM_SECONDS: u64 = 890;

/// A missing or malformed environment variable: fails the cold start, never a request.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set (or empty).
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    /// A variable is set to something unusable.
    #[error("environment variable {name}: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// What is wrong (never the value: it may be a secret).
        reason: &'static str,
    },
}

/// Function configuration, read once at cold start.
///
/// | variable              | who                  | meaning                                        |
/// |-----------------------|----------------------|------------------------------------------------|
/// | `TABLE_NAME`          | all (required)       | the DynamoDB task table                        |
/// | `QUEUE_URL`           | all (required)       | the SQS work queue                             |
/// | `STATE_KEY`           | mcp (required)       | ≥ 32 characters; seals `requestState`          |
/// | `MAX_RECEIVES`        | worker (required)    | the queue's `maxReceiveCount` (DLQ redrive)    |
/// | `ALLOWED_HOSTS`       | mcp, tasks           | comma list for `Host`/`Origin`; empty: any     |
/// | `TOOLS`               | mcp, worker          | `builtin` (default) or `conformance`           |
/// | `SWEEP_STALE_SECONDS` | sweep                | idle time before a task is re-enqueued (300)   |
/// | `AUTH_MODE`           | mcp, tasks           | `jwt` (default) or `none` (one open tenant)    |
/// | `AUTH_ISSUER`         | mcp, tasks with jwt  | the expected `iss` (required)                  |
/// | `AUTH_AUDIENCE`       | mcp, tasks with jwt  | this server's resource URI (required)          |
/// | `AUTH_JWKS_URL`       | mcp, tasks with jwt  | the issuer's signing keys (required)           |
/// | `AUTH_TENANT_CLAIM`   | mcp, tasks with jwt  | the claim naming the tenant (`sub`)            |
/// | `AUTH_REQUIRED_SCOPES`| mcp, tasks with jwt  | space-separated scopes every token must carry  |
/// | `MAX_ACTIVE_TASKS_PER_TENANT` | mcp        | unfinished tasks per tenant (1000)             |
/// | `TASK_CREATE_PER_SECOND` / `TASK_CREATE_BURST` | mcp | creations per tenant per instance (20/s, 200) |
/// | `MAX_TASK_SECONDS` / `MAX_TASK_CPU_SECONDS` | mcp, worker | per-task running and CPU time (86400, 1800) |
/// | `MAX_RUNNING_JOBS_PER_TENANT` | worker     | a tenant's jobs running at once (100)          |
/// | `RESPONSE_STREAMING`  | mcp                  | `true`: API Gateway streams its answers (false) |
/// | `STREAM_SECONDS`      | mcp with streaming   | longest streamed answer (840; 30 to 890)       |
/// | `MAX_STREAMS_PER_TENANT` | mcp               | a tenant's open streams, all instances (10)    |
#[derive(Clone)]
pub struct Config {
    /// Which function this is.
    pub role: Role,
    /// DynamoDB table.
    pub table_name: String,
    /// SQS queue URL.
    pub queue_url: String,
    /// The `requestState` key (SHA-256 of `STATE_KEY`), when set.
    pub state_key: Option<[u8; 32]>,
    /// Accepted `Host`/`Origin` names; empty accepts any (the gateway only routes its own).
    pub allowed_hosts: Vec<String>,
    /// The tool set; the mcp and worker functions must agree on it.
    pub tools: ToolSet,
    /// Deliveries SQS makes before dead-lettering a message.
    pub max_receives: u32,
    /// How long a working task may sit unheld and unchanged before the sweep re-enqueues it.
    pub sweep_stale: Duration,
    /// `ttlMs` of the tasks the mcp function creates (`TASK_TTL_SECONDS`, default 24 h).
    pub tasks: TaskSettings,
    /// Bearer-token auth of the HTTP functions; `None` only when `AUTH_MODE=none` was chosen.
    pub auth: Option<AuthSettings>,
    /// With `RESPONSE_STREAMING=true` (the mcp function behind a streaming REST integration):
    /// how long one streamed answer may last (`STREAM_SECONDS`) — a synchronous tool call
    /// or a `subscriptions/listen`. `None`: answers are buffered, the synchronous budget is
    /// the gateway's (25 s), and a subscription is acknowledged and closed at once.
    pub stream_budget: Option<Duration>,
    /// Most streams one tenant may have open at once across all instances
    /// (`MAX_STREAMS_PER_TENANT`, default 10).
    pub max_streams_per_tenant: usize,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("role", &self.role)
            .field("table_name", &self.table_name)
            .field("queue_url", &self.queue_url)
            .field("state_key", &self.state_key.map(|_| "<set>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("tools", &self.tools)
            .field("max_receives", &self.max_receives)
            .field("sweep_stale", &self.sweep_stale)
            .field("task_ttl_ms", &self.tasks.ttl_ms)
            .field("auth", &self.auth.as_ref().map(|a| &a.issuer))
            .field("stream_budget", &self.stream_budget)
            .finish()
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env(role: Role) -> Result<Self, ConfigError> {
        Self::from_lookup(role, |k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (tests pass a map).
    pub fn from_lookup(
        role: Role,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let var = |name: &'static str| {
            get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let required = |name: &'static str| var(name).ok_or(ConfigError::Missing(name));
        let table_name = required("TABLE_NAME")?;
        let queue_url = required("QUEUE_URL")?;
        let state_key = match (var("STATE_KEY"), role) {
            (None, Role::Mcp) => return Err(ConfigError::Missing("STATE_KEY")),
            (None, _) => None,
            (Some(k), _) if k.len() < 32 => {
                return Err(ConfigError::Invalid {
                    name: "STATE_KEY",
                    reason: "must be at least 32 characters",
                });
            }
            (Some(k), _) => Some(Sha256::digest(k.as_bytes()).into()),
        };
        let max_receives = match (var("MAX_RECEIVES"), role) {
            (None, Role::Worker) => return Err(ConfigError::Missing("MAX_RECEIVES")),
            (None, _) => 1,
            (Some(v), _) => {
                v.parse::<u32>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or(ConfigError::Invalid {
                        name: "MAX_RECEIVES",
                        reason: "must be a whole number of at least 1",
                    })?
            }
        };
        let tools = match var("TOOLS").as_deref() {
            None | Some("builtin") => ToolSet::Builtin,
            Some("conformance") => ToolSet::Conformance,
            Some(_) => {
                return Err(ConfigError::Invalid {
                    name: "TOOLS",
                    reason: "must be builtin or conformance",
                });
            }
        };
        let sweep_stale = match var("SWEEP_STALE_SECONDS") {
            None => Duration::from_secs(300),
            Some(v) => Duration::from_secs(v.parse().map_err(|_| ConfigError::Invalid {
                name: "SWEEP_STALE_SECONDS",
                reason: "must be a whole number of seconds",
            })?),
        };
        // DynamoDB's TTL deletes lazily and reads treat an expired task as absent, so any
        // value works; bounded so that a typo cannot make tasks vanish at once or live forever.
        let tasks = match var("TASK_TTL_SECONDS") {
            None => TaskSettings::default(),
            Some(v) => TaskSettings {
                ttl_ms: Some(
                    v.parse::<u64>()
                        .ok()
                        .filter(|s| (MIN_TASK_TTL_SECONDS..=MAX_TASK_TTL_SECONDS).contains(s))
                        .ok_or(ConfigError::Invalid {
                            name: "TASK_TTL_SECONDS",
                            reason: "must be a whole number of seconds from 60 to 31536000 (365 days)",
                        })?
                        * 1000,
                ),
                ..TaskSettings::default()
            },
        };
        let mut tasks = tasks;
        tasks.quotas = quotas(&var)?;
        let allowed_hosts = var("ALLOWED_HOSTS")
            .map(|v| {
                v.split(',')
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        // An HTTP function is authenticated unless open access was chosen explicitly.
        let auth = match (role, var("AUTH_MODE").as_deref()) {
            (Role::Worker | Role::Sweep, _) | (_, Some("none")) => None,
            (_, None | Some("jwt")) => Some(AuthSettings {
                issuer: required("AUTH_ISSUER")?,
                audience: required("AUTH_AUDIENCE")?,
                jwks: JwksSource::Url(required("AUTH_JWKS_URL")?),
                tenant_claim: var("AUTH_TENANT_CLAIM").unwrap_or_else(|| "sub".into()),
                required_scopes: var("AUTH_REQUIRED_SCOPES")
                    .map(|s| s.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default(),
                leeway: Duration::from_secs(60),
            }),
            (_, Some(_)) => {
                return Err(ConfigError::Invalid {
                    name: "AUTH_MODE",
                    reason: "must be jwt or none",
                });
            }
        };
        let stream_budget = match var("RESPONSE_STREAMING").as_deref() {
            None | Some("false") => None,
            Some("true") => Some(Duration::from_secs(match var("STREAM_SECONDS") {
                None => crate::handler::DEFAULT_STREAM_BUDGET.as_secs(),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (MIN_STREAM_SECONDS..=MAX_STREAM_SECONDS).contains(s))
                    .ok_or(ConfigError::Invalid {
                        name: "STREAM_SECONDS",
                        reason: "must be a whole number of seconds from 30 to 890",
                    })?,
            })),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    name: "RESPONSE_STREAMING",
                    reason: "must be true or false",
                });
            }
        };
        let max_streams_per_tenant = match var("MAX_STREAMS_PER_TENANT") {
            None => 10,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or(ConfigError::Invalid {
                    name: "MAX_STREAMS_PER_TENANT",
                    reason: "must be a whole number from 1 to 10000",
                })?,
        };
        Ok(Self {
            max_streams_per_tenant,
            role,
            table_name,
            queue_url,
            state_key,
            allowed_hosts,
            tools,
            max_receives,
            sweep_stale,
            tasks,
            auth,
            stream_budget,
        })
    }
}

/// The per-tenant quotas from `MAX_ACTIVE_TASKS_PER_TENANT`, `MAX_RUNNING_JOBS_PER_TENANT`,
/// `TASK_CREATE_PER_SECOND`, `TASK_CREATE_BURST`, `MAX_TASK_SECONDS` and
/// `MAX_TASK_CPU_SECONDS` (each optional; the defaults of [`Quotas`]).
fn quotas(var: &impl Fn(&'static str) -> Option<String>) -> Result<Quotas, ConfigError> {
    fn whole(
        var: &impl Fn(&'static str) -> Option<String>,
        name: &'static str,
        max: u64,
        default: u64,
    ) -> Result<u64, ConfigError> {
        match var(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or(ConfigError::Invalid {
                    name,
                    reason: "must be a whole number within the documented bounds",
                }),
        }
    }
    let d = Quotas::default();
    let create_per_second = match var("TASK_CREATE_PER_SECOND") {
        None => d.create_per_second,
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && (0.0..=1e6).contains(r))
            .ok_or(ConfigError::Invalid {
                name: "TASK_CREATE_PER_SECOND",
                reason: "must be a number from 0 (no limit) to 1000000",
            })?,
    };
    Ok(Quotas {
        max_active_tasks: whole(
            var,
            "MAX_ACTIVE_TASKS_PER_TENANT",
            1_000_000,
            d.max_active_tasks as u64,
        )? as usize,
        max_running_jobs: whole(
            var,
            "MAX_RUNNING_JOBS_PER_TENANT",
            100_000,
            d.max_running_jobs as u64,
        )? as usize,
        create_per_second,
        create_burst: whole(
            var,
            "TASK_CREATE_BURST",
            1_000_000,
            u64::from(d.create_burst),
        )? as u32,
        max_task_wall: Duration::from_secs(whole(
            var,
            "MAX_TASK_SECONDS",
            31_536_000,
            d.max_task_wall.as_secs(),
        )?),
        max_task_cpu: Duration::from_secs(whole(
            var,
            "MAX_TASK_CPU_SECONDS",
            31_536_000,
            d.max_task_cpu.as_secs(),
        )?),
    })
}

/// Bounds of `TASK_TTL_SECONDS`: a minute to a year.
const MIN_TASK_TTL_SECONDS: u64 = 60;
const MAX_TASK_TTL_SECONDS: u64 = 365 * 24 * 3600;

/// How long after its creation a task whose tool the worker does not know is given back to
/// the queue before it fails ([`WorkerSettings::unknown_tool_grace`]): a deployment updates the
/// functions one after the other, so for a while the `mcp` function may offer a tool an older
/// worker does not have yet. Fifteen minutes covers a `sam deploy` many times over.
pub const UNKNOWN_TOOL_GRACE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Writes what this process counted since the last call ([`crate::metrics`]) to stdout as
/// CloudWatch Embedded Metric Format lines, one per metric and label set: Lambda hands stdout
/// to CloudWatch Logs, which turns such lines into metrics (namespace
/// [`crate::metrics::NAMESPACE`], dimension `function` and the metric's labels) — no API call,
/// nothing added to the answer's latency. Each function calls it after every invocation; what
/// an invocation counts after its answer has gone (the end of a streamed call) goes out with
/// the next one.
pub fn flush_metrics(function: &str) {
    use std::io::Write as _;
    let lines = crate::metrics::global().drain_emf(function, crate::clock::now_ms());
    if lines.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// The ports every function uses, built once at cold start (SDK clients included).
#[derive(Clone)]
pub struct Ports {
    /// The task store.
    pub store: Arc<dyn TaskStore>,
    /// The work queue.
    pub queue: Arc<dyn WorkQueue>,
    /// The per-tenant running-jobs guard of the worker (in the task table on AWS).
    pub run_slots: Option<Arc<dyn crate::quota::RunSlots>>,
}

impl Ports {
    /// DynamoDB and SQS from the SDK's standard configuration (region, credentials, and
    /// `AWS_ENDPOINT_URL*` for emulators), with the clients' [`super::Timeouts`].
    pub async fn connect(config: &Config) -> Self {
        let sdk = super::sdk_config().await;
        let queue = SqsQueue::new(super::sqs_client(&sdk), config.queue_url.clone());
        let store =
            super::dynamo::DynamoStore::new(super::dynamodb_client(&sdk), &config.table_name);
        Self {
            store: Arc::new(Metered(store.clone())),
            queue: Arc::new(queue),
            run_slots: Some(Arc::new(store)),
        }
    }
}

impl Ports {
    /// In-memory store and in-process queue, for handler tests and fixtures (`events/*.json`):
    /// the receiver gets what the handlers enqueue.
    pub fn in_memory() -> (Self, tokio::sync::mpsc::UnboundedReceiver<WorkMessage>) {
        let (queue, rx) = crate::queue::LocalQueue::new();
        let ports = Self {
            store: Arc::new(crate::store::memory::MemoryStore::new()),
            queue: Arc::new(queue),
            run_slots: Some(Arc::new(crate::quota::MemoryRunSlots::default())),
        };
        (ports, rx)
    }
}

fn registry(tools: ToolSet) -> Arc<Registry> {
    let tools: Vec<Arc<dyn Tool>> = match tools {
        ToolSet::Builtin => crate::tools::builtin::builtin_tools(),
        ToolSet::Conformance => crate::tools::fixtures::conformance_tools(),
    };
    Arc::new(Registry::new(tools))
}

/// The MCP service of the mcp or tasks function.
pub fn service(config: &Config, ports: &Ports) -> Arc<McpService> {
    let engine = Engine::new(
        ports.store.clone(),
        ports.queue.clone(),
        config.tasks.clone(),
    );
    let service = ServiceConfig {
        allowed_hosts: config.allowed_hosts.clone(),
        tasks_only: config.role == Role::Tasks,
        // The tasks function is always buffered: its answers are small and immediate.
        stream_budget: config.stream_budget.filter(|_| config.role == Role::Mcp),
        max_streams_per_tenant: config.max_streams_per_tenant,
        ..ServiceConfig::default()
    };
    // Only the mcp function seals and opens `requestState`; the tasks function never does,
    // so a throw-away key serves it.
    let key = config.state_key.unwrap_or_else(|| {
        let mut k = [0u8; 32];
        crate::clock::random_bytes(&mut k);
        k
    });
    let mut service = McpService::new(
        service,
        engine,
        registry(config.tools),
        StateSealer::new(key),
    );
    if let Some(auth) = config.auth.clone() {
        service = service.with_auth(Authenticator::new(auth));
    }
    // Every instance must count a tenant's open streams alike: in the table.
    if let Some(slots) = ports.run_slots.clone() {
        service = service.with_stream_slots(slots);
    }
    Arc::new(service)
}

/// The HTTP router for `lambda_http::run` — the same one the local server serves.
pub fn http_router(config: &Config, ports: &Ports) -> axum::Router {
    crate::http::router(service(config, ports))
}

/// The tokio instant of a wall-clock deadline (the Lambda context's).
pub fn instant_at(deadline: SystemTime) -> Instant {
    let left = deadline
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    Instant::now() + left
}

/// The deadline an HTTP request runs within ([`crate::clock::within_deadline`]), from its Lambda
/// context's. `None` for one already past when the request starts: no real invocation starts
/// after its deadline, but `cargo lambda watch` (the local serverless run) sends such, and
/// taking it at its word would end every wait at once.
pub fn request_deadline(deadline: SystemTime) -> Option<Instant> {
    let at = instant_at(deadline);
    (at > Instant::now()).then_some(at)
}

/// The deadline a worker batch runs within: the Lambda context's. `cargo lambda watch` (the
/// local serverless run, `scripts/aws-local.sh`) hands every invocation a deadline already
/// past, which would make each job run one step and hand over; such a deadline is replaced by
/// Lambda's longest timeout from now (the template's worker timeout), as deployed.
pub fn worker_deadline(deadline: SystemTime) -> Instant {
    request_deadline(deadline).unwrap_or_else(|| {
        tracing::warn!(
            "worker.deadline_in_the_past: taking 900 s from now (only the local emulated runtime does this)"
        );
        Instant::now() + LAMBDA_MAX_TIMEOUT
    })
}

/// Lambda's longest function timeout (the worker's in template.yaml).
const LAMBDA_MAX_TIMEOUT: Duration = Duration::from_secs(900);

/// One HTTP invocation of the `function` function (`mcp`, `tasks`): `answer` runs within the
/// invocation's deadline (from the Lambda context's `deadline`, see [`request_deadline`]), so
/// that no wait outlives the function's timeout, and what it counted is written as EMF lines
/// once it is done ([`flush_metrics`]).
pub async fn http_invocation<F: std::future::Future>(
    function: &str,
    deadline: Option<SystemTime>,
    answer: F,
) -> F::Output {
    let out = crate::clock::within_deadline(deadline.and_then(request_deadline), answer).await;
    flush_metrics(function);
    out
}

/// What to do with one SQS record once the worker is done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Delete it (report success).
    Done,
    /// Report it failed: SQS delivers it again after the visibility timeout (and dead-letters
    /// it after the last allowed receive).
    Retry,
    /// The last allowed delivery failed: mark the task failed, then delete the message.
    GiveUp,
}

/// The retry policy, in one place.
///
/// - A result of any kind (finished, handed over, dropped, superseded) deletes the message.
/// - `Busy` (another run holds a live lease) is retried, in case that run dies; on the last
///   delivery it is deleted instead — the lease holder owns the task, and should it die the
///   sweep re-enqueues the task (and the worker fails a job that keeps dying), so failing a
///   healthy running task, or alarming on the DLQ, would be wrong.
/// - An error (store or queue unavailable) is retried; on the last delivery the task is given
///   up on, so no client polls forever — except a continuation that could not be sent after
///   the job was saved and handed over: that task is healthy, the sweep picks it up.
pub fn decide(outcome: &Result<Outcome, WorkerError>, last_delivery: bool) -> Action {
    match (outcome, last_delivery) {
        (Ok(Outcome::Busy(_)), false) | (Err(_), false) => Action::Retry,
        // The job was saved and handed over, only its continuation could not be sent: the
        // task is healthy, so it is not given up on. The message goes to the DLQ (and its
        // alarm) and the sweep re-enqueues the unheld task.
        (Err(WorkerError::Queue(_)), true) => Action::Retry,
        (Err(_), true) => Action::GiveUp,
        (Ok(_), _) => Action::Done,
    }
}

/// `ApproximateReceiveCount` of a record (1 when absent).
fn receive_count(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// The worker function: one SQS batch at a time, every record on its own.
pub struct SqsWorker {
    worker: Worker,
    queue: Arc<dyn WorkQueue>,
    max_receives: u32,
}

impl SqsWorker {
    /// A worker over the ports; `config.max_receives` must equal the queue's `maxReceiveCount`.
    pub fn new(config: &Config, ports: &Ports) -> Self {
        let settings = WorkerSettings {
            unknown_tool_grace: UNKNOWN_TOOL_GRACE,
            ..WorkerSettings::default()
        };
        Self::with_settings(config, ports, settings)
    }

    /// As [`SqsWorker::new`], with explicit worker timing (tests).
    pub fn with_settings(config: &Config, ports: &Ports, mut settings: WorkerSettings) -> Self {
        settings.quotas = config.tasks.quotas.clone();
        settings.poll_interval_floor =
            std::time::Duration::from_millis(config.tasks.poll_interval_ms);
        let mut worker = Worker::new(
            ports.store.clone(),
            ports.queue.clone(),
            registry(config.tools),
            settings,
        );
        if let Some(slots) = &ports.run_slots {
            worker = worker.with_run_slots(slots.clone());
        }
        Self {
            worker,
            queue: ports.queue.clone(),
            max_receives: config.max_receives,
        }
    }

    /// Runs every record of the batch concurrently (jobs mostly wait on I/O) and reports the
    /// ones to retry (`ReportBatchItemFailures`). The worker hands over
    /// [`WorkerSettings::deadline_margin`] before `deadline`, leaving that margin for the
    /// give-up writes and the response.
    pub async fn handle(&self, event: SqsEvent, deadline: Instant) -> SqsBatchResponse {
        // Each record within its own trace (its AWSTraceHeader), which its sends carry on.
        let actions = join_all(event.records.iter().map(|r| {
            let trace = r.attributes.get("AWSTraceHeader").map(String::as_str);
            super::within_trace(trace, self.record(r, deadline))
        }))
        .await;
        let mut response = SqsBatchResponse::default();
        for (record, action) in event.records.iter().zip(actions) {
            if action == Action::Retry {
                // A record without an id cannot be named; an empty identifier makes Lambda
                // retry the whole batch, which is safe (duplicates are dropped by the lease).
                response.add_failure(record.message_id.clone().unwrap_or_default());
            }
        }
        response
    }

    async fn record(&self, record: &SqsMessage, deadline: Instant) -> Action {
        let message_id = record.message_id.as_deref().unwrap_or("");
        let receives = receive_count(record);
        let last = receives >= self.max_receives;
        let parsed = record
            .body
            .as_deref()
            .map(serde_json::from_str::<WorkMessage>);
        let Some(Ok(msg)) = parsed else {
            // Never the body itself: it is not ours to log. Retried, so it reaches the DLQ
            // (and its alarm) instead of vanishing.
            tracing::error!(message_id, receives, "unreadable work message");
            return Action::Retry;
        };
        let outcome = self.worker.handle(&msg, Some(deadline)).await;
        // Waiting its tenant's turn, or a sleeping job's next hop: a fresh message (its receive
        // count starts again), then this one is deleted. Should the send fail, this one is
        // retried instead.
        let resend = match &outcome {
            Ok(Outcome::Deferred(delay)) => Some((msg.clone(), *delay)),
            Ok(Outcome::Rescheduled(next, delay)) => Some((next.clone(), *delay)),
            _ => None,
        };
        if let Some((next, delay)) = resend {
            return match self.queue.enqueue(next, delay).await {
                Ok(()) => {
                    tracing::info!(message_id, task_id = %msg.task_id, "work message deferred");
                    Action::Done
                }
                Err(e) => {
                    tracing::warn!(message_id, task_id = %msg.task_id, error = %e, "deferring failed; retrying the message");
                    Action::Retry
                }
            };
        }
        let action = decide(&outcome, last);
        let trace = super::trace_header().unwrap_or_default();
        match &outcome {
            Ok(o) => {
                tracing::info!(message_id, task_id = %msg.task_id, receives, outcome = ?o, ?action, trace, "work message handled")
            }
            Err(e) => {
                tracing::error!(message_id, task_id = %msg.task_id, receives, error = %e, ?action, "work message failed")
            }
        }
        if action != Action::GiveUp {
            return action;
        }
        match self.worker.abandon(&msg).await {
            Ok(_) => Action::Done,
            Err(e) => {
                // Not even that worked: let the message go to the DLQ, where the alarm fires.
                tracing::error!(message_id, task_id = %msg.task_id, error = %e, "giving up on the task failed");
                Action::Retry
            }
        }
    }
}

/// What one sweep did: the function's response, and the fields of its `sweep done` log line
/// (a metric filter on `skipped` or `purge_failed` above zero is the alarm for items the sweep
/// cannot read or delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Working tasks re-enqueued (persisted but never enqueued, or whose run died).
    pub requeued: usize,
    /// Active tasks listed but not readable, skipped (see [`crate::engine::SweepStats`]).
    pub skipped: usize,
    /// Quiet tasks left alone while messages waited in the queue.
    pub queued: usize,
    /// Candidate records the sweep read.
    pub read: usize,
    /// Whether the sweep reached the end of its listing (else the next run resumes).
    pub complete: bool,
    /// Expired tasks deleted.
    pub purged: usize,
    /// Expired tasks whose delete failed (tried again next run).
    pub purge_failed: usize,
}

/// Why a sweep failed (the scheduler retries the invocation).
#[derive(Debug, thiserror::Error)]
#[error("sweep failed: {0}")]
pub struct SweepError(#[from] StoreError);

/// The sweep function: re-enqueue orphans, purge expired tasks.
pub struct Sweeper {
    engine: Engine,
    stale: Duration,
}

impl Sweeper {
    /// A sweeper over the ports.
    pub fn new(config: &Config, ports: &Ports) -> Self {
        Self {
            engine: Engine::new(
                ports.store.clone(),
                ports.queue.clone(),
                config.tasks.clone(),
            ),
            stale: config.sweep_stale,
        }
    }

    /// One sweep. Both halves always run, neither depends on the other: an item either cannot
    /// read or delete is skipped and counted, and only a failed listing is an error — the
    /// first such error is returned after both halves ran.
    ///
    /// Within `deadline` (the invocation's; `None`: no limit): the orphan sweep stops once two
    /// thirds of the time left are used (between pages; the next run resumes there), leaving
    /// the rest to the purge.
    pub async fn run(&self, deadline: Option<Instant>) -> Result<SweepReport, SweepError> {
        let until = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            Instant::now() + left * 2 / 3
        });
        let swept = self.engine.sweep_until(self.stale, until).await;
        let purged = self.engine.purge().await;
        let s = swept.as_ref().copied().unwrap_or_default();
        let p = purged.as_ref().copied().unwrap_or_default();
        let report = SweepReport {
            requeued: s.requeued,
            skipped: s.skipped,
            queued: s.queued,
            read: s.read,
            complete: s.complete,
            purged: p.purged,
            purge_failed: p.failed,
        };
        tracing::info!(
            requeued = report.requeued,
            skipped = report.skipped,
            queued = report.queued,
            read = report.read,
            resumed = s.resumed,
            complete = report.complete,
            purged = report.purged,
            purge_failed = report.purge_failed,
            sweep_failed = swept.is_err(),
            purge_listing_failed = purged.is_err(),
            "sweep done"
        );
        swept?;
        purged?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use aws_lambda_events::event::eventbridge::EventBridgeEvent;
    use serde_json::{Value, json};

    use super::*;
    use crate::queue::LocalQueue;
    use crate::store::TaskKey;
    use crate::store::memory::MemoryStore;
    use crate::task::{Lease, TaskRecord, TaskStatus};

    const SQS_EVENT: &str = include_str!("../../../events/sqs-work-message.json");
    const SCHEDULE_EVENT: &str = include_str!("../../../events/scheduled-sweep.json");

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
            Err(ConfigError::Missing("STATE_KEY"))
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
            ("TOOLS", "mine"),
            ("SWEEP_STALE_SECONDS", "soon"),
            ("TASK_TTL_SECONDS", "59"),
            ("TASK_TTL_SECONDS", "31536001"),
            ("TASK_TTL_SECONDS", "1d"),
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
        assert_eq!(c.tools, ToolSet::Builtin);
        assert!(c.state_key.is_some());
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
        assert_eq!(c.tasks.ttl_ms, Some(24 * 3600 * 1000));
        vars.push(("ALLOWED_HOSTS", " mcp.example.com, ,api.example.com "));
        vars.push(("TASK_TTL_SECONDS", "3600"));
        let c = env(Role::Mcp, &vars).unwrap();
        assert_eq!(c.allowed_hosts, ["mcp.example.com", "api.example.com"]);
        assert_eq!(c.tasks.ttl_ms, Some(3600 * 1000));
    }

    #[test]
    fn the_retry_policy_never_polls_forever_and_never_kills_a_live_run() {
        let busy = Ok(Outcome::Busy(Duration::from_secs(3)));
        let err: Result<Outcome, WorkerError> = Err(StoreError::Backend("down".into()).into());
        assert_eq!(decide(&busy, false), Action::Retry);
        assert_eq!(decide(&busy, true), Action::Done);
        assert_eq!(decide(&err, false), Action::Retry);
        assert_eq!(decide(&err, true), Action::GiveUp);
        // A saved, handed-over job whose continuation could not be sent is never failed.
        let lost_continuation: Result<Outcome, WorkerError> =
            Err(crate::queue::QueueError("down".into()).into());
        assert_eq!(decide(&lost_continuation, true), Action::Retry);
        assert_eq!(
            decide(&Ok(Outcome::Deferred(Duration::from_secs(5))), true),
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
        async fn create(&self, task: &TaskRecord, args: &Value) -> Result<(), StoreError> {
            self.inner.create(task, args).await
        }
        async fn arguments(&self, tenant: &str, id: &str) -> Result<Option<Value>, StoreError> {
            self.inner.arguments(tenant, id).await
        }
        async fn get(&self, tenant: &str, id: &str) -> Result<Option<TaskRecord>, StoreError> {
            if self
                .fail_gets
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(StoreError::Backend("throttled".into()));
            }
            self.inner.get(tenant, id).await
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
                return Err(StoreError::Backend("index unavailable".into()));
            }
            self.inner.list_active(after, limit).await
        }
        async fn list_expired(&self, now: u64, limit: usize) -> Result<Vec<TaskKey>, StoreError> {
            self.inner.list_expired(now, limit).await
        }
        async fn delete(&self, tenant: &str, id: &str) -> Result<(), StoreError> {
            self.inner.delete(tenant, id).await
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
        r.store
            .get(&msg.tenant, &msg.task_id)
            .await
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn the_sample_sqs_event_runs_its_task_to_completion() {
        let r = rig();
        let (event, msg) = sample();
        seed(&r, &msg).await;
        let worker = SqsWorker::new(&worker_config("5"), &r.ports);
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
        let worker = SqsWorker::new(&worker_config("3"), &r.ports);
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
        let worker = SqsWorker::new(&worker_config("3"), &r.ports);
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
        let worker = SqsWorker::new(&worker_config("3"), &r.ports);
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
        let worker = SqsWorker::new(&worker_config("5"), &r.ports);
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
            r.store.get("t", "tsk_x").await.unwrap(),
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
    fn past_deadlines_are_now_not_a_panic() {
        let past = SystemTime::now() - Duration::from_secs(10);
        assert!(instant_at(past) <= Instant::now());
        assert_eq!(request_deadline(past), None, "not a real request deadline");
        let soon = SystemTime::now() + Duration::from_secs(10);
        assert!(request_deadline(soon).is_some());
        let future = SystemTime::now() + Duration::from_secs(10);
        assert!(instant_at(future) > Instant::now() + Duration::from_secs(9));
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
}
