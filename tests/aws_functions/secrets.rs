//! The mcp function's `requestState` key from Secrets Manager, as deployed
//! (`STATE_KEY_SECRET_ARN`: the template puts no key in the environment): checked on the real
//! binary against a stand-in Secrets Manager (tests/support_aws/secrets.rs). Without the
//! emulator: the events used here (`server/discover`, a `tools/call` whose `requestState` is
//! refused) touch neither DynamoDB nor SQS.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support;
use crate::support_aws::{SecretAnswer, SecretsStandIn, Solo};

const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:mcp-state-key-AbCdEf";
const VERSION: &str = "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE";
/// The secret's value: must never appear in what the function writes.
const KEY: &str = "the-state-key-from-secrets-manager-0123456789";

/// The environment the template gives the mcp function (the key's secret, not the key), with
/// every AWS endpoint but Secrets Manager's an unused loopback port.
fn env<'a>(secrets: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_LAMBDA_FUNCTION_NAME", "mcp"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/mcp"),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "local/[$LATEST]0"),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
        ("AWS_ENDPOINT_URL_SECRETS_MANAGER", secrets),
        ("TABLE_NAME", "t"),
        ("QUEUE_URL", "http://127.0.0.1:1/000000000000/q"),
        ("AUTH_MODE", "none"),
        ("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true"),
        ("STATE_KEY_SECRET_ARN", ARN),
    ];
    env.extend_from_slice(extra);
    env
}

/// A REST API proxy event carrying the 2026-07-28 request `method` with `params`, with the
/// headers a conforming client sends.
fn event(method: &str, params: Value) -> Vec<u8> {
    let mut event: Value =
        serde_json::from_str(include_str!("../../events/mcp-tools-list.json")).unwrap();
    let body = support::Client::new("http://unused").body(method, params);
    for (k, v) in support::Client::headers(&body) {
        event["headers"][&k] = json!(v);
        event["multiValueHeaders"][&k] = json!([v]);
    }
    event["body"] = json!(body.to_string());
    serde_json::to_vec(&event).unwrap()
}

/// A REST API proxy event carrying a 2026-07-28 `server/discover`.
fn discover_event() -> Vec<u8> {
    event("server/discover", json!({}))
}

/// A synchronous `tools/call` sending back a `requestState`: well formed, so that opening it
/// needs the key, but sealed by nobody.
fn call_with_state_event() -> Vec<u8> {
    event(
        "tools/call",
        json!({
            "name": "confirm_action",
            "arguments": {"action": "delete", "target": "report.txt"},
            "requestState": "A".repeat(96),
        }),
    )
}

/// One invocation of `solo` with `event`: the JSON-RPC answer of its 200 proxy response.
async fn answer(solo: &Solo, event: Vec<u8>) -> Value {
    let out = solo
        .api
        .invoke(event, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", solo.logs()));
    let proxy: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(proxy["statusCode"], 200, "{proxy}");
    serde_json::from_str(proxy["body"].as_str().expect("a text body")).expect("JSON")
}

/// What `solo` wrote once it has written `needle` (its output is read line by line, so it may
/// lag behind its answer), or after 5 s.
async fn logs_with(solo: &Solo, needle: &str) -> String {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !solo.logs().contains(needle) && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    solo.logs()
}

/// The template's configuration (the key's secret named, the bundled manifest): init makes no
/// call, nor does a request that seals or opens no `requestState`. The first request that
/// needs the key reads it; a read that fails answers that request with an internal error that
/// names no secret (the log says which and why), and the next request reads again; a key read
/// is kept.
#[tokio::test]
async fn the_mcp_function_reads_its_state_key_at_first_need_not_at_init() {
    let bins = crate::support_aws::binaries();
    let secrets = SecretsStandIn::start(SecretAnswer::Error(
        "AccessDeniedException",
        "not authorized to perform secretsmanager:GetSecretValue",
    ))
    .await;
    let env = env(&secrets.url, &[("STATE_KEY_SECRET_VERSION", VERSION)]);
    let solo = Solo::spawn("mcp", &bins.mcp, &env).await;
    solo.init(Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let requests = || secrets.requests.lock().unwrap().clone();
    assert_eq!(requests().len(), 0, "no call at init: {:?}", requests());
    for _ in 0..3 {
        let out = answer(&solo, discover_event()).await;
        assert!(out["result"].is_object(), "{out}");
    }
    assert_eq!(requests().len(), 0, "no call without a need");

    // The read fails: this request fails, plainly, and nothing secret is said.
    let out = answer(&solo, call_with_state_event()).await;
    assert_eq!(out["error"]["code"], -32603, "{out}");
    let message = out["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("requestState key") && message.contains("try again"),
        "{out}"
    );
    assert!(
        !out.to_string().contains(ARN) && !out.to_string().contains("AccessDenied"),
        "{out}"
    );
    assert_eq!(requests().len(), 1);
    let logs = logs_with(&solo, "AccessDeniedException").await;
    assert!(
        logs.contains("state_key_unavailable") && logs.contains(ARN),
        "{logs}"
    );
    assert!(logs.contains("AccessDeniedException"), "{logs}");

    // The next request reads again, and gets the key: the state (sealed by nobody) is refused.
    secrets.answer_with(SecretAnswer::Value(KEY.into()));
    for _ in 0..2 {
        let out = answer(&solo, call_with_state_event()).await;
        assert_eq!(out["error"]["code"], -32602, "{out}");
        assert_eq!(
            out["error"]["message"],
            "requestState is invalid, altered, expired, or belongs to another call"
        );
    }
    let requests = requests();
    assert_eq!(
        requests.len(),
        2,
        "read again once, then kept: {requests:?}"
    );
    for r in &requests {
        assert_eq!(r.target, "secretsmanager.GetSecretValue");
        assert!(r.signed, "a SigV4-signed request");
        assert_eq!(r.body["SecretId"], ARN);
        assert_eq!(r.body["VersionId"], VERSION, "the version the stack names");
    }
    assert!(
        !solo.logs().contains(KEY),
        "the key in the logs:\n{}",
        solo.logs()
    );
}

/// A secret whose value is too short to be a key fails the request that needs it, the log
/// naming the variable and the reason and never the value; and the key and its secret together
/// are refused at cold start.
#[tokio::test]
async fn a_state_key_that_cannot_be_had_fails_its_request_or_the_cold_start_without_showing_it() {
    let bins = crate::support_aws::binaries();
    let short = SecretsStandIn::start(SecretAnswer::Value("short-value-xyz".into())).await;
    let solo = Solo::spawn("mcp", &bins.mcp, &env(&short.url, &[])).await;
    solo.init(Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = answer(&solo, call_with_state_event()).await;
    assert_eq!(out["error"]["code"], -32603, "{out}");
    let logs = logs_with(&solo, "at least 32 characters").await;
    for s in ["STATE_KEY_SECRET_ARN", "at least 32 characters"] {
        assert!(logs.contains(s), "{s:?} not in: {logs}");
    }
    assert!(!logs.contains("short-value-xyz") && !out.to_string().contains("short-value-xyz"));

    let solo = Solo::spawn("mcp", &bins.mcp, &env(&short.url, &[("STATE_KEY", KEY)])).await;
    let err = solo
        .init(Duration::from_secs(20))
        .await
        .expect_err("a cold start with the key and its secret");
    for s in ["STATE_KEY_SECRET_ARN", "not both"] {
        assert!(err.contains(s), "{s:?} not in: {err}");
    }
    assert!(!err.contains(KEY), "the key shown: {err}");
}
