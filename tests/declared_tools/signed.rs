//! What an `http` step sends besides its body: never through `HTTP_PROXY` to a loopback
//! target; an AWS Signature Version 4 (`sigv4`) that an independent implementation accepts
//! (botocore's, in `tests/targets/sigv4_api.py`), and that it refuses when the server's secret
//! key is not the one it expects; and a W3C `traceparent` in the task's trace.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::support::Server;
use super::support::targets::{Helper, repo};
use super::write_manifest;

/// A stand-in HTTP proxy on 127.0.0.1: keeps the head of each request it gets and answers it
/// itself with a step answer `done` ("from the proxy"), as a hostile proxy could.
async fn proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(Mutex::new(Vec::new()));
    let log = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            log.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&head).into_owned());
            let body = r#"{"done":{"content":[{"type":"text","text":"from the proxy"}]}}"#;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    (url, hits)
}

/// With `HTTP_PROXY` set and no `NO_PROXY`, a step to a plain-HTTP loopback target, its secret
/// header included, goes to the target directly, never to the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_target_never_goes_through_http_proxy() {
    let (proxy, hits) = proxy().await;
    let target = Helper::python(&repo().join("tests/targets/bad_target.py"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let manifest = write_manifest(
        dir.path(),
        &format!(
            "[[tool]]\nname = \"near\"\ndescription = \"d\"\ntask = \"required\"\n\
             input_schema = {{ type = \"object\" }}\n\
             target = {{ http = \"{}/ok\", header = \"X-Api-Key\", secret_env = \"NEAR_KEY\" }}\n",
            target.url
        ),
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.env("NEAR_KEY", "never-to-a-proxy")
        .env("HTTP_PROXY", &proxy)
        .env("http_proxy", &proxy)
        .env("ALL_PROXY", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    let s = Server::spawn(
        cmd,
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let c = s.client().with_tasks();
    let id = c.tool("near", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "ok", "{t}");
    assert!(
        hits.lock().unwrap().is_empty(),
        "the proxy was asked: {:?}",
        hits.lock().unwrap()
    );
}

const ACCESS_KEY: &str = "AKIDMCPTASKSTEST";
const SECRET_KEY: &str = "the-right-secret-key-never-logged";

/// The Python with botocore: the moto emulator's venv (scripts/install-tools.sh).
fn botocore_python() -> std::path::PathBuf {
    let python = repo().join(".tools/moto/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash scripts/install-tools.sh` (the SigV4 check uses botocore)",
        python.display()
    );
    python
}

fn sigv4_api(log: &std::path::Path, secret_key: &str) -> Helper {
    Helper::python_in(
        &botocore_python(),
        &repo().join("tests/targets/sigv4_api.py"),
        &[
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            secret_key,
            "--region",
            "eu-west-1",
            "--service",
            "execute-api",
            "--log",
            &log.display().to_string(),
        ],
        &[],
    )
}

fn lines(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A `sigv4` target's steps are signed with the standard credentials and region: the stand-in
/// API (botocore's check) accepts them, and one that expects another secret key answers 403,
/// which fails the task without a retry and without its body; a `plain` entry is signed alike.
/// Every step carries a `traceparent` whose trace id is the task's (the first 16 bytes of
/// SHA-256 of its id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_steps_pass_an_independent_check_and_carry_the_tasks_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (good_log, bad_log) = (dir.path().join("good.jsonl"), dir.path().join("bad.jsonl"));
    let good = sigv4_api(&good_log, SECRET_KEY);
    let bad = sigv4_api(&bad_log, "another-secret-key");
    let entry = |name: &str, url: &str| {
        format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"d\"\ntask = \"required\"\nmax_retries = 2\n\
             input_schema = {{ type = \"object\" }}\n\
             target = {{ http = \"{url}/prod/step?stage=1\", sigv4 = \"execute-api\" }}\n\n"
        )
    };
    // The same endpoint as an unmodified API (`protocol = "plain"`): signed alike.
    let plain = entry("api_plain", &good.url).replace(
        "max_retries = 2\n",
        "max_retries = 2\nprotocol = \"plain\"\n",
    );
    let manifest = write_manifest(
        dir.path(),
        &(entry("api", &good.url) + &entry("api_wrong", &bad.url) + &plain),
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_SESSION_TOKEN", "a-session-token-never-logged")
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", dir.path().join("no-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.path().join("no-credentials"),
        );
    let s = Server::spawn(
        cmd,
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let c = s.client().with_tasks();
    let id = c.tool("api", json!({"n": 1})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "signed", "{t}");
    let seen = lines(&good_log);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["verdict"], "ok");
    assert_eq!(seen[0]["path"], "/prod/step?stage=1");
    // The trace: version 00, the task's trace id, a parent id, sampled.
    let traceparent = seen[0]["traceparent"].as_str().expect("a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    let digest = sha2::Sha256::digest(id.as_bytes());
    let task_trace: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[0], "00", "{traceparent}");
    assert_eq!(parts[1], task_trace, "{traceparent}");
    assert!(
        parts[2].len() == 16 && parts[2].bytes().all(|b| b.is_ascii_hexdigit()),
        "{traceparent}"
    );
    assert_eq!(parts[3], "01", "{traceparent}");

    let id = c.tool("api_wrong", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(
        t["error"]["message"], "Tool api_wrong failed: its target answered HTTP 403",
        "{t}"
    );
    assert!(!t.to_string().contains("SECRET-BODY"), "{t}");
    let refused = lines(&bad_log);
    assert_eq!(refused.len(), 1, "a 403 is not retried: {refused:?}");
    assert_eq!(refused[0]["verdict"], "signature mismatch");

    let id = c.tool("api_plain", json!({"n": 2})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(
        t["result"]["structuredContent"]["done"]["content"][0]["text"], "signed",
        "{t}"
    );
    let seen = lines(&good_log);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1]["verdict"], "ok");
    assert_eq!(
        seen[1]["event"],
        json!({"n": 2}),
        "plain: the arguments alone"
    );

    let log = s.kill();
    for secret in [SECRET_KEY, "a-session-token-never-logged"] {
        assert!(!log.contains(secret), "the log holds a credential:\n{log}");
    }
}

/// The server with the standard credentials `sigv4_api` expects, no other source of them.
fn signing_server(dir: &std::path::Path, manifest: &std::path::Path) -> Server {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env_remove("AWS_SESSION_TOKEN")
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", dir.join("no-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("no-credentials"));
    Server::spawn(
        cmd,
        &dir.join("data"),
        &["--tools", &manifest.display().to_string()],
    )
}

/// A `sigv4` target called without the tasks extension: the same signed request, answered in
/// place (step protocol and `plain` alike); and a signed call that the API does not answer
/// (60 s) abandoned by a cancel, the task `cancelled` long before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_calls_answer_in_place_and_a_cancel_abandons_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("api.jsonl");
    let api = sigv4_api(&log, SECRET_KEY);
    let entry = |name: &str, path: &str, extra: &str| {
        format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"d\"\nmax_retries = 0\n{extra}\n\
             input_schema = {{ type = \"object\" }}\n\
             target = {{ http = \"{}{path}\", sigv4 = \"execute-api\" }}\n\n",
            api.url
        )
    };
    let manifest = write_manifest(
        dir.path(),
        &[
            entry("api", "/prod/step", ""),
            entry("api_plain", "/prod/plain", "protocol = \"plain\""),
            entry(
                "api_slow",
                "/prod/slow",
                "task = \"required\"\nstep_timeout_seconds = 120",
            ),
        ]
        .concat(),
    );
    let s = signing_server(dir.path(), &manifest);
    let sync = s.client();
    let r = sync.tool("api", json!({"n": 1})).await;
    assert_eq!(r["content"][0]["text"], "signed", "{r}");
    let r = sync.tool("api_plain", json!({"n": 2})).await;
    assert_eq!(
        r["structuredContent"]["done"]["content"][0]["text"], "signed",
        "{r}"
    );
    let seen = lines(&log);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|l| l["verdict"] == "ok"), "{seen:?}");
    assert_eq!(
        seen[1]["event"],
        json!({"n": 2}),
        "plain: the arguments alone"
    );

    let c = s.client().with_tasks();
    let id = c.tool("api_slow", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // The signed request was accepted and is waiting for its answer when the cancel comes.
    let start = std::time::Instant::now();
    while !lines(&log).iter().any(|l| l["path"] == "/prod/slow") {
        assert!(start.elapsed() < Duration::from_secs(30), "never called");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let slow = lines(&log).pop().unwrap();
    assert_eq!(slow["verdict"], "ok", "{slow}");
    let asked = std::time::Instant::now();
    c.call("tasks/cancel", json!({"taskId": id})).await;
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    let took = asked.elapsed();
    println!("sigv4 http: cancelled {took:?} after the cancel, mid-request");
    assert!(
        took < Duration::from_secs(30),
        "waited for the API: {took:?}"
    );
    assert_eq!(lines(&log).len(), 3, "asked again");
    let log = s.kill();
    assert!(
        !log.contains(SECRET_KEY),
        "the log holds a credential:\n{log}"
    );
}
