//! The mcp function's `requestState` key from Secrets Manager, as deployed
//! (`STATE_KEY_SECRET_ARN`: the template puts no key in the environment): checked on the real
//! binary against a stand-in Secrets Manager (tests/support_aws/secrets.rs). Without the
//! emulator: the first event, `server/discover`, touches neither DynamoDB nor SQS.

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

/// A REST API proxy event carrying a 2026-07-28 `server/discover`.
fn discover_event() -> Vec<u8> {
    let mut event: Value =
        serde_json::from_str(include_str!("../../events/mcp-tools-list.json")).unwrap();
    let body = support::Client::new("http://unused").body("server/discover", json!({}));
    event["headers"]["Mcp-Method"] = json!("server/discover");
    event["multiValueHeaders"]["Mcp-Method"] = json!(["server/discover"]);
    event["body"] = json!(body.to_string());
    serde_json::to_vec(&event).unwrap()
}

#[tokio::test]
async fn the_mcp_function_fetches_its_state_key_once_at_cold_start() {
    let bins = crate::support_aws::binaries();
    let secrets = SecretsStandIn::start(SecretAnswer::Value(KEY.into())).await;
    let env = env(&secrets.url, &[("STATE_KEY_SECRET_VERSION", VERSION)]);
    let solo = Solo::spawn("mcp", &bins.mcp, &env).await;
    solo.init(Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..3 {
        let out = solo
            .api
            .invoke(discover_event(), Duration::from_secs(20))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", solo.logs()));
        let proxy: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(proxy["statusCode"], 200, "{proxy}");
    }
    let requests = secrets.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "one fetch per cold start: {requests:?}");
    let r = &requests[0];
    assert_eq!(r.target, "secretsmanager.GetSecretValue");
    assert!(r.signed, "a SigV4-signed request");
    assert_eq!(r.body["SecretId"], ARN);
    assert_eq!(r.body["VersionId"], VERSION, "the version the stack names");
    assert!(
        !solo.logs().contains(KEY),
        "the key in the logs:\n{}",
        solo.logs()
    );
}

/// A secret the role may not read, or whose value is too short to be a key, fails the cold
/// start, naming the secret and the reason and never the value; and the key and its secret
/// together are refused.
#[tokio::test]
async fn a_state_key_that_cannot_be_had_fails_the_cold_start_without_showing_it() {
    let bins = crate::support_aws::binaries();
    let denied = SecretsStandIn::start(SecretAnswer::Error(
        "AccessDeniedException",
        "not authorized to perform secretsmanager:GetSecretValue",
    ))
    .await;
    let short = SecretsStandIn::start(SecretAnswer::Value("short-value-xyz".into())).await;
    /// One cold start that must fail: its stand-in, what it adds to the environment, what
    /// the failure must say, and what it must never show.
    struct Refusal<'a> {
        url: &'a str,
        extra: &'a [(&'a str, &'a str)],
        says: &'a [&'a str],
        never: &'a str,
    }
    let cases = [
        Refusal {
            url: &denied.url,
            extra: &[],
            says: &[ARN, "AccessDeniedException"],
            never: KEY,
        },
        Refusal {
            url: &short.url,
            extra: &[],
            says: &["STATE_KEY_SECRET_ARN", "at least 32 characters"],
            never: "short-value-xyz",
        },
        Refusal {
            url: &short.url,
            extra: &[("STATE_KEY", KEY)],
            says: &["STATE_KEY_SECRET_ARN", "not both"],
            never: KEY,
        },
    ];
    for Refusal {
        url,
        extra,
        says,
        never,
    } in cases
    {
        let solo = Solo::spawn("mcp", &bins.mcp, &env(url, extra)).await;
        let err = solo
            .init(Duration::from_secs(20))
            .await
            .expect_err("a cold start without a usable key");
        for s in says {
            assert!(err.contains(s), "{s:?} not in: {err}");
        }
        assert!(!err.contains(never), "{never:?} shown: {err}");
    }
}
