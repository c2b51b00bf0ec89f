//! The mcp function behind API Gateway's streaming integration (`ResponseTransferMode:
//! STREAM`), through the emulated Lambda environment of tests/support_aws: JSON answers are
//! the same bytes as behind the buffered integration, and a synchronous call of a client
//! without the tasks extension streams its progress while it runs, past API Gateway's 29 s
//! buffered limit, up to the function's `STREAM_SECONDS`, where it ends with `-32021`.
//!
//! Needs the DynamoDB/SQS emulator, like tests/aws_functions.rs (without it: a loud SKIPPED
//! line, or a failure with `REQUIRE_EMULATORS`):
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks --all-features --test aws_streaming -- --nocapture
//! ```

#[path = "../shared/tests/common/mod.rs"]
mod common;
mod support;
mod support_aws;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::sse::{Events, parse_ms};
use support::{Client, TASKS};
use support_aws::{Env, Options};

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

/// An SSE answer read as it arrives.
#[derive(Debug)]
struct SseRead {
    status: u16,
    content_type: String,
    /// Each event's JSON-RPC message, with when its last line arrived (since the request).
    events: Vec<(Duration, Value)>,
    /// When each chunk of the body arrived (since the request), keep-alives included.
    chunks: Vec<Duration>,
    /// Comment lines (`: …`, keep-alives) seen.
    comments: usize,
    /// How the body ended: whole, or cut off (the error).
    end: Result<(), String>,
}

impl SseRead {
    /// The longest time without a byte, from the request to the body's end.
    fn longest_silence(&self) -> Duration {
        let mut last = Duration::ZERO;
        let mut longest = Duration::ZERO;
        for &at in &self.chunks {
            longest = longest.max(at - last);
            last = at;
        }
        longest
    }

    fn progress(&self, token: &str) -> Vec<(Duration, &Value)> {
        self.events
            .iter()
            .filter(|(_, m)| m["method"] == "notifications/progress")
            .inspect(|(_, m)| assert_eq!(m["params"]["progressToken"], token, "{m}"))
            .map(|(at, m)| (*at, m))
            .collect()
    }

    /// The JSON-RPC responses (messages with an `id` and no `method`).
    fn responses(&self) -> Vec<(Duration, &Value)> {
        self.events
            .iter()
            .filter(|(_, m)| m.get("method").is_none())
            .map(|(at, m)| (*at, m))
            .collect()
    }
}

/// POSTs `body` and reads the answer incrementally, event by event, recording arrival times.
async fn read_sse(url: &str, body: &Value) -> SseRead {
    let started = Instant::now();
    let mut rb = reqwest::Client::new()
        .post(url)
        .body(serde_json::to_vec(body).unwrap());
    for (k, v) in Client::headers(body) {
        rb = rb.header(k, v);
    }
    let mut resp = rb.send().await.expect("the front answers");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut read = SseRead {
        status,
        content_type,
        events: Vec::new(),
        chunks: Vec::new(),
        comments: 0,
        end: Ok(()),
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut data: Option<String> = None;
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                read.end = Err(format!("{e:?}"));
                break;
            }
        };
        let at = started.elapsed();
        read.chunks.push(at);
        pending.extend_from_slice(&chunk);
        while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if let Some(d) = data.take() {
                    let msg = serde_json::from_str(&d)
                        .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {d:?}"));
                    read.events.push((at, msg));
                }
            } else if line.starts_with(':') {
                read.comments += 1;
            } else if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                match &mut data {
                    Some(cur) => {
                        cur.push('\n');
                        cur.push_str(d);
                    }
                    None => data = Some(d.to_owned()),
                }
            }
            // `event:`, `id:` and `retry:` lines carry nothing these tests read.
        }
    }
    assert!(
        pending.is_empty() && data.is_none(),
        "the body ended inside an event: {:?}",
        String::from_utf8_lossy(&pending)
    );
    read
}

/// A `tools/call` of `wait` for `seconds` by a client without the tasks extension, asking for
/// progress with `token`.
fn wait_call(c: &Client, seconds: u64, token: &str) -> Value {
    let mut body = c.body(
        "tools/call",
        json!({"name": "wait", "arguments": {"seconds": seconds}}),
    );
    body["params"]["_meta"]["progressToken"] = json!(token);
    body
}

/// What `wait` answers for `seconds`: the answer for 0 (read through the front), its text
/// changed — the same shape exactly.
async fn wait_result(c: &Client, seconds: u64) -> Value {
    let zero = c.tool("wait", json!({"seconds": 0})).await;
    let text = zero.to_string();
    assert!(text.contains("Waited 0 s."), "{zero}");
    serde_json::from_str(&text.replace("Waited 0 s.", &format!("Waited {seconds} s."))).unwrap()
}

/// The checks of a long synchronous call that streamed to its end: progress from the start
/// and all along, then exactly one response, the tool's normal result.
async fn assert_streamed_to_the_end(env: &Env, seconds: u64, token: &str, max_silence: Duration) {
    let c = env.client();
    let expected = wait_result(&c, seconds).await;
    let body = wait_call(&c, seconds, token);
    let read = read_sse(&env.url, &body).await;
    let summary = format!(
        "status {}, {}, {} events, {} comments, {} chunks, end {:?}",
        read.status,
        read.content_type,
        read.events.len(),
        read.comments,
        read.chunks.len(),
        read.end
    );
    println!("{seconds} s call: {summary}");
    assert_eq!(read.status, 200, "{summary}: {:?}", read.events);
    assert!(
        read.content_type.starts_with("text/event-stream"),
        "{summary}"
    );
    assert!(read.end.is_ok(), "the body was cut off: {summary}");
    let progress = read.progress(token);
    assert!(
        progress.len() >= 10,
        "{} progress notifications: {summary}",
        progress.len()
    );
    let (first, last) = (progress[0].0, progress[progress.len() - 1].0);
    assert!(
        first <= Duration::from_secs(5),
        "the first progress came {first:?} after the request"
    );
    let spread = Duration::from_secs(seconds * 2 / 3);
    assert!(
        last - first >= spread,
        "progress from {first:?} to {last:?}: not spread over the run"
    );
    let responses = read.responses();
    assert_eq!(responses.len(), 1, "{:?}", read.events);
    let (at, response) = responses[0];
    assert_eq!(
        read.events.last().map(|(_, m)| m),
        Some(response),
        "the response comes last"
    );
    assert_eq!(response["id"], body["id"], "{response}");
    assert_eq!(response["result"], expected, "{response}");
    assert!(
        at >= Duration::from_secs(seconds),
        "answered after {at:?}, before the wait was over"
    );
    assert!(
        read.longest_silence() <= max_silence,
        "{:?} without a byte (at most {max_silence:?})",
        read.longest_silence()
    );
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

/// A minute-long synchronous call of a client without the tasks extension: behind the
/// streaming integration its progress arrives while it runs, and the result at its end,
/// past the 29 s a buffered integration allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_long_call_streams_its_progress_while_it_runs() {
    let Some(env) = Env::start("stream_a_minute", Options::default()).await else {
        return;
    };
    assert_streamed_to_the_end(&env, 60, "a-minute", Duration::from_secs(20)).await;
    env.report("wait 60 s, synchronous, streamed");
}

/// A call longer than the function's `STREAM_SECONDS` (30 here): it streams its progress, then
/// ends with `-32021` naming the tasks extension when the budget is spent — an answer the
/// client can act on, not a cut-off body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_stream_limit_gets_32021() {
    let options = Options {
        stream_seconds: Some(30),
        ..Options::default()
    };
    let Some(env) = Env::start("stream_past_limit", options).await else {
        return;
    };
    let c = env.client();
    let body = wait_call(&c, 45, "past-the-limit");
    let read = read_sse(&env.url, &body).await;
    let summary = format!(
        "status {}, {}, {} events, {} comments, end {:?}, last {:?}",
        read.status,
        read.content_type,
        read.events.len(),
        read.comments,
        read.end,
        read.events.last()
    );
    println!("45 s call with STREAM_SECONDS=30: {summary}");
    assert_eq!(read.status, 200, "{summary}");
    assert!(
        read.content_type.starts_with("text/event-stream"),
        "{summary}"
    );
    assert!(read.end.is_ok(), "the body was cut off: {summary}");
    assert!(!read.progress("past-the-limit").is_empty(), "{summary}");
    let responses = read.responses();
    assert_eq!(responses.len(), 1, "{summary}");
    let (at, response) = responses[0];
    assert_eq!(response["id"], body["id"], "{response}");
    assert_eq!(response["error"]["code"], -32021, "{response}");
    assert!(
        response["error"]["data"]["requiredCapabilities"]["extensions"]
            .get(TASKS)
            .is_some(),
        "{response}"
    );
    assert!(
        (Duration::from_secs(27)..=Duration::from_secs(40)).contains(&at),
        "-32021 arrived {at:?} after the request, not at the 30 s stream budget"
    );
    env.report("wait 45 s with STREAM_SECONDS=30 → -32021");
}

/// A ten-minute synchronous call streams to its end: progress all along, never more than a
/// minute without a byte, then the result. Ten minutes long, so not run by default:
///
/// ```text
/// scripts/aws-emulator.sh start
/// E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
///   cargo test -p mcp-tasks --all-features --test aws_streaming -- --ignored --nocapture \
///   a_ten_minute_call_streams_to_the_end
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "ten minutes long"]
async fn a_ten_minute_call_streams_to_the_end() {
    let Some(env) = Env::start("stream_ten_minutes", Options::default()).await else {
        return;
    };
    assert_streamed_to_the_end(&env, 600, "ten-minutes", Duration::from_secs(60)).await;
    env.report("wait 600 s, synchronous, streamed");
}

/// `subscriptions/listen` through the streaming mcp function: the acknowledgement, the task
/// as it is, then each change — written by other functions (the worker, tasks/update) — within
/// 2 s of the record's `lastUpdatedAt`, read from the table at the documented rate; then the
/// listen result once the task is terminal.
#[tokio::test]
async fn a_subscription_on_lambda_delivers_each_change_within_two_seconds() {
    let Some(env) = Env::start("listen", Options::default()).await else {
        return;
    };
    let c = env.client().with_tasks();
    let created = c
        .tool("confirm_action", json!({"action": "ship", "target": "v2"}))
        .await;
    let id = created["taskId"].as_str().expect("a task").to_owned();
    let (status, ct, mut events) = Events::open(
        &c,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [id, "tsk_someone_elses"]}}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let (ack, _) = events.message(Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
    let mut latencies = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    loop {
        let (n, wall) = events
            .message(Duration::from_secs(30))
            .await
            .expect("a notification before the end");
        if n.get("result").is_some() {
            assert_eq!(n["result"]["resultType"], "complete", "{n}");
            break;
        }
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        let state = n["params"]["status"].as_str().unwrap().to_owned();
        if !seen.is_empty() {
            let changed = parse_ms(n["params"]["lastUpdatedAt"].as_str().unwrap());
            latencies.push(wall.saturating_sub(changed));
        }
        if state == "input_required" {
            let answers: serde_json::Map<String, Value> = n["params"]["inputRequests"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| {
                    (
                        k.clone(),
                        json!({"action": "accept", "content": {"confirm": true}}),
                    )
                })
                .collect();
            c.call(
                "tasks/update",
                json!({"taskId": id, "inputResponses": answers}),
            )
            .await;
        }
        seen.push(state);
    }
    assert!(
        events.next(Duration::from_secs(10)).await.is_none(),
        "the stream ends"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("completed"),
        "{seen:?}"
    );
    assert!(seen.contains(&"input_required".to_owned()), "{seen:?}");
    // (`working` between the answer and the end lasted less than a read apart: a state that
    // short may be skipped where the stream reads the table; a terminal one never is.)

    // The read rate: one unfinished task watched for its whole run.
    let waiting = c.tool("wait", json!({"seconds": 8})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = env
        .counts
        .sum(Some("mcp"), Some("dynamodb"), Some(&["GetItem"]));
    let opened = Instant::now();
    let (_, _, mut events) = Events::open(
        &c,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [waiting]}}),
    )
    .await;
    let mut last = Value::Null;
    while let Some((m, wall)) = events.message(Duration::from_secs(30)).await {
        if m["params"]["status"] == "completed" {
            let changed = parse_ms(m["params"]["lastUpdatedAt"].as_str().unwrap());
            latencies.push(wall.saturating_sub(changed));
        }
        last = m;
    }
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    let open_for = opened.elapsed();
    let reads = env
        .counts
        .sum(Some("mcp"), Some("dynamodb"), Some(&["GetItem"]))
        - before;
    let worst = latencies.iter().copied().max().unwrap_or(0);
    eprintln!(
        "LISTEN on Lambda: changes {seen:?}, latency {latencies:?} ms (worst {worst} ms); \
         one unfinished task watched {open_for:.1?}: {reads} GetItem by mcp \
         ({:.0}/min)",
        reads as f64 * 60.0 / open_for.as_secs_f64()
    );
    assert!(worst <= 2000, "a change took {worst} ms: {latencies:?}");
    // One read a second, and a few more: agreeing to the task, taking the stream place, the
    // first and the last look.
    let allowed = open_for.as_secs() + 5;
    assert!(
        reads <= allowed,
        "{reads} reads in {open_for:?} (at most {allowed})"
    );
    assert!(
        reads >= open_for.as_secs() / 2,
        "it reads: {reads} in {open_for:?}"
    );
}
