//! A declared tool's `http` target whose header secret lives in Secrets Manager
//! (`secret_arn`), through the mcp and worker binaries: each fetches the secret once at its
//! cold start from a stand-in Secrets Manager (tests/support_aws/secrets.rs), and the target
//! (`examples/python/serve.py --secret-env`) refuses any step without it; a secret the role
//! may not read, or cannot fetch, fails the cold start naming it, never showing a value.

use std::time::Duration;

use serde_json::json;

use super::support::targets::{Helper, repo};
use super::support_aws::{Env, Options, SecretAnswer, SecretsStandIn, Solo};

const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:report-key-AbCdEf";
/// The header's value: the target demands it, and it must never appear in a log.
const KEY: &str = "Bearer report-key-from-secrets-manager-5f1e";

/// One tool over the target at `url`: the secret from Secrets Manager, and a `secret_env`
/// the functions do not have (deployed, the ARN wins; the local server would read the
/// variable).
fn manifest(url: &str) -> String {
    format!(
        r#"[[tool]]
name = "report"
description = "Builds the monthly report in parts."
input_schema = {{ type = "object", required = ["month"], properties = {{ month = {{ type = "string" }}, parts = {{ type = "integer" }} }} }}
target = {{ http = "{url}/", secret_arn = "{ARN}", secret_env = "REPORT_KEY_LOCAL" }}
step_timeout_seconds = 5
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_target_gets_its_header_from_secrets_manager() {
    let secrets = SecretsStandIn::start(SecretAnswer::Value(KEY.into())).await;
    let target = Helper::python_with(
        &repo().join("examples/python/serve.py"),
        &["report:handler", "--secret-env", "REPORT_KEY"],
        &[("REPORT_KEY", KEY)],
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.toml");
    std::fs::write(&path, manifest(&target.url)).unwrap();
    let mut extra = Vec::new();
    for who in ["mcp", "worker"] {
        extra.push((who, "TOOLS_MANIFEST", path.display().to_string()));
        extra.push((who, "TOOL_SECRET_ARNS", ARN.to_owned()));
        extra.push((who, "AWS_ENDPOINT_URL_SECRETS_MANAGER", secrets.url.clone()));
    }
    let Some(env) = Env::start_with("http_secret", Options::default(), &extra).await else {
        return;
    };
    // A task (the worker's steps) and a synchronous call (the mcp function's, inline).
    let c = env.client().with_tasks();
    let id = c
        .tool("report", json!({"month": "2026-11", "parts": 3}))
        .await["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let done = super::poll_terminal(&c, &id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Report 2026-11: 3 parts, total 42"
    );
    let inline = env
        .client()
        .tool("report", json!({"month": "2026-12", "parts": 1}))
        .await;
    assert_eq!(
        inline["content"][0]["text"], "Report 2026-12: 1 parts, total 7",
        "{inline}"
    );
    // Read at the first step of each function that needs it, signed, for this secret only.
    let requests = secrets.requests.lock().unwrap().clone();
    assert!(!requests.is_empty(), "no function fetched the secret");
    for r in &requests {
        assert_eq!(r.target, "secretsmanager.GetSecretValue");
        assert!(r.signed);
        assert_eq!(r.body["SecretId"], ARN);
    }
    // One process each for the mcp and worker functions here: one fetch each, not one a step.
    assert!(requests.len() <= 2, "{} fetches", requests.len());
    assert!(
        !env.logs().contains("report-key-from"),
        "the secret in the logs"
    );
    env.report("report, 3 steps on an http target with a Secrets Manager header");
}

/// What the functions refuse at their cold start: a `secret_arn` their role may not read
/// (not in `ToolSecretArns`). A granted one is not read at cold start at all (the first step
/// that needs it reads it), so one Secrets Manager would refuse does not stop the cold start,
/// and the stand-in receives no request during it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_function_may_not_read_fail_its_cold_start_and_none_is_read_during_it() {
    let bins = tokio::task::spawn_blocking(super::support_aws::binaries)
        .await
        .unwrap();
    let denied = SecretsStandIn::start(SecretAnswer::Error(
        "AccessDeniedException",
        "echo-of-the-secret-value",
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.toml");
    std::fs::write(&path, manifest("https://report.example.com")).unwrap();
    let other = "arn:aws:secretsmanager:us-east-1:123456789012:secret:other-AbCdEf";
    for (who, exe) in [("mcp", &bins.mcp), ("worker", &bins.worker)] {
        for granted in [other, ARN] {
            let env = super::declared::manifest_env(
                who,
                &path,
                &[
                    ("AWS_ENDPOINT_URL_SECRETS_MANAGER", denied.url.as_str()),
                    ("TOOL_SECRET_ARNS", granted),
                    // What the runtime needs to get as far as its first invocation.
                    ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
                    ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
                    ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/f"),
                    ("AWS_LAMBDA_LOG_STREAM_NAME", "local/[$LATEST]0"),
                ],
            );
            let solo = Solo::spawn(who, exe, &env).await;
            let init = solo.init(Duration::from_secs(20)).await;
            if granted == other {
                let err = init.expect_err("a secret this function may not read");
                for s in [ARN, "ToolSecretArns (TOOL_SECRET_ARNS) does not list"] {
                    assert!(err.contains(s), "{who}: {err} (wanted: {s})");
                }
            } else {
                init.unwrap_or_else(|e| panic!("{who}: {e}"));
            }
            assert!(!solo.logs().contains("echo-of"), "{}", solo.logs());
        }
        let requests = denied.requests.lock().unwrap().clone();
        assert!(
            requests.is_empty(),
            "{who} read at cold start: {requests:?}"
        );
    }
}
