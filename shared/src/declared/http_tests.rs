use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;
use crate::declared::TraceId;

const DONE: &str = r#"{"done":{"content":[]}}"#;

/// A listener on 127.0.0.1 that keeps the head of each request it gets and answers 200 with
/// `DONE` (a proxy's answer too: it answers whatever it is asked).
async fn recording() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                log.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{DONE}",
                    DONE.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, seen)
}

fn host_with(vars: &[(&'static str, String)]) -> TargetHost {
    let vars = vars.to_vec();
    TargetHost {
        env: Some(Arc::new(move |k: &str| {
            vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })),
        ..TargetHost::default()
    }
}

fn limits(timeout: Duration, trace: Option<TraceId>) -> CallLimits {
    CallLimits {
        timeout,
        max_answer_bytes: 64 * 1024,
        trace,
    }
}

/// Every proxy variable set, a loopback target is still called directly.
#[tokio::test]
async fn a_loopback_target_never_goes_through_a_proxy() {
    let (proxy, hits) = recording().await;
    let (target, seen) = recording().await;
    let host = host_with(&[
        ("HTTP_PROXY", proxy.clone()),
        ("HTTPS_PROXY", proxy.clone()),
        ("ALL_PROXY", proxy.clone()),
    ]);
    let t = HttpTarget::new(&format!("{target}/step"), None, None, &host).unwrap();
    let got = t
        .call(b"{}".to_vec(), limits(Duration::from_secs(5), None))
        .await;
    assert_eq!(got.unwrap(), DONE.as_bytes());
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(
        hits.lock().unwrap().is_empty(),
        "{:?}",
        hits.lock().unwrap()
    );
}

/// An HTTPS target goes through `HTTPS_PROXY` (a `CONNECT`, so the proxy sees no header),
/// unless `NO_PROXY` names its host.
#[tokio::test]
async fn an_https_target_goes_through_https_proxy_unless_no_proxy_names_it() {
    // TEST-NET-1: never answers, so only a proxy can be reached.
    let url = "https://192.0.2.1/step";
    let (proxy, hits) = recording().await;
    let host = host_with(&[("HTTPS_PROXY", proxy.clone())]);
    let t = HttpTarget::new(url, None, None, &host).unwrap();
    let _ = t
        .call(b"{}".to_vec(), limits(Duration::from_secs(2), None))
        .await;
    let seen = hits.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("CONNECT 192.0.2.1:443 "), "{seen:?}");

    let (proxy, hits) = recording().await;
    let host = host_with(&[
        ("https_proxy", proxy.clone()),
        ("NO_PROXY", "localhost,192.0.2.1".into()),
    ]);
    let t = HttpTarget::new(url, None, None, &host).unwrap();
    let got = t
        .call(b"{}".to_vec(), limits(Duration::from_millis(300), None))
        .await;
    assert!(got.is_err());
    assert!(
        hits.lock().unwrap().is_empty(),
        "{:?}",
        hits.lock().unwrap()
    );

    // HTTP_PROXY is for plain http, which only loopback targets speak: never used.
    let host = host_with(&[("HTTP_PROXY", "not a url".into())]);
    assert!(HttpTarget::new(url, None, None, &host).is_ok());
    let host = host_with(&[("HTTPS_PROXY", "::not a url::".into())]);
    assert!(HttpTarget::new(url, None, None, &host).is_err());
}

/// A step carries a `traceparent` in the task's trace, a fresh parent id each time; a
/// synchronous call (no task) one of its own.
#[tokio::test]
async fn each_step_carries_a_traceparent_in_the_tasks_trace() {
    let (target, seen) = recording().await;
    let t = HttpTarget::new(&target, None, None, &TargetHost::default()).unwrap();
    let task = TraceId::of_task("tsk_01EXAMPLE");
    for trace in [Some(task), Some(task), None] {
        t.call(b"{}".to_vec(), limits(Duration::from_secs(5), trace))
            .await
            .unwrap();
    }
    let parents: Vec<(String, String)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|head| {
            let value = head
                .lines()
                .find_map(|l| l.strip_prefix("traceparent: "))
                .unwrap_or_else(|| panic!("no traceparent: {head}"));
            let parts: Vec<&str> = value.split('-').collect();
            assert_eq!(parts.len(), 4, "{value}");
            assert_eq!((parts[0], parts[3]), ("00", "01"), "{value}");
            let hex =
                |s: &str, n| s.len() == n && s.bytes().all(|b| b"0123456789abcdef".contains(&b));
            assert!(hex(parts[1], 32) && hex(parts[2], 16), "{value}");
            assert!(
                !head.contains("x-amzn-trace-id"),
                "no X-Ray trace here: {head}"
            );
            (parts[1].to_owned(), parts[2].to_owned())
        })
        .collect();
    assert_eq!(parents[0].0, task.hex());
    assert_eq!(parents[1].0, task.hex());
    assert_ne!(parents[0].1, parents[1].1, "a parent id per step");
    assert_ne!(parents[2].0, task.hex());
}

/// Where an X-Ray trace is at hand (AWS), the `traceparent` continues it and the X-Ray header
/// goes along as it is.
#[tokio::test]
async fn on_aws_the_steps_trace_is_the_x_ray_trace() {
    fn xray() -> Option<String> {
        Some("Root=1-5759E988-BD862E3FE1BE46A994272793;Parent=53995c3f42cd8ad8;Sampled=1".into())
    }
    let (target, seen) = recording().await;
    let host = TargetHost {
        xray: Some(xray),
        ..TargetHost::default()
    };
    let t = HttpTarget::new(&target, None, None, &host).unwrap();
    t.call(
        b"{}".to_vec(),
        limits(Duration::from_secs(5), Some(TraceId::of_task("t"))),
    )
    .await
    .unwrap();
    let head = seen.lock().unwrap()[0].clone();
    assert!(
        head.contains("traceparent: 00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01\r\n"),
        "{head}"
    );
    assert!(
        head.contains(&format!("x-amzn-trace-id: {}\r\n", xray().unwrap())),
        "{head}"
    );
    assert_eq!(
        xray_parts("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0").map(|p| p.2),
        Some(false)
    );
    for bad in [
        "",
        "Root=2-5759e988-bd862e3fe1be46a994272793",
        "Root=1-5759e988-bd86",
    ] {
        assert_eq!(xray_parts(bad), None, "{bad}");
    }
}

/// A signer that fails: the step fails without a request sent.
struct NoCredentials;

#[async_trait]
impl RequestSigner for NoCredentials {
    async fn sign(&self, _: &str, _: &mut reqwest::Request) -> Result<(), &'static str> {
        Err("no AWS credentials")
    }
}

#[tokio::test]
async fn a_request_that_cannot_be_signed_is_not_sent() {
    let (target, seen) = recording().await;
    let host = TargetHost {
        signer: Some(Arc::new(NoCredentials)),
        ..TargetHost::default()
    };
    let t = HttpTarget::new(&target, None, Some("execute-api"), &host).unwrap();
    let got = t
        .call(b"{}".to_vec(), limits(Duration::from_secs(5), None))
        .await;
    assert_eq!(got, Err(TargetError::Unsigned("no AWS credentials")));
    assert_eq!(
        got.unwrap_err().to_string(),
        "its request could not be signed (no AWS credentials)"
    );
    assert!(seen.lock().unwrap().is_empty());
}

/// `secret_arn` read at first need (the cold start reads nothing).
mod lazy_secret {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:target-key-AbCdEf";

    /// A target on loopback answering `{}` to every step; returns its URL and the secret
    /// header of each request it received.
    async fn target() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |h: http::HeaderMap| {
            let log = log.clone();
            async move {
                let key = h
                    .get("x-key")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                log.lock().unwrap().push(key);
                "{}"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/step", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, seen)
    }

    /// A `secret_arn` is read at the first call, not when the target is built, then kept; a
    /// read that fails fails that call (retried as a step is) without reaching the target,
    /// and the next call reads again.
    #[tokio::test]
    async fn a_secret_arn_is_read_at_the_first_call_kept_and_read_again_after_a_failure() {
        let reads = Arc::new(AtomicUsize::new(0));
        let fetch: crate::declared::SecretFetch = {
            let reads = reads.clone();
            Arc::new(move |arn: String| {
                let n = reads.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    assert_eq!(arn, ARN);
                    match n {
                        0 => Err(format!("secret {arn} could not be read: timeout")),
                        _ => Ok("key-from-secrets".to_owned()),
                    }
                })
            })
        };
        let host = TargetHost {
            secrets: Some(LazySecrets::new(fetch)),
            ..TargetHost::default()
        };
        let (url, seen) = target().await;
        let secret = HttpSecret {
            header: "x-key".into(),
            env: None,
            arn: Some(ARN.into()),
        };
        let t = HttpTarget::new(&url, Some(&secret), None, &host).unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 0, "nothing read when built");
        let limits = CallLimits {
            timeout: Duration::from_secs(5),
            max_answer_bytes: 1024,
            trace: None,
        };
        let err = t.call(b"{}".to_vec(), limits).await.unwrap_err();
        assert_eq!(err, TargetError::SecretUnavailable);
        assert!(err.retried());
        assert!(
            seen.lock().unwrap().is_empty(),
            "no step sent without its secret"
        );
        for _ in 0..2 {
            assert_eq!(t.call(b"{}".to_vec(), limits).await.unwrap(), b"{}");
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "read again once, then kept"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [
                Some("key-from-secrets".to_owned()),
                Some("key-from-secrets".to_owned())
            ]
        );
        // An empty value is no value.
        let empty = TargetHost {
            secrets: Some(LazySecrets::fixed(HashMap::from([(
                ARN.into(),
                String::new(),
            )]))),
            ..TargetHost::default()
        };
        let t = HttpTarget::new(&url, Some(&secret), None, &empty).unwrap();
        assert_eq!(
            t.call(b"{}".to_vec(), limits).await.unwrap_err(),
            TargetError::SecretUnavailable
        );
    }
}

/// Loading a manifest builds no HTTP client (that loads the trusted roots, most of a cold
/// start's work): the first call does, and the next calls reuse it.
#[tokio::test]
async fn the_client_is_built_at_the_first_call_not_when_the_target_is() {
    let (target, seen) = recording().await;
    let t = HttpTarget::new(
        &format!("{target}/step"),
        None,
        None,
        &TargetHost::default(),
    )
    .unwrap();
    assert!(t.client.get().is_none(), "built with the target");
    for _ in 0..2 {
        let got = t
            .call(b"{}".to_vec(), limits(Duration::from_secs(5), None))
            .await;
        assert_eq!(got.unwrap(), DONE.as_bytes());
    }
    let first: *const reqwest::Client = t.client.get().expect("built at the first call");
    assert!(
        std::ptr::eq(first, t.client().unwrap()),
        "one client for every call"
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
}
