//! Long synchronous calls streamed as SSE: progress all along, past 29 s, up to the limit.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Client, TASKS};
use crate::support_aws::{Env, Options};

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
