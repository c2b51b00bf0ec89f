//! The issuer's keys under trouble: a JWKS refresh that is slow does not hold up a token whose
//! key is cached, and an issuer that cannot be reached is the server's `503`, not the client's
//! `401`.

use super::*;

/// POSTs a tools/list with a bearer token; returns the status, the headers and the time taken.
async fn post_with(c: &Client, tok: &str) -> (u16, reqwest::header::HeaderMap, String, Duration) {
    let body = c.body("tools/list", json!({}));
    let mut rb = reqwest::Client::new()
        .post(&c.url)
        .header("authorization", format!("Bearer {tok}"))
        .body(body.to_string());
    for (k, v) in Client::headers(&body) {
        rb = rb.header(k, v);
    }
    let started = Instant::now();
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    (status, headers, text, started.elapsed())
}

#[tokio::test]
async fn a_cached_key_is_not_held_up_by_a_slow_jwks_refresh() {
    use std::sync::atomic::Ordering;
    let issuer = support::jwt::Issuer::start().await;
    let (s, _dir) = start(&jwt_args("--jwks-url", &issuer.url));
    let c = s.client();
    let (status, _, _, _) = post_with(&c, &token("test-key-1")).await;
    assert_eq!(status, 200);
    // An unknown kid may refetch once the 30 s cooldown has passed.
    tokio::time::sleep(Duration::from_secs(31)).await;
    issuer.delay_ms.store(4000, Ordering::SeqCst);
    let random = {
        let c = c.clone();
        tokio::spawn(async move { post_with(&c, &token("random-kid")).await })
    };
    let waited = Instant::now();
    while issuer.hits.load(Ordering::SeqCst) < 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(3),
            "no refresh started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, _, _, took) = post_with(&c, &token("test-key-1")).await;
    println!("cached-kid request during a 4 s JWKS refresh: {status} in {took:?}");
    assert_eq!(status, 200);
    assert!(
        took < Duration::from_secs(1),
        "a cached key waited {took:?} behind a refresh"
    );
    let (status, _, _, took) = random.await.unwrap();
    println!("the random-kid request itself: {status} in {took:?}");
    assert_eq!(status, 401);
}

#[tokio::test]
async fn an_unreachable_issuer_is_503_with_retry_after_not_401() {
    // Nothing listens on a port we just bound and released.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let url = format!("http://{dead}/jwks");
    let (s, _dir) = start(&jwt_args("--jwks-url", &url));
    let c = s.client();
    for _ in 0..2 {
        let (status, headers, text, _) = post_with(&c, &token("test-key-1")).await;
        assert_eq!(status, 503, "{text}");
        assert!(headers.get("www-authenticate").is_none(), "{headers:?}");
        let retry: u64 = headers
            .get("retry-after")
            .expect("Retry-After")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=30).contains(&retry), "{retry}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["error"]["code"], -32603, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("authorization server"),
            "{v}"
        );
    }
    // No token at all is still the client's problem.
    let (status, headers, _, _) = post_with(&c, "").await;
    assert_eq!(status, 401);
    assert!(headers.get("www-authenticate").is_some());
}
