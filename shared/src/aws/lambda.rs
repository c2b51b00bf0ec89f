//! The Lambda wiring: configuration from the environment, the ports built once per cold start,
//! and the handlers the function crates hand to the runtime. Each function's `main.rs` is
//! `Config::from_env` → [`Ports::connect`] → one of these → `run`.
//!
//! | function | event                            | here                             |
//! |----------|----------------------------------|----------------------------------|
//! | `mcp`    | API Gateway proxy (REST or HTTP) | [`http_router`] (everything)     |
//! | `tasks`  | API Gateway proxy (REST or HTTP) | [`tasks_router`] (`tasks/*` only)|
//! | `worker` | SQS batch                        | [`SqsWorker::handle`]            |
//! | `sweep`  | EventBridge schedule             | [`Sweeper::run`]                 |
//!
//! The HTTP functions serve the very router the local server serves ([`crate::http::router`]);
//! the tasks function differs by one flag ([`ServiceConfig::tasks_only`]) and serves no tool.
//! The tools come from the function's `main` ([`serving_tools`], [`running_tools`]): this
//! crate knows none.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::future::join_all;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::sqs::SqsQueue;
use crate::app::Server;
use crate::auth::{AuthSettings, JwksSource};
use crate::engine::{Engine, TaskSettings};
use crate::handler::{McpService, ServiceConfig};
use crate::queue::{WorkMessage, WorkQueue};
use crate::quota::Quotas;
use crate::store::StoreError;
use crate::store::metered::Metered;
use crate::tools::Registry;
use crate::worker::{Outcome, Worker, WorkerError, WorkerSettings};

mod config;
mod logging;
mod runtime_api;
mod start;
mod sweep;
#[cfg(test)]
mod tests;
mod tool_sources;
mod worker;

pub use config::{
    Config, ConfigError, MAX_STREAM_SECONDS, MIN_STREAM_SECONDS, SecretRef, UNKNOWN_TOOL_GRACE,
};
pub use logging::init_logging;
pub use start::{block_on, prefer_one_cert_bundle};
pub use sweep::{SweepError, SweepReport, Sweeper};
pub use tool_sources::{ToolsError, running_tools, serving_tools};
pub use worker::{Action, SqsWorker, decide};

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

impl Role {
    /// The function's name in logs and metrics (`function` dimension).
    pub fn name(self) -> &'static str {
        match self {
            Role::Mcp => "mcp",
            Role::Tasks => "tasks",
            Role::Worker => "worker",
            Role::Sweep => "sweep",
        }
    }

    /// The function's `Timeout` in template.yaml (a test holds the two together): the bound
    /// an invocation runs within when its runtime hands it no usable deadline
    /// ([`request_deadline`]). Lambda tells a function its deadline, never its timeout, so
    /// each binary carries its own; a variable the template would set could drift from the
    /// `Timeout` beside it just the same, and would be one more thing a local run must set.
    pub fn deployed_timeout(self) -> Duration {
        Duration::from_secs(match self {
            Role::Mcp => 900,
            Role::Tasks => 10,
            Role::Worker => 900,
            Role::Sweep => 300,
        })
    }
}

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

/// The ports every function uses, built once at cold start (the SDK clients at their first
/// use); on AWS the running places (a tenant's jobs and streams) are items of the task table.
pub use crate::app::Ports;

impl Ports {
    /// DynamoDB and SQS from the SDK's standard configuration (region, credentials, and
    /// `AWS_ENDPOINT_URL*` for emulators), with the clients' [`super::Timeouts`]. The
    /// configuration is loaded now; each client is built at its first use
    /// ([`super::FirstUse`]), so a cold start whose first event needs no AWS call (the mcp
    /// function's `initialize`, `tools/list`, `server/discover`) builds none.
    ///
    /// The process-wide settings of this cold start are applied here too, once per process:
    /// how many tenants the metrics name (`METRICS_TENANTS`).
    pub async fn connect(config: &Config) -> Self {
        Self::connect_with(config, super::sdk_config().await)
    }

    /// [`Ports::connect`] with an SDK configuration already loaded ([`super::sdk_config`]):
    /// what a `main` also hands its configuration to read secrets with
    /// ([`Config::reading_secrets_with`]), so that a cold start loads it once.
    pub fn connect_with(config: &Config, sdk: aws_config::SdkConfig) -> Self {
        crate::metrics::global().name_tenants(config.metrics_tenants);
        let sqs = super::FirstUse::new({
            let sdk = sdk.clone();
            move || super::sqs_client(&sdk)
        });
        let dynamodb = super::FirstUse::new(move || super::dynamodb_client(&sdk));
        let queue = SqsQueue::new(sqs, config.queue_url.clone());
        let store = super::dynamo::DynamoStore::new(dynamodb, &config.table_name);
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

/// The server of this function over `ports`, serving (or running) `tools`: built as every
/// host builds it ([`crate::app::Server`]), with this function's settings.
pub fn server(config: &Config, ports: &Ports, tools: Arc<Registry>) -> Server {
    Server::new(ports.clone(), config.settings(), tools)
}

/// The MCP service of the mcp or tasks function, serving `tools`.
pub fn service(config: &Config, ports: &Ports, tools: Arc<Registry>) -> Arc<McpService> {
    server(config, ports, tools).service(config.state_sealer())
}

/// The mcp function's HTTP router for `lambda_http::run`: the one the local server serves
/// ([`crate::http::router`]), serving `tools` ([`serving_tools`]).
pub fn http_router(config: &Config, ports: &Ports, tools: Arc<Registry>) -> axum::Router {
    crate::http::router(service(config, ports, tools))
}

/// The tasks function's HTTP router: the same service, `tasks/*` only ([`Role::Tasks`]), with
/// no tool registered, since `tasks/*` never looks one up. Chosen in its `main`, not by the
/// role at run time, so that the tools' jobs and the schema engine stay out of its binary.
pub fn tasks_router(config: &Config, ports: &Ports) -> axum::Router {
    let config = Config {
        role: Role::Tasks,
        ..config.clone()
    };
    crate::http::router(service(&config, ports, crate::app::no_tools()))
}

/// The tokio instant of a wall-clock deadline (the Lambda context's).
pub fn instant_at(deadline: SystemTime) -> Instant {
    let left = deadline
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    Instant::now() + left
}

/// The deadline an invocation of `role` runs within: its Lambda context's. No real invocation
/// starts after its deadline, but `cargo lambda watch` (the local serverless run,
/// `scripts/aws-local.sh`) hands every invocation a fixed deadline already past: taken at its
/// word it would end every wait at once, and ignored it would let a function run longer than
/// its deployment could (the tasks function waited 25 s on a legacy `tasks/result` where its
/// 10 s timeout stops it). Such a deadline is replaced by the function's deployed timeout from
/// now ([`Role::deployed_timeout`]), so a local run does what a deployment would.
pub fn request_deadline(deadline: SystemTime, role: Role) -> Instant {
    let at = instant_at(deadline);
    if at > Instant::now() {
        return at;
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(
            function = role.name(),
            timeout_s = role.deployed_timeout().as_secs(),
            "deadline_in_the_past: taking the deployed timeout from now (only the local emulated runtime does this)"
        );
    });
    Instant::now() + role.deployed_timeout()
}

/// The deadline a worker batch runs within ([`request_deadline`] of the worker).
pub fn worker_deadline(deadline: SystemTime) -> Instant {
    request_deadline(deadline, Role::Worker)
}

/// One HTTP invocation of the `role` function (`mcp`, `tasks`): `answer` runs within the
/// invocation's deadline (from the Lambda context's `deadline`, see [`request_deadline`]), so
/// that no wait outlives the function's timeout, and what it counted is written as EMF lines
/// once it is done ([`flush_metrics`]). When the answer is `streamed` (the mcp function
/// behind the streaming integration), the connection it goes out on is first set to send
/// without Nagle's delay (`runtime_api.rs`); a buffered answer leaves as one write, which
/// Nagle never holds, so it skips that look through the descriptors.
pub async fn http_invocation<F: std::future::Future>(
    role: Role,
    streamed: bool,
    deadline: Option<SystemTime>,
    answer: F,
) -> F::Output {
    if streamed {
        runtime_api::send_answers_without_delay();
    }
    let deadline = deadline.map(|d| request_deadline(d, role));
    let out = crate::clock::within_deadline(deadline, answer).await;
    flush_metrics(role.name());
    out
}
