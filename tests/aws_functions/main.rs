//! Whole task lifecycles through the REAL Lambda function binaries (`mcp`, `tasks`, `worker`,
//! `sweep`) against the DynamoDB/SQS emulator, behind an emulated API Gateway (REST proxy
//! events, `Mcp-Method: tasks/*` routed to `tasks`), an emulated SQS event source mapping and
//! per-function Lambda Runtime APIs (tests/support_aws).
//!
//! Needs both emulators (`DYNAMODB_ENDPOINT`/`AWS_ENDPOINT_URL_DYNAMODB` and
//! `SQS_ENDPOINT`/`AWS_ENDPOINT_URL_SQS`); without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set. The test builds the function binaries itself
//! (`cargo build --workspace --all-features --bins`). Each test prints its DynamoDB/SQS calls
//! per function as an `AWS CALLS` line (run with `--nocapture` to see them).
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks --all-features --test aws_functions -- --nocapture
//! ```
//!
//! By subject: task lifecycles (`lifecycles.rs`), a long job's hand-overs and their trace
//! (`hand_overs.rs`), the CLI and older clients (`clients.rs`), what the function binaries
//! link and are granted (`binaries.rs`), declared tools on lambda targets (`declared.rs`), the
//! measured figures (`figures.rs`), what one tenant can make the deployment store, re-send
//! and hold (`hostile.rs`), and the state key from Secrets Manager (`secrets.rs`); this file
//! holds the polling and the checks they share.

#[path = "../../shared/tests/common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;
#[path = "../support_aws/mod.rs"]
mod support_aws;

mod binaries;
mod clients;
mod declared;
mod figures;
mod hand_overs;
mod hostile;
mod http_secret;
mod lifecycles;
mod plain_targets;
mod secrets;
mod workflows;

use std::time::Duration;

use serde_json::Value;
use support::Client;
use support_aws::Env;

const WITHIN: Duration = Duration::from_secs(30);

/// The tenant of every request with `AUTH_MODE=none`.
const TENANT: &str = "local";

/// Two rounds of deferral (a message waiting for its tenant's place comes back every 5 s).
const DEFER_ROUNDS: Duration = Duration::from_secs(11);

/// How often the tests poll `tasks/get` (the tasks suggest 1 s; faster keeps the test short).
const POLL: Duration = Duration::from_millis(250);

/// Polls `tasks/get` until `pred` holds (panics after `within`).
async fn poll(c: &Client, id: &str, within: Duration, pred: impl Fn(&Value) -> bool) -> Value {
    let start = std::time::Instant::now();
    loop {
        let t = c.get_task(id).await;
        if pred(&t) {
            return t;
        }
        assert!(
            start.elapsed() < within,
            "task {id} did not get there in {within:?}: {t}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls until the task is terminal.
async fn poll_terminal(c: &Client, id: &str, within: Duration) -> Value {
    poll(c, id, within, |t| {
        matches!(
            t["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
    })
    .await
}

/// The front's routing, as seen by the functions: `tools/call` only ever reached `mcp`, and
/// every `tasks/*` request reached `tasks`.
fn assert_routed(env: &Env) {
    for ((who, service, op), n) in env.counts.snapshot() {
        if service != "http" {
            continue;
        }
        match who.as_str() {
            "tasks" => assert!(op.starts_with("tasks/"), "{op} x{n} reached tasks"),
            "mcp" => assert!(!op.starts_with("tasks/"), "{op} x{n} reached mcp"),
            other => panic!("{other} served HTTP"),
        }
    }
}

/// The sum of an EMF metric over the functions' log lines (`who`: one function, or all),
/// over the lines whose dimensions include `dims`. Lines without `_aws` are ordinary logs.
fn emf_sum(env: &Env, who: Option<&str>, metric: &str, dims: &[(&str, &str)]) -> u64 {
    let mut sum = 0;
    for line in env.logs().lines() {
        let Some((prefix, text)) = line.split_once("] ") else {
            continue;
        };
        if who.is_some_and(|w| prefix.trim_start_matches('[') != w) {
            continue;
        }
        let Ok(doc) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let Some(declared) = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array() else {
            continue;
        };
        if !declared.iter().any(|m| m["Name"] == metric) {
            continue;
        }
        if dims.iter().all(|(k, v)| doc[*k] == *v) {
            sum += doc[metric].as_u64().expect("a metric value");
        }
    }
    sum
}

/// [`emf_sum`], once it reaches `want` (a function writes its lines after its invocation,
/// which may end after the client saw the result) or 10 s passed.
async fn emf_settled(
    env: &Env,
    who: Option<&str>,
    metric: &str,
    dims: &[(&str, &str)],
    want: u64,
) -> u64 {
    let start = std::time::Instant::now();
    loop {
        let n = emf_sum(env, who, metric, dims);
        if n >= want || start.elapsed() > Duration::from_secs(10) {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
