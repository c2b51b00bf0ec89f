//! JSON answers behind the buffered and the streaming integration: the same bytes.

use serde_json::{Value, json};

use crate::support::{self, Client};
use crate::support_aws::{Env, Options};

/// Headers that may differ between two answers of the same content: the request id, the
/// date, and how the body is framed (a length when buffered, chunks when streamed).
const FRAMING: [&str; 5] = [
    "x-amzn-requestid",
    "date",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// A request's headers, in order.
type Headers = Vec<(String, String)>;

/// One whole HTTP answer.
#[derive(Debug)]
struct Exchange {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Exchange {
    /// The headers that matter, sorted: everything but [`FRAMING`].
    fn headers_that_matter(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = self
            .headers
            .keys()
            .filter(|k| !FRAMING.contains(&k.as_str()))
            .map(|k| {
                let values = self
                    .headers
                    .get_all(k)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .collect();
                (k.as_str().to_owned(), values)
            })
            .collect();
        out.sort();
        out
    }

    fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// Sends one request (`body` as is, `headers`, plus the method) and reads the whole answer;
/// a POST's answer is checked against the official schema.
async fn exchange(
    http: &reqwest::Client,
    url: &str,
    method: reqwest::Method,
    body: &[u8],
    headers: &[(String, String)],
) -> Exchange {
    let mut rb = http.request(method.clone(), url).body(body.to_vec());
    for (k, v) in headers {
        rb = rb.header(k, v);
    }
    let resp = rb.send().await.expect("the front answers");
    let answer = Exchange {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: resp.bytes().await.expect("a whole body").to_vec(),
    };
    if method == reqwest::Method::POST {
        support::schema::check_answer(
            body,
            answer.status,
            answer.content_type(),
            &String::from_utf8_lossy(&answer.body),
        );
    }
    answer
}

/// The same requests, answered behind the buffered and the streaming integration: the same
/// status, headers (but the request id and the framing) and body bytes — a JSON answer on a
/// streaming integration is one whole body, with no trace of the streaming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_answers_are_byte_identical_buffered_and_streamed() {
    let buffered = Options {
        streaming: false,
        ..Options::default()
    };
    let (buffered, streamed) = tokio::join!(
        Env::start("identical_buffered", buffered),
        Env::start("identical_streamed", Options::default()),
    );
    let (Some(buffered), Some(streamed)) = (buffered, streamed) else {
        return;
    };
    let plain = buffered.client();
    let with_tasks = plain.with_tasks();
    let http = reqwest::Client::new();
    let post = |body: &Value| (serde_json::to_vec(body).unwrap(), Client::headers(body));

    let mut requests: Vec<(&str, Vec<u8>, Headers)> = Vec::new();
    let mut add = |label, (body, headers): (Vec<u8>, Headers)| {
        requests.push((label, body, headers));
    };
    add(
        "server/discover",
        post(&plain.body("server/discover", json!({}))),
    );
    add("tools/list", post(&plain.body("tools/list", json!({}))));
    add(
        "wait 0",
        post(&plain.body(
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": 0}}),
        )),
    );
    add(
        "lint_json (valid)",
        post(&plain.body(
            "tools/call",
            json!({"name": "lint_json", "arguments": {"text": "[1, 2]"}}),
        )),
    );
    add(
        "lint_json (a tool error)",
        post(&plain.body(
            "tools/call",
            json!({"name": "lint_json", "arguments": {"text": "{nope"}}),
        )),
    );
    add(
        "malformed JSON",
        (
            b"{nope".to_vec(),
            Client::headers(&json!({"method": "tools/list"})),
        ),
    );
    add(
        "unknown method",
        post(&plain.body("nope/nothing", json!({}))),
    );
    let listed = plain.body("tools/list", json!({}));
    let (bytes, mut headers) = post(&listed);
    headers.retain(|(k, _)| k != "mcp-method");
    add("no Mcp-Method", (bytes, headers));
    add(
        "unknown tool",
        post(&plain.body(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        )),
    );
    add(
        "invalid arguments",
        post(&plain.body(
            "tools/call",
            json!({"name": "wait", "arguments": {"seconds": "1"}}),
        )),
    );
    add(
        "tasks/get without the extension",
        post(&plain.body("tasks/get", json!({"taskId": "no-such-task"}))),
    );
    add(
        "tasks/get of an unknown id",
        post(&with_tasks.body("tasks/get", json!({"taskId": "no-such-task"}))),
    );

    for (label, body, headers) in &requests {
        let a = exchange(&http, &buffered.url, reqwest::Method::POST, body, headers).await;
        let b = exchange(&http, &streamed.url, reqwest::Method::POST, body, headers).await;
        let text = |x: &Exchange| String::from_utf8_lossy(&x.body).into_owned();
        println!("{label}: {} {} {}", a.status, a.content_type(), text(&a));
        assert_eq!(a.status, b.status, "{label}: {} vs {}", text(&a), text(&b));
        assert_eq!(a.content_type(), b.content_type(), "{label}");
        assert!(
            a.content_type().starts_with("application/json"),
            "{label}: {a:?}"
        );
        assert_eq!(text(&a), text(&b), "{label}");
        assert_eq!(a.body, b.body, "{label}");
        assert_eq!(a.headers_that_matter(), b.headers_that_matter(), "{label}");
    }
    // A request without a body or JSON-RPC: GET on the endpoint.
    let accept_sse = [("accept".to_owned(), "text/event-stream".to_owned())];
    let get = |url| exchange(&http, url, reqwest::Method::GET, b"", &accept_sse);
    let (a, b) = (get(&buffered.url).await, get(&streamed.url).await);
    let text = String::from_utf8_lossy(&a.body);
    println!("GET: {} {} {text}", a.status, a.content_type());
    assert_eq!((a.status, &a.body), (b.status, &b.body), "GET");
    assert_eq!(a.headers_that_matter(), b.headers_that_matter(), "GET");

    // The streamed answers really were streamed: chunked, no length; the buffered ones not.
    let tools = plain.body("tools/list", json!({}));
    let (bytes, headers) = post(&tools);
    let a = exchange(
        &http,
        &buffered.url,
        reqwest::Method::POST,
        &bytes,
        &headers,
    )
    .await;
    let b = exchange(
        &http,
        &streamed.url,
        reqwest::Method::POST,
        &bytes,
        &headers,
    )
    .await;
    assert!(a.headers.contains_key("content-length"), "{a:?}");
    assert!(!b.headers.contains_key("content-length"), "{b:?}");
    assert_eq!(
        b.headers.get("transfer-encoding").map(|v| v.as_bytes()),
        Some(&b"chunked"[..]),
        "{b:?}"
    );
    for env in [&buffered, &streamed] {
        assert_eq!(
            env.counts.sum(Some("tasks"), Some("http"), None),
            2,
            "the two tasks/get went to the tasks function"
        );
        env.report("the same requests, buffered and streamed");
    }
}
