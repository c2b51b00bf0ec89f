//! The identity-provider settings through the REAL Lambda function binaries: each recipe of
//! docs/identity-providers.md, written as the SAM template's parameters, reaches the `mcp` and
//! `tasks` functions the way the template passes them (its `Globals` environment, read from
//! template.yaml), and the provider's access token passes while its near misses are refused;
//! settings that would let the wrong tokens in fail the cold start.
//!
//! No emulator is needed: `tools/list` and the Protected Resource Metadata touch neither
//! DynamoDB nor SQS (the functions' AWS endpoint is an unused loopback port), and the tasks
//! function answers a method it does not serve with `-32601` once the token checked out. The
//! signing keys are served on 127.0.0.1 as the provider's JWKS URL.

#[path = "../shared/tests/common/mod.rs"]
mod common;
mod support;
mod support_aws;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use support::providers::{RESOURCE, Recipe, recipes, token};
use support_aws::Solo;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Every variable the functions' configuration reads for auth (shared/src/aws/lambda/config.rs).
const AUTH_VARIABLES: [&str; 9] = [
    "AUTH_MODE",
    "AUTH_ISSUER",
    "AUTH_RESOURCE",
    "AUTH_AUDIENCE",
    "AUTH_ALLOWED_CLIENT_IDS",
    "AUTH_JWKS_URL",
    "AUTH_TENANT_CLAIM",
    "AUTH_REQUIRED_SCOPES",
    "AUTH_ADVERTISED_SCOPES",
];

/// The template's `Globals: Function: Environment: Variables` entries of the form
/// `NAME: !Ref Parameter`, as (variable, parameter).
fn template_variables() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml");
    let globals = &text[text.find("\nGlobals:\n").expect("a Globals section")..];
    let vars = &globals[globals
        .find("      Variables:\n")
        .expect("Globals variables")..];
    vars.lines()
        .skip(1)
        .take_while(|l| l.starts_with("        ") || l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.trim().split_once(": !Ref ")?;
            Some((name.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// The functions' environment for `params` (template parameter → value): each auth variable
/// the template passes, with the parameter's value (or empty, the template's default for all
/// of them), plus what Lambda and the rest of the configuration need.
fn environment(params: &[(&str, String)]) -> Vec<(String, String)> {
    let mapping = template_variables();
    let mut env: Vec<(String, String)> = [
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "local/[$LATEST]0"),
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
        ("TABLE_NAME", "identity"),
        ("QUEUE_URL", "http://127.0.0.1:1/000000000000/work"),
        ("STATE_KEY", "an-identity-test-key-of-32-characters"),
        ("TOOLS", "builtin"),
        ("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec();
    for var in AUTH_VARIABLES {
        let param = mapping
            .get(var)
            .unwrap_or_else(|| panic!("template.yaml does not pass {var} to the functions"));
        let value = params
            .iter()
            .find(|(p, _)| p == param)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        env.push((var.to_owned(), value));
    }
    env
}

/// A REST proxy event (events/mcp-tools-list.json) with `token` as its bearer, or a GET of
/// `path` when given.
fn event(token: Option<&str>, get: Option<&str>) -> Vec<u8> {
    let mut e: Value = serde_json::from_str(include_str!("../events/mcp-tools-list.json")).unwrap();
    if let Some(t) = token {
        e["headers"]["Authorization"] = json!(format!("Bearer {t}"));
        e["multiValueHeaders"]["Authorization"] = json!([format!("Bearer {t}")]);
    }
    if let Some(path) = get {
        e["httpMethod"] = json!("GET");
        e["path"] = json!(path);
        e["resource"] = json!("/.well-known/{proxy+}");
        e["body"] = Value::Null;
    }
    serde_json::to_vec(&e).unwrap()
}

/// One invocation: the proxy response's status, `WWW-Authenticate` and body.
async fn invoke(solo: &Solo, event: Vec<u8>) -> (u64, String, Value) {
    let out = solo
        .api
        .invoke(event, TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", solo.logs()));
    let proxy: Value = serde_json::from_slice(&out).expect("a proxy response");
    let header = |name: &str| -> Option<String> {
        for (k, v) in proxy["headers"].as_object()? {
            if k.eq_ignore_ascii_case(name) {
                return v.as_str().map(str::to_owned);
            }
        }
        for (k, v) in proxy["multiValueHeaders"].as_object()? {
            if k.eq_ignore_ascii_case(name) {
                return v[0].as_str().map(str::to_owned);
            }
        }
        None
    };
    let body = proxy["body"]
        .as_str()
        .and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (
        proxy["statusCode"].as_u64().expect("a status"),
        header("www-authenticate").unwrap_or_default(),
        body,
    )
}

async fn spawn(who: &'static str, env: &[(String, String)]) -> Solo {
    let exe = tokio::task::spawn_blocking(support_aws::binaries)
        .await
        .unwrap();
    let exe = if who == "mcp" { &exe.mcp } else { &exe.tasks };
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("AWS_LAMBDA_FUNCTION_NAME", who));
    Solo::spawn(who, exe, &env).await
}

async fn check_recipe(r: &Recipe, jwks_url: &str) {
    let env = environment(&r.template_parameters(jwks_url));
    for who in ["mcp", "tasks"] {
        let solo = spawn(who, &env).await;
        solo.init(TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{}: {who}: {e}", r.name));
        let (status, _, body) = invoke(&solo, event(Some(&token(&r.user_a)), None)).await;
        if who == "mcp" {
            assert_eq!(status, 200, "{}: {who}: {body}\n{}", r.name, solo.logs());
            assert!(body["result"]["tools"].is_array(), "{}: {body}", r.name);
        } else {
            // Past the token: the tasks function serves tasks/* only (a near miss below is
            // refused before its method is looked at).
            assert_eq!(status, 404, "{}: {who}: {body}\n{}", r.name, solo.logs());
            assert_eq!(body["error"]["code"], -32601, "{}: {body}", r.name);
        }
        for (what, claims, want) in &r.near_misses {
            let (status, challenge, _) = invoke(&solo, event(Some(&token(claims)), None)).await;
            assert_eq!(status, u64::from(*want), "{}: {who}: {what}", r.name);
            assert!(
                challenge.contains("resource_metadata=\"https://mcp.example.com/"),
                "{}: {who}: {what}: {challenge}",
                r.name
            );
        }
        if who == "mcp" {
            let (status, _, doc) = invoke(
                &solo,
                event(None, Some("/.well-known/oauth-protected-resource/mcp")),
            )
            .await;
            assert_eq!(status, 200, "{}", r.name);
            assert_eq!(doc["resource"], RESOURCE, "{}", r.name);
            assert_eq!(doc["scopes_supported"], json!(r.advertised), "{}", r.name);
        }
        let logs = solo.logs();
        assert!(
            !logs.contains(&token(&r.user_a)[..40]),
            "{}: a token reached the log",
            r.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_providers_recipe_works_through_the_function_binaries() {
    let issuer = support::jwt::Issuer::start().await;
    for r in recipes() {
        check_recipe(&r, &issuer.url).await;
    }
}

/// Allowed client ids without a required scope, or no resource at all: the cold start fails
/// (the runtime's init error), naming the variables, before any request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_that_would_let_the_wrong_tokens_in_fail_the_cold_start() {
    let base = [
        ("AuthMode", "jwt".to_owned()),
        ("AuthIssuer", "https://issuer.example".to_owned()),
        ("AuthJwksUrl", "http://127.0.0.1:1/keys".to_owned()),
    ];
    let cases = [
        (
            vec![
                ("AuthResource", RESOURCE.to_owned()),
                ("AuthAllowedClientIds", "app-client".to_owned()),
            ],
            "AUTH_REQUIRED_SCOPES",
        ),
        (vec![], "AUTH_RESOURCE or AUTH_AUDIENCE"),
        (
            vec![("AuthAudience", "api://default".to_owned())],
            "absolute http(s) URI",
        ),
    ];
    for (extra, says) in cases {
        let mut params = base.to_vec();
        params.extend(extra);
        for who in ["mcp", "tasks"] {
            let solo = spawn(who, &environment(&params)).await;
            let err = solo
                .init(TIMEOUT)
                .await
                .expect_err("a configuration that must not start");
            assert!(err.contains(says), "{who}: {says}: {err}");
        }
    }
}
