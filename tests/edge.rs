//! The HTTP edge under abuse, black-box: clients that send no token but a big body, that
//! dawdle over their headers or body, that hold connections open, that never read their
//! answers (`edge/slow_readers.rs`), that forge an `Origin`, and an issuer that is slow or down
//! (`edge/issuer.rs`). Each test names the bound it checks; the figures it prints
//! (`cargo test --test edge -- --nocapture`) are the ones quoted in docs/edge.md.

mod support;

#[path = "edge/issuer.rs"]
mod issuer;
#[path = "edge/slow_readers.rs"]
mod slow_readers;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Server, data_dir};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use support::jwt::AUDIENCE;
/// One byte short of the default 4 MiB body limit.
const ALMOST_4_MIB: usize = 4 * 1024 * 1024 - 1;

fn jwt_args(jwks_flag: &str, jwks: &str) -> Vec<String> {
    support::jwt::args(AUDIENCE, jwks_flag, jwks)
}

fn start(args: &[String]) -> (Server, tempfile::TempDir) {
    let dir = data_dir();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(dir.path(), &args);
    (s, dir)
}

fn start_with_auth(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let mut args = jwt_args("--jwks-file", &support::jwt::jwks_file());
    args.extend(extra.iter().map(|s| s.to_string()));
    start(&args)
}

fn token(kid: &str) -> String {
    let claims = support::jwt::claims("tenant-a");
    support::jwt::sign(&claims, "test-signing-key.pem", kid)
}

/// `127.0.0.1:PORT` of a server.
fn addr(s: &Server) -> String {
    s.url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// The head of a POST to /mcp declaring `len` body bytes, with the headers a conforming
/// client sends (and `extra` ones).
fn head(addr: &str, len: usize, extra: &[(&str, &str)]) -> String {
    let mut h = format!(
        "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
         mcp-method: tools/list\r\ncontent-length: {len}\r\n"
    );
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// A whole `tools/list` request, `connection: close`.
fn tools_list(addr: &str) -> Vec<u8> {
    let body = Client::new("http://x/mcp").body("tools/list", json!({}));
    let body = serde_json::to_vec(&body).unwrap();
    let mut req = head(addr, body.len(), &[("connection", "close")]).into_bytes();
    req.extend_from_slice(&body);
    req
}

/// Reads until the server closes the connection (EOF or reset) or `within` passes; returns
/// what was read and whether the connection was closed.
async fn read_until_closed(conn: &mut TcpStream, within: Duration) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// The status code of a raw HTTP answer.
fn status_of(answer: &str) -> Option<u16> {
    answer.split(' ').nth(1)?.parse().ok()
}

/// The server's resident memory, from /proc.
fn rss_kib(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test]
async fn a_request_without_a_token_is_refused_before_its_body_is_read() {
    let (s, _d) = start_with_auth(&[]);
    let a = addr(&s);
    let mut conn = TcpStream::connect(&a).await.unwrap();
    conn.write_all(head(&a, ALMOST_4_MIB, &[]).as_bytes())
        .await
        .unwrap();
    conn.write_all(b"{").await.unwrap();
    let started = Instant::now();
    let (answer, _) = read_until_closed(&mut conn, Duration::from_secs(5)).await;
    let took = started.elapsed();
    println!("no token, 4 MiB declared, 1 byte sent: answered in {took:?}");
    assert_eq!(status_of(&answer), Some(401), "{answer:?} after {took:?}");
    assert!(
        answer.contains("www-authenticate: Bearer resource_metadata="),
        "{answer}"
    );
    assert!(
        took < Duration::from_secs(2),
        "the refusal waited {took:?} for a body it does not need"
    );
}

#[tokio::test]
async fn a_client_whose_big_body_is_refused_unread_still_reads_the_answer() {
    // The refusal comes before the body is read; the server then lingers (reading and
    // dropping) instead of resetting the connection under the client's feet.
    let (s, _d) = start_with_auth(&[]);
    let c = s.client();
    for _ in 0..5 {
        let body = c.body("tools/list", json!({"x": "a".repeat(ALMOST_4_MIB - 200)}));
        let mut rb = reqwest::Client::new().post(&c.url).body(body.to_string());
        for (k, v) in Client::headers(&body) {
            rb = rb.header(k, v);
        }
        let r = rb.send().await.expect("an answer, not a broken connection");
        assert_eq!(r.status().as_u16(), 401);
        assert!(r.headers().get("www-authenticate").is_some());
    }
    // And over the size limit, with a valid token: 413, not a reset.
    let body = c.body("tools/list", json!({"x": "a".repeat(5 << 20)}));
    let mut rb = reqwest::Client::new()
        .post(&c.url)
        .header("authorization", format!("Bearer {}", token("test-key-1")))
        .body(body.to_string());
    for (k, v) in Client::headers(&body) {
        rb = rb.header(k, v);
    }
    let r = rb.send().await.expect("an answer, not a broken connection");
    assert_eq!(r.status().as_u16(), 413);
}

#[tokio::test]
async fn unauthenticated_uploads_do_not_pin_memory() {
    let (s, _d) = start_with_auth(&[]);
    let a = addr(&s);
    // Let start-up settle before the first reading.
    let _ = reqwest::get(format!("http://{a}/.well-known/oauth-protected-resource")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(&s);
    let body = vec![b' '; ALMOST_4_MIB - 1];
    let mut held = Vec::new();
    for _ in 0..100 {
        let mut conn = TcpStream::connect(&a).await.unwrap();
        // The server may refuse (and close) before all of it is written: that is the point.
        let _ = conn.write_all(head(&a, ALMOST_4_MIB, &[]).as_bytes()).await;
        let _ = conn.write_all(&body).await;
        held.push(conn);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(&s);
    let growth_mib = after.saturating_sub(before) as f64 / 1024.0;
    println!(
        "100 token-less connections x {ALMOST_4_MIB} bytes declared, all but 1 sent: \
         RSS {before} KiB -> {after} KiB (+{growth_mib:.1} MiB)"
    );
    assert!(
        growth_mib < 64.0,
        "100 unauthenticated uploads grew the server by {growth_mib:.1} MiB"
    );
    drop(held);
}

#[tokio::test]
async fn a_client_that_dawdles_over_its_headers_is_cut_off() {
    let (s, _d) = start(&["--header-read-timeout-secs".into(), "1".into()]);
    let a = addr(&s);
    // Connected, silent.
    let mut idle = TcpStream::connect(&a).await.unwrap();
    // Slowloris: a header line every 200 ms, never the blank line.
    let mut slow = TcpStream::connect(&a).await.unwrap();
    slow.write_all(b"POST /mcp HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    let drip = async {
        for i in 0..40 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if slow
                .write_all(format!("x-drip-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                return started.elapsed();
            }
            // A closed connection shows on read.
            let mut b = [0u8; 256];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(1), slow.read(&mut b)).await
                && n == 0
            {
                return started.elapsed();
            }
        }
        started.elapsed()
    };
    let (slow_cut, (_, idle_closed)) =
        tokio::join!(drip, read_until_closed(&mut idle, Duration::from_secs(4)));
    let idle_cut = started.elapsed();
    println!(
        "header timeout 1 s: idle connection closed: {idle_closed}; slowloris cut after {slow_cut:?}"
    );
    assert!(idle_closed, "a silent connection was kept past 4 s");
    assert!(
        slow_cut < Duration::from_secs(4),
        "a client dripping headers was kept {slow_cut:?} (idle one cut by {idle_cut:?})"
    );
    // The server is fine.
    let c = s.client();
    c.call("tools/list", json!({})).await;
}

#[tokio::test]
async fn a_stalled_body_is_cut_off_with_408() {
    let (s, _d) = start(&["--body-read-timeout-secs".into(), "1".into()]);
    let a = addr(&s);
    let mut conn = TcpStream::connect(&a).await.unwrap();
    conn.write_all(head(&a, 100, &[]).as_bytes()).await.unwrap();
    conn.write_all(b"{\"jsonrpc\":").await.unwrap();
    let started = Instant::now();
    let (answer, closed) = read_until_closed(&mut conn, Duration::from_secs(5)).await;
    let took = started.elapsed();
    println!(
        "body timeout 1 s: stalled body answered {:?} after {took:?}",
        status_of(&answer)
    );
    assert_eq!(status_of(&answer), Some(408), "{answer:?} after {took:?}");
    assert!(closed, "the connection stays open after the 408");
    let json = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let v: Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn connections_over_the_cap_wait_for_a_free_slot() {
    let (s, _d) = start(&[
        "--max-connections".into(),
        "8".into(),
        "--header-read-timeout-secs".into(),
        "30".into(),
    ]);
    let a = addr(&s);
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(TcpStream::connect(&a).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The ninth connects (the kernel's backlog takes it) but is not served...
    let mut ninth = TcpStream::connect(&a).await.unwrap();
    ninth.write_all(&tools_list(&a)).await.unwrap();
    let (early, _) = read_until_closed(&mut ninth, Duration::from_millis(1500)).await;
    println!(
        "9th connection with 8 held (cap 8): {} bytes within 1.5 s",
        early.len()
    );
    assert!(
        early.is_empty(),
        "a ninth connection was served over a cap of 8: {early:?}"
    );
    // ...until one of the eight goes away.
    drop(idle.pop());
    let started = Instant::now();
    let (answer, _) = read_until_closed(&mut ninth, Duration::from_secs(5)).await;
    println!(
        "served {:?} after {:?} once a slot freed",
        status_of(&answer),
        started.elapsed()
    );
    assert_eq!(status_of(&answer), Some(200), "{answer:?}");
    drop(idle);
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.client().call("tools/list", json!({})).await;
}

#[tokio::test]
async fn forged_origins_and_hosts_are_refused() {
    let (s, _d) = start(&[]);
    let a = addr(&s);
    let send = |extra: Vec<(&'static str, String)>, host: Option<&'static str>| {
        let a = a.clone();
        async move {
            let body = Client::new("http://x/mcp").body("tools/list", json!({}));
            let body = serde_json::to_vec(&body).unwrap();
            let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut req = head(host.unwrap_or(a.as_str()), body.len(), &extra);
            req = req.replacen("\r\n\r\n", "\r\nconnection: close\r\n\r\n", 1);
            let mut conn = TcpStream::connect(&a).await.unwrap();
            conn.write_all(req.as_bytes()).await.unwrap();
            conn.write_all(&body).await.unwrap();
            let (answer, _) = read_until_closed(&mut conn, Duration::from_secs(5)).await;
            answer
        }
    };
    for origin in [
        "http://localhost:evil.example",
        "http://localhost:1@evil.example",
        "http://localhost.evil.example",
        "null",
    ] {
        let answer = send(vec![("origin", origin.into())], None).await;
        assert_eq!(status_of(&answer), Some(403), "Origin {origin}: {answer}");
        assert!(answer.contains("Origin not allowed"), "{answer}");
    }
    for host in ["localhost:evil.example", "localhost:1@evil.example"] {
        let answer = send(vec![], Some(host)).await;
        assert_eq!(status_of(&answer), Some(403), "Host {host}: {answer}");
        assert!(answer.contains("Host not allowed"), "{answer}");
    }
    let answer = send(vec![("origin", "http://localhost:8787".into())], None).await;
    assert_eq!(status_of(&answer), Some(200), "{answer}");
}

/// One tenant's requests in flight are capped (`--max-requests-per-tenant`): a client with a
/// valid token that holds requests open with slow bodies gets `429` + `Retry-After` for the
/// next one, its body unread, while another tenant is served as usual; the places come back
/// when the held requests end.
#[tokio::test]
async fn one_tenants_requests_in_flight_are_capped_and_others_are_served() {
    let (s, _d) = start_with_auth(&["--max-requests-per-tenant", "4"]);
    let a = addr(&s);
    let bearer = |tenant: &str| format!("Bearer {}", support::jwt::token(tenant));
    let request = |tenant: &str| {
        let body =
            serde_json::to_vec(&Client::new("http://x/mcp").body("tools/list", json!({}))).unwrap();
        let auth = bearer(tenant);
        let mut req = head(
            &a,
            body.len(),
            &[("connection", "close"), ("authorization", &auth)],
        )
        .into_bytes();
        req.extend_from_slice(&body);
        req
    };
    let send = |req: Vec<u8>| {
        let a = a.clone();
        async move {
            let mut conn = TcpStream::connect(&a).await.unwrap();
            conn.write_all(&req).await.unwrap();
            let (answer, _) = read_until_closed(&mut conn, Duration::from_secs(5)).await;
            answer
        }
    };
    // Four requests of tenant A, admitted, their bodies trickling.
    let mut held = Vec::new();
    let auth = bearer("tenant-a");
    for _ in 0..4 {
        let mut conn = TcpStream::connect(&a).await.unwrap();
        conn.write_all(head(&a, 100, &[("authorization", &auth)]).as_bytes())
            .await
            .unwrap();
        conn.write_all(b"{\"jsonrpc\":").await.unwrap();
        held.push(conn);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let over = send(request("tenant-a")).await;
    assert_eq!(status_of(&over), Some(429), "{over}");
    assert!(
        over.to_ascii_lowercase().contains("retry-after: 1"),
        "{over}"
    );
    let json = &over[over.find("\r\n\r\n").unwrap() + 4..];
    let v: Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    // Another tenant is not held up by A's requests.
    let other = send(request("tenant-b")).await;
    assert_eq!(status_of(&other), Some(200), "{other}");
    // A's places come back once its held requests end.
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = send(request("tenant-a")).await;
    assert_eq!(status_of(&again), Some(200), "{again}");
}
