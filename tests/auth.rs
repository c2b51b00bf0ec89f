//! The OAuth resource server, black-box: tokens checked on every request, metadata served,
//! and tenants that can never see each other's tasks.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::jwt::{AUDIENCE, ISSUER, claims, now};
use support::sse::{Events, epoch_ms};
use support::{Client, Server, data_dir};

fn start() -> (Server, tempfile::TempDir) {
    support::jwt::start(&[])
}

fn token_with(claims: Value, key_file: &str, kid: &str) -> String {
    support::jwt::sign(&claims, key_file, kid)
}

fn token(tenant: &str) -> String {
    support::jwt::token(tenant)
}

/// POSTs a tools/list with the given Authorization header (or none).
async fn post(c: &Client, auth: Option<&str>) -> (u16, Option<String>) {
    let body = c.body("tools/list", json!({}));
    let mut h = Client::headers(&body);
    if let Some(a) = auth {
        h.push(("authorization".into(), a.into()));
    }
    let resp = reqwest::Client::new()
        .post(&c.url)
        .body(body.to_string())
        .headers(
            h.iter()
                .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                .collect(),
        )
        .send()
        .await
        .unwrap();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status().as_u16(), challenge)
}

#[tokio::test]
async fn missing_and_bad_tokens_get_401_with_the_metadata_challenge() {
    let (s, _d) = start();
    let c = s.client();
    let (status, challenge) = post(&c, None).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge.unwrap(),
        "Bearer resource_metadata=\"http://mcp.test/.well-known/oauth-protected-resource/mcp\""
    );
    let t = now();
    let bad = [
        token_with(
            json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "a", "exp": t - 3600}),
            "test-signing-key.pem",
            "test-key-1",
        ),
        token_with(
            json!({"iss": ISSUER, "aud": "http://other/mcp", "sub": "a", "exp": t + 600}),
            "test-signing-key.pem",
            "test-key-1",
        ),
        token_with(
            json!({"iss": "https://evil.test", "aud": AUDIENCE, "sub": "a", "exp": t + 600}),
            "test-signing-key.pem",
            "test-key-1",
        ),
        token_with(claims("a"), "other-signing-key.pem", "test-key-1"),
        token_with(claims("a"), "test-signing-key.pem", "unknown-kid"),
        "garbage".to_owned(),
    ];
    for tok in bad {
        let (status, challenge) = post(&c, Some(&format!("Bearer {tok}"))).await;
        assert_eq!(status, 401);
        let ch = challenge.unwrap();
        assert!(
            ch.starts_with("Bearer error=\"invalid_token\", resource_metadata="),
            "{ch}"
        );
    }
    let (status, _) = post(&c, Some(&format!("Bearer {}", token("a")))).await;
    assert_eq!(status, 200);
    assert!(
        !s.log.lock().unwrap().contains(&token("a")[..20]),
        "tokens never reach the log"
    );
}

#[tokio::test]
async fn protected_resource_metadata_is_served_at_both_paths() {
    let (s, _d) = start();
    let base = s.url.trim_end_matches("/mcp").to_owned();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let r = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["resource"], AUDIENCE);
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
    }
}

#[tokio::test]
async fn the_challenge_names_metadata_that_is_served_when_the_resource_has_a_path_prefix() {
    const PREFIXED: &str = "http://mcp.test/v1/mcp";
    let dir = data_dir();
    let args = support::jwt::args(PREFIXED, "--jwks-file", &support::jwt::jwks_file());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(dir.path(), &args);
    let (status, challenge) = post(&s.client(), None).await;
    assert_eq!(status, 401);
    let challenge = challenge.unwrap();
    let url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no resource_metadata in {challenge}"));
    assert_eq!(
        url,
        "http://mcp.test/.well-known/oauth-protected-resource/v1/mcp"
    );
    // Follow the challenge's path against this server.
    let path = url.trim_start_matches("http://mcp.test");
    let base = s.url.trim_end_matches("/mcp").to_owned();
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200, "{path}");
    let doc: Value = r.json().await.unwrap();
    assert_eq!(doc["resource"], PREFIXED);
    assert_eq!(doc["authorization_servers"], json!([ISSUER]));
    // The bare and endpoint-suffixed forms keep working; other suffixes do not exist.
    for (path, want) in [
        ("/.well-known/oauth-protected-resource", 200),
        ("/.well-known/oauth-protected-resource/mcp", 200),
        ("/.well-known/oauth-protected-resource/v2/mcp", 404),
    ] {
        let r = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(r.status().as_u16(), want, "{path}");
    }
}

/// A request's answer with its JSON-RPC id removed, for byte comparison.
async fn answer_without_id(c: &Client, tok: &str, method: &str, params: Value) -> (u16, String) {
    let body = c.body(method, params);
    let mut h = Client::headers(&body);
    h.push(("authorization".into(), format!("Bearer {tok}")));
    let a = c.post_raw(body.to_string().as_bytes(), &h).await;
    let id = body["id"].to_string();
    (
        a.status,
        a.text.replace(&format!("\"id\":{id}"), "\"id\":_"),
    )
}

#[tokio::test]
async fn another_tenants_task_is_indistinguishable_from_a_missing_one() {
    let (s, _d) = start();
    let c = s.client().with_tasks();
    let (a, b) = (token("tenant-a"), token("tenant-b"));
    // Tenant A starts a task that waits for input.
    let body = c.body(
        "tools/call",
        json!({"name": "confirm_action", "arguments": {"action": "Pay", "target": "invoice 7"}}),
    );
    let mut h = Client::headers(&body);
    h.push(("authorization".into(), format!("Bearer {a}")));
    let created = c.post_raw(body.to_string().as_bytes(), &h).await.json();
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    // The worker takes it from `working` to `input_required` on its own time.
    c.with_bearer(&a)
        .wait_task(&id, Duration::from_secs(20), |t| {
            t["status"] == "input_required"
        })
        .await;
    let ghost = "tsk_01M8P00000000000000000000000000000000000000";
    for (method, extra) in [
        ("tasks/get", json!({})),
        (
            "tasks/update",
            json!({"inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}}),
        ),
        ("tasks/cancel", json!({})),
    ] {
        let mut p = extra.clone();
        p["taskId"] = json!(id);
        let foreign = answer_without_id(&c, &b, method, p).await;
        let mut p = extra.clone();
        p["taskId"] = json!(ghost);
        let missing = answer_without_id(&c, &b, method, p).await;
        assert_eq!(foreign.0, missing.0, "{method}");
        assert_eq!(
            foreign.1.replace(&id, "ID"),
            missing.1.replace(ghost, "ID"),
            "{method}: byte-identical apart from the id"
        );
        assert!(foreign.1.contains("-32602"), "{method}: {}", foreign.1);
    }
    // Tenant B's attempts changed nothing: A's task still waits for input.
    let (_, own) = answer_without_id(&c, &a, "tasks/get", json!({"taskId": id})).await;
    let own: Value = serde_json::from_str(&own.replace("\"id\":_", "\"id\":0")).unwrap();
    assert_eq!(own["result"]["status"], "input_required");
}

/// A valid token of `tenant` that expires at `exp` (seconds since the epoch).
fn expiring(tenant: &str, exp: u64) -> String {
    let mut c = claims(tenant);
    c["exp"] = json!(exp);
    token_with(c, "test-signing-key.pem", "test-key-1")
}

/// Reads a stream to its end; fails if it is still open after `within`. Returns its messages
/// and when it closed (epoch ms).
async fn to_the_end(events: &mut Events, within: Duration) -> (Vec<Value>, u64) {
    let mut got = Vec::new();
    let read = async {
        // Each message's own wait is longer, so a stream still open fails below, saying so.
        while let Some((m, _)) = events.message(within * 2).await {
            got.push(m);
        }
    };
    let ended = tokio::time::timeout(within, read).await;
    assert!(
        ended.is_ok(),
        "still open after {within:?}; so far: {got:?}"
    );
    (got, epoch_ms())
}

/// `last` is the token-expired error, and the answer closed at the token's `exp` (whole
/// seconds), not long after.
fn assert_ended_at_expiry(last: &Value, exp: u64, closed_ms: u64) {
    assert_eq!(last["error"]["code"], -32600, "{last}");
    let message = last["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("token expired"), "{last}");
    let exp_ms = exp * 1000;
    println!(
        "closed {} ms after the token's exp",
        closed_ms as i64 - exp_ms as i64
    );
    assert!(
        closed_ms + 200 >= exp_ms,
        "closed {} ms before exp",
        exp_ms - closed_ms
    );
    assert!(
        closed_ms <= exp_ms + 3000,
        "closed {} ms after exp",
        closed_ms - exp_ms
    );
}

/// A subscription opened with a token that expires in a few seconds ends then, with a JSON-RPC
/// error, not when the watched task ends or the stream budget (840 s) runs out.
#[tokio::test]
async fn a_subscription_ends_when_its_token_expires() {
    let (s, _d) = start();
    let owner = s.client().with_bearer(&token("tenant-a")).with_tasks();
    let created = owner.tool("wait", json!({"seconds": 600})).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    let exp = now() + 4;
    let c = s
        .client()
        .with_bearer(&expiring("tenant-a", exp))
        .with_tasks();
    let listen = json!({"notifications": {"taskIds": [id]}});
    let (status, ct, mut events) = Events::open(&c, "subscriptions/listen", listen).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let (messages, closed) = to_the_end(&mut events, Duration::from_secs(15)).await;
    assert_eq!(
        messages[0]["params"]["notifications"]["taskIds"],
        json!([id]),
        "{messages:?}"
    );
    assert_ended_at_expiry(messages.last().unwrap(), exp, closed);
}

/// A long synchronous call streamed as SSE (it reports progress) ends when the caller's token
/// expires: the run stops, and the stream's last event is the error.
#[tokio::test]
async fn a_streamed_call_ends_when_its_token_expires() {
    let (s, _d) = start();
    let exp = now() + 4;
    let c = s.client().with_bearer(&expiring("tenant-a", exp));
    let mut body = c.body(
        "tools/call",
        json!({"name": "wait", "arguments": {"seconds": 60}}),
    );
    body["params"]["_meta"]["progressToken"] = json!("p");
    let (status, ct, mut events) = Events::open_body(&c, body).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let (messages, closed) = to_the_end(&mut events, Duration::from_secs(15)).await;
    assert!(
        messages
            .iter()
            .any(|m| m["method"] == "notifications/progress"),
        "{messages:?}"
    );
    assert_ended_at_expiry(messages.last().unwrap(), exp, closed);
}

/// A long call whose token expires before anything was sent (no progress asked, not yet
/// committed to SSE) is answered `401` with the `invalid_token` challenge, at the expiry.
#[tokio::test]
async fn a_call_whose_token_expires_before_its_answer_gets_401() {
    let (s, _d) = start();
    let exp = now() + 3;
    let c = s.client();
    let body = c.body(
        "tools/call",
        json!({"name": "wait", "arguments": {"seconds": 60}}),
    );
    let mut rb = reqwest::Client::new()
        .post(&c.url)
        .bearer_auth(expiring("tenant-a", exp))
        .body(body.to_string());
    for (k, v) in Client::headers(&body) {
        rb = rb.header(k, v);
    }
    let resp = tokio::time::timeout(Duration::from_secs(15), rb.send())
        .await
        .expect("answered within 15 s")
        .unwrap();
    let closed = epoch_ms();
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(status, 401, "{:?}", resp.headers());
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    let challenge = challenge.expect("a challenge");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert_eq!(v["id"], body["id"], "{v}");
    assert_ended_at_expiry(&v, exp, closed);
}
