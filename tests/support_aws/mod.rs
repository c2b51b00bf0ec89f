//! A test-only Lambda environment for the real function binaries (`mcp`, `tasks`, `worker`,
//! `sweep`) over the DynamoDB/SQS emulator:
//!
//! - a **Lambda Runtime API** per function (`/2018-06-01/runtime/...` on 127.0.0.1), through
//!   which the test invokes the function with an event and a deadline of its choosing;
//! - an **API Gateway front** (REST API proxy events, v1) on a real port, routing
//!   `Mcp-Method: tasks/*` to `tasks` and everything else to `mcp`, as the custom-domain
//!   routing rules of template.yaml do. The mcp API's integration streams by default
//!   (`ResponseTransferMode: STREAM`; [`Options::streaming`]): the function answers with a
//!   streamed HTTP integration response (a JSON prelude, 8 NUL bytes, then the body), which
//!   the front passes on chunk by chunk within API Gateway's stream limits (15 minutes in
//!   all, 5 minutes without a byte). The tasks API is always buffered;
//! - an **event source mapping** that long-polls the queue, invokes `worker` with SQS batch
//!   events and deletes exactly the messages not reported in `batchItemFailures`;
//! - a **counting proxy** between each function and the emulator, which tallies the DynamoDB
//!   and SQS operations (`X-Amz-Target`) every function performs.
//!
//! Every child process is killed on drop; the functions' logs go to a file under
//! `CARGO_TARGET_TMPDIR` and, when the test panics, to its output.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::types::QueueAttributeName;
use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use http_body_util::BodyExt as _;
use hyper::body::Frame;
use mcp_tasks_core::aws::dynamo::{DynamoStore, create_table};
use mcp_tasks_core::aws::sqs::SqsQueue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// The scheduled event the sweep is invoked with.
const SCHEDULE_EVENT: &str = include_str!("../../events/scheduled-sweep.json");

/// API Gateway's integration timeout (REST APIs): 504 after this.
const GATEWAY_TIMEOUT: Duration = Duration::from_secs(29);
/// API Gateway's limits on a streamed response (REST API, regional endpoint): the whole
/// response, and the longest it may go without a byte (the prelude included).
const STREAM_LIMIT: Duration = Duration::from_secs(15 * 60);
const STREAM_IDLE: Duration = Duration::from_secs(5 * 60);
/// The functions' `Timeout` in template.yaml (the mcp function's behind a buffered
/// integration, and behind a streaming one).
const MCP_TIMEOUT: Duration = Duration::from_secs(30);
const MCP_STREAM_TIMEOUT: Duration = Duration::from_secs(900);
const TASKS_TIMEOUT: Duration = Duration::from_secs(10);
const SWEEP_TIMEOUT: Duration = Duration::from_secs(60);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// A fresh request id (unique within the process; Lambda uses UUIDs).
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = now_ms();
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (t >> 16) as u32,
        t as u16,
        std::process::id() & 0xfff,
        n & 0xfff,
        n
    )
}

// ─────────────────────────────────────────────────────────────── building the binaries

/// Paths of the four function binaries.
pub struct Binaries {
    pub mcp: PathBuf,
    pub tasks: PathBuf,
    pub worker: PathBuf,
    pub sweep: PathBuf,
}

/// Builds the function binaries once per test process (`cargo build --workspace --all-features
/// --bins`, the flags CI's `cargo test --workspace --all-features` uses, so its artifacts are
/// reused) and returns where Cargo put them (whatever `CARGO_TARGET_DIR` says).
pub fn binaries() -> &'static Binaries {
    static BINS: OnceLock<Result<Binaries, String>> = OnceLock::new();
    match BINS.get_or_init(build) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

/// Whether the function binaries are built with the release profile (`AWS_FUNCTIONS_RELEASE=1`,
/// for the cold-start figures of the deployed profile; the default dev profile reuses what
/// `cargo test` already built).
pub fn release_binaries() -> bool {
    std::env::var("AWS_FUNCTIONS_RELEASE").is_ok_and(|v| v == "1")
}

fn build() -> Result<Binaries, String> {
    let started = Instant::now();
    let mut args = vec!["build", "--workspace", "--all-features", "--bins"];
    if release_binaries() {
        args.push("--release");
    }
    let found = cargo_build(&args)?;
    let take = |name: &str| {
        found
            .get(name)
            .cloned()
            .ok_or_else(|| format!("cargo build reported no `{name}` binary"))
    };
    let bins = Binaries {
        mcp: take("mcp")?,
        tasks: take("tasks")?,
        worker: take("worker")?,
        sweep: take("sweep")?,
    };
    eprintln!(
        "aws_functions: function binaries ready in {:.1?}",
        started.elapsed()
    );
    Ok(bins)
}

// ─────────────────────────────────────────────────────────────── the Lambda Runtime API

/// What a function answered.
pub enum Output {
    /// A buffered answer (`lambda_http::run`, `lambda_runtime::run`): the whole payload.
    Buffered(Bytes),
    /// A streamed answer (`Lambda-Runtime-Function-Response-Mode: streaming`), handed over
    /// as soon as its prelude is complete.
    Streamed(Streamed),
}

/// A streamed HTTP integration response (`application/vnd.awslambda.http-integration-response`)
/// as API Gateway sees it: the prelude, then the body as the function writes it.
pub struct Streamed {
    /// The prelude's `statusCode`.
    pub status: StatusCode,
    /// The prelude's `headers` (a header sent more than once is an array there).
    pub headers: HeaderMap,
    /// The prelude's `cookies` (the `Set-Cookie` values).
    pub cookies: Vec<String>,
    /// The body's chunks as they arrive. `None` ends the body whole; an `Err` ends it broken
    /// (an error trailer, the invocation's deadline, the function's connection lost).
    pub body: mpsc::Receiver<Result<Bytes, String>>,
}

type Reply = Result<Output, String>;

struct Invocation {
    id: String,
    event: Bytes,
    timeout: Duration,
    reply: oneshot::Sender<Reply>,
}

/// The Runtime API of one function: `invoke` queues an event; the function's runtime client
/// takes it from `/invocation/next` and answers on `/invocation/{id}/response` or `/error`.
pub struct RuntimeApi {
    name: &'static str,
    tx: mpsc::UnboundedSender<Invocation>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    /// Taken invocations: their deadline (epoch ms) and where the answer goes.
    inflight: Mutex<HashMap<String, (u64, oneshot::Sender<Reply>)>>,
    /// Why the function can no longer be invoked (its process exited, or init failed).
    dead: Mutex<Option<String>>,
    pub addr: SocketAddr,
    /// Invocations handed to the function.
    pub invocations: AtomicU64,
    /// The X-Ray trace root (`Root=1-…`) each invocation was given, in order.
    pub trace_roots: Mutex<Vec<String>>,
    /// When each taken invocation was handed over, until it is answered.
    taken_at: Mutex<HashMap<String, Instant>>,
    /// Billed time, as Lambda counts it: from handing an invocation over to its answer (for a
    /// streamed answer, to its prelude), summed over invocations, in milliseconds.
    pub busy_ms: AtomicU64,
    /// When the process was spawned, and how long it took to ask for its first invocation:
    /// Lambda's "Init Duration" (runtime start, SDK clients, configuration).
    spawned: Mutex<Option<Instant>>,
    init: OnceLock<Duration>,
    /// Woken when `init` is set or the process dies: [`Solo::init`] waits on it, so the
    /// harness sleeps while a function starts instead of polling beside it.
    init_or_death: tokio::sync::Notify,
}

impl RuntimeApi {
    async fn start(name: &'static str) -> (Arc<Self>, JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let api = Arc::new(Self {
            name,
            tx,
            rx: tokio::sync::Mutex::new(rx),
            inflight: Mutex::new(HashMap::new()),
            dead: Mutex::new(None),
            addr: listener.local_addr().unwrap(),
            invocations: AtomicU64::new(0),
            taken_at: Mutex::new(HashMap::new()),
            trace_roots: Mutex::new(Vec::new()),
            busy_ms: AtomicU64::new(0),
            spawned: Mutex::new(None),
            init: OnceLock::new(),
            init_or_death: tokio::sync::Notify::new(),
        });
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(respond),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(fail))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(api.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(no_delay(listener), app).await;
        });
        (api, server)
    }

    /// Invokes the function with `event` and returns its buffered answer; the invocation's
    /// deadline is `timeout` after the function takes it (as on Lambda, where the timeout
    /// starts with the invocation). A streamed answer is an error here.
    pub async fn invoke(&self, event: Vec<u8>, timeout: Duration) -> Result<Bytes, String> {
        match self.invoke_with_response_stream(event, timeout).await? {
            Output::Buffered(payload) => Ok(payload),
            Output::Streamed(_) => Err(format!(
                "{}: a streamed answer where a buffered one was expected",
                self.name
            )),
        }
    }

    /// [`RuntimeApi::invoke`] that also takes a streamed answer (Lambda's
    /// `InvokeWithResponseStream`, as API Gateway's streaming integration calls it): returns
    /// once the answer is complete (buffered) or its prelude is (streamed).
    pub async fn invoke_with_response_stream(&self, event: Vec<u8>, timeout: Duration) -> Reply {
        if let Some(why) = self.dead.lock().unwrap().clone() {
            return Err(format!("{}: {why}", self.name));
        }
        let (reply, rx) = oneshot::channel();
        let id = request_id();
        self.tx
            .send(Invocation {
                id: id.clone(),
                event: event.into(),
                timeout,
                reply,
            })
            .map_err(|_| format!("{}: runtime API closed", self.name))?;
        // Waiting for the function to take it, plus the timeout, plus a little.
        match tokio::time::timeout(timeout * 2 + Duration::from_secs(5), rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(format!(
                "{}: the function went away during the invocation",
                self.name
            )),
            Err(_) => {
                self.inflight.lock().unwrap().remove(&id);
                Err(format!("{}: Task timed out after {timeout:?}", self.name))
            }
        }
    }

    /// The function's init duration, once it asked for its first invocation.
    pub fn init_duration(&self) -> Option<Duration> {
        self.init.get().copied()
    }

    /// Invocation `id` was answered (or failed): its time counts as billed.
    fn answered(&self, id: &str) {
        if let Some(at) = self.taken_at.lock().unwrap().remove(id) {
            self.busy_ms
                .fetch_add(at.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// The process exited: nothing will answer any more.
    fn mark_dead(&self, why: String) {
        self.dead.lock().unwrap().get_or_insert(why);
        self.init_or_death.notify_one();
        // Dropping the senders fails the waiting invocations at once.
        self.inflight.lock().unwrap().clear();
        if let Ok(mut rx) = self.rx.try_lock() {
            while rx.try_recv().is_ok() {}
        }
    }
}

async fn next(State(api): State<Arc<RuntimeApi>>) -> Response {
    if let Some(at) = *api.spawned.lock().unwrap() {
        let _ = api.init.set(at.elapsed());
        api.init_or_death.notify_one();
    }
    let inv = api.rx.lock().await.recv().await;
    let Some(inv) = inv else {
        return StatusCode::GONE.into_response();
    };
    let deadline = now_ms() + inv.timeout.as_millis() as u64;
    api.inflight
        .lock()
        .unwrap()
        .insert(inv.id.clone(), (deadline, inv.reply));
    api.invocations.fetch_add(1, Ordering::Relaxed);
    api.taken_at
        .lock()
        .unwrap()
        .insert(inv.id.clone(), Instant::now());
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header("lambda-runtime-aws-request-id", &inv.id)
        .header("lambda-runtime-deadline-ms", deadline.to_string())
        .header(
            "lambda-runtime-invoked-function-arn",
            format!(
                "arn:aws:lambda:us-east-1:000000000000:function:{}",
                api.name
            ),
        )
        .header("lambda-runtime-trace-id", {
            let root = format!(
                "Root=1-{:08x}-{:0>24}",
                now_ms() / 1000,
                inv.id.replace('-', "").get(..24).unwrap_or("0"),
            );
            api.trace_roots.lock().unwrap().push(root.clone());
            // Sampled, as Lambda's header is for a traced invocation the sampling rules keep.
            format!("{root};Parent={:016x};Sampled=1", now_ms())
        })
        .body(Body::from(inv.event))
        .unwrap()
}

fn accepted() -> Response {
    (StatusCode::ACCEPTED, axum::Json(json!({"status": "OK"}))).into_response()
}

async fn respond(
    State(api): State<Arc<RuntimeApi>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    // `run_with_streaming_response` answers streamed: the prelude, then the body as written.
    if req
        .headers()
        .get("lambda-runtime-function-response-mode")
        .is_some_and(|v| v == "streaming")
    {
        return respond_streamed(api, id, req.into_body()).await;
    }
    let body = match Bytes::from_request(req, &()).await {
        Ok(b) => b,
        Err(rejection) => return rejection.into_response(),
    };
    api.answered(&id);
    match api.inflight.lock().unwrap().remove(&id) {
        // Lambda stops an invocation at its deadline: an answer after it is a timeout.
        Some((deadline, tx)) if now_ms() > deadline => {
            let late = now_ms() - deadline;
            let _ = tx.send(Err(format!(
                "{}: Task timed out (answered {late} ms after the deadline)",
                api.name
            )));
            (StatusCode::GONE, "the invocation timed out").into_response()
        }
        Some((_, tx)) => {
            let _ = tx.send(Ok(Output::Buffered(body)));
            accepted()
        }
        None => (StatusCode::BAD_REQUEST, "unknown or timed-out request id").into_response(),
    }
}

/// The end of a streamed answer's prelude.
const PRELUDE_DELIMITER: [u8; 8] = [0; 8];
/// The largest prelude taken (a status, headers and cookies: a few hundred bytes).
const MAX_PRELUDE: usize = 64 << 10;

/// A streamed answer: decodes the prelude as its bytes arrive and hands the status and headers
/// to the waiting invocation once the delimiter is in, then forwards each body chunk as it
/// arrives, until the body ends, an error trailer ends it broken, or the invocation's deadline
/// cuts it (Lambda stops the function there; the client sees the body cut off).
async fn respond_streamed(api: Arc<RuntimeApi>, id: String, mut body: Body) -> Response {
    api.answered(&id);
    let Some((deadline, tx)) = api.inflight.lock().unwrap().remove(&id) else {
        return (StatusCode::BAD_REQUEST, "unknown or timed-out request id").into_response();
    };
    let name = api.name;
    let timed_out = |late: &str| format!("{name}: Task timed out ({late})");
    if now_ms() > deadline {
        let late = now_ms() - deadline;
        let _ = tx.send(Err(timed_out(&format!(
            "answered {late} ms after the deadline"
        ))));
        return (StatusCode::GONE, "the invocation timed out").into_response();
    }
    let cut = tokio::time::Instant::now() + Duration::from_millis(deadline - now_ms());

    // The prelude: JSON up to the first 8 NUL bytes (JSON text holds no NUL).
    let mut head: Vec<u8> = Vec::new();
    let (prelude, rest) = loop {
        let frame = match tokio::time::timeout_at(cut, body.frame()).await {
            Err(_) => {
                let _ = tx.send(Err(timed_out("no prelude before the deadline")));
                return (StatusCode::GONE, "the invocation timed out").into_response();
            }
            Ok(None) => {
                let _ = tx.send(Err(format!(
                    "{name}: the streamed answer ended before its prelude was complete"
                )));
                return accepted();
            }
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(format!("{name}: the streamed answer broke: {e}")));
                return (StatusCode::BAD_REQUEST, "the response stream broke").into_response();
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                let trailers = frame.into_trailers().unwrap_or_default();
                let why = error_trailer(&trailers).unwrap_or_else(|| "no error type".into());
                eprintln!("{name}: the streamed answer ended in its prelude: {why}");
                let _ = tx.send(Err(format!("{name}: {why}")));
                return accepted();
            }
        };
        let from = head.len().saturating_sub(PRELUDE_DELIMITER.len() - 1);
        head.extend_from_slice(&data);
        if let Some(at) = head[from..]
            .windows(PRELUDE_DELIMITER.len())
            .position(|w| w == PRELUDE_DELIMITER)
            .map(|i| from + i)
        {
            let rest = Bytes::copy_from_slice(&head[at + PRELUDE_DELIMITER.len()..]);
            match parse_prelude(&head[..at]) {
                Ok(p) => break (p, rest),
                Err(e) => {
                    let _ = tx.send(Err(format!("{name}: malformed prelude: {e}")));
                    return (StatusCode::BAD_REQUEST, "malformed prelude").into_response();
                }
            }
        }
        if head.len() > MAX_PRELUDE {
            let _ = tx.send(Err(format!(
                "{name}: no prelude delimiter in the first {MAX_PRELUDE} bytes"
            )));
            return (StatusCode::BAD_REQUEST, "malformed prelude").into_response();
        }
    };
    let (status, headers, cookies) = prelude;
    let (chunks, rx) = mpsc::channel(16);
    // The front may have given up waiting: the body is still read (and dropped) to its end.
    let mut out = tx
        .send(Ok(Output::Streamed(Streamed {
            status,
            headers,
            cookies,
            body: rx,
        })))
        .ok()
        .map(|_| chunks);

    // The body, chunk by chunk. Whether the front reads or not, the function's writes are
    // taken, as Lambda does (a client that went away does not stop the function).
    let mut pending = Some(rest).filter(|r| !r.is_empty());
    loop {
        let data = match pending.take() {
            Some(d) => d,
            None => match tokio::time::timeout_at(cut, body.frame()).await {
                Err(_) => {
                    let why = timed_out("the deadline passed while the answer streamed");
                    eprintln!("{why}: the stream is cut");
                    break_stream(out.take(), why);
                    return (StatusCode::GONE, "the invocation timed out").into_response();
                }
                // The end of the body: dropping the sender ends the stream whole.
                Ok(None) => return accepted(),
                Ok(Some(Err(e))) => {
                    let why = format!("{name}: the streamed answer broke: {e}");
                    eprintln!("{why}");
                    break_stream(out.take(), why);
                    return (StatusCode::BAD_REQUEST, "the response stream broke").into_response();
                }
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(d) => d,
                    Err(frame) => {
                        let trailers = frame.into_trailers().unwrap_or_default();
                        if let Some(why) = error_trailer(&trailers) {
                            eprintln!("{name}: the streamed answer ended with an error: {why}");
                            break_stream(out.take(), format!("{name}: {why}"));
                        }
                        continue;
                    }
                },
            },
        };
        // lambda_runtime 1.5 writes a mid-stream error as trailer text into the body.
        if let Some(why) = error_text(&data) {
            eprintln!("{name}: the streamed answer ended with an error: {why}");
            break_stream(out.take(), format!("{name}: {why}"));
            continue;
        }
        let Some(o) = out.take() else { continue };
        match tokio::time::timeout_at(cut, o.send(Ok(data))).await {
            Ok(Ok(())) => out = Some(o),
            // The front went away (the client closed the connection): drop the rest.
            Ok(Err(_)) => {}
            Err(_) => {
                let why = timed_out("the deadline passed while the answer streamed");
                eprintln!("{why}: the stream is cut");
                break_stream(Some(o), why);
                return (StatusCode::GONE, "the invocation timed out").into_response();
            }
        }
    }
}

/// Ends a streamed body broken: the error goes after the chunks already queued (however long
/// the front takes to read them), then the sender is dropped.
fn break_stream(out: Option<mpsc::Sender<Result<Bytes, String>>>, why: String) {
    if let Some(out) = out {
        tokio::spawn(async move {
            let _ = out.send(Err(why)).await;
        });
    }
}

/// A streamed answer's prelude (lambda_runtime's `MetadataPrelude`): `statusCode`, `headers`
/// (each value a string, or an array of strings for a header sent more than once: http_serde's
/// `header_map`), `cookies`.
fn parse_prelude(json: &[u8]) -> Result<(StatusCode, HeaderMap, Vec<String>), String> {
    let v: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let status = v["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(u16::try_from(s).ok()?).ok())
        .ok_or("no valid statusCode")?;
    let mut headers = HeaderMap::new();
    for (k, vs) in v["headers"].as_object().into_iter().flatten() {
        let k = HeaderName::try_from(k.as_str()).map_err(|e| format!("header {k:?}: {e}"))?;
        let values = match vs {
            Value::Array(a) => a.iter().collect(),
            one => vec![one],
        };
        for value in values {
            let value = value
                .as_str()
                .and_then(|s| HeaderValue::from_str(s).ok())
                .ok_or_else(|| format!("header {k}: not a header value: {value}"))?;
            headers.append(k.clone(), value);
        }
    }
    let cookies = v["cookies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect();
    Ok((status, headers, cookies))
}

/// `Lambda-Runtime-Function-Error-Type` (and the base64 `…-Error-Body`) of a streamed answer's
/// trailers, as one line for the log.
fn error_trailer(trailers: &HeaderMap) -> Option<String> {
    let kind = trailers.get("lambda-runtime-function-error-type")?;
    let body = trailers
        .get("lambda-runtime-function-error-body")
        .map(|b| decode_error_body(b.as_bytes()))
        .unwrap_or_default();
    Some(format!(
        "{}: {body}",
        String::from_utf8_lossy(kind.as_bytes())
    ))
}

/// The same two fields written as text into the body (`Name: value\r\n` lines), as
/// lambda_runtime 1.5 reports an error of the body stream.
fn error_text(data: &[u8]) -> Option<String> {
    const TYPE: &[u8] = b"lambda-runtime-function-error-type:";
    if data.len() < TYPE.len() || !data[..TYPE.len()].eq_ignore_ascii_case(TYPE) {
        return None;
    }
    let mut trailers = HeaderMap::new();
    for line in String::from_utf8_lossy(data).split("\r\n") {
        if let Some((k, v)) = line.split_once(':')
            && let (Ok(k), Ok(v)) = (
                HeaderName::try_from(k.trim()),
                HeaderValue::from_str(v.trim()),
            )
        {
            trailers.insert(k, v);
        }
    }
    error_trailer(&trailers)
}

fn decode_error_body(b64: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(b64).into_owned())
}

async fn fail(State(api): State<Arc<RuntimeApi>>, Path(id): Path<String>, body: Bytes) -> Response {
    api.answered(&id);
    match api.inflight.lock().unwrap().remove(&id) {
        Some((_, tx)) => {
            let _ = tx.send(Err(String::from_utf8_lossy(&body).into_owned()));
            accepted()
        }
        None => (StatusCode::BAD_REQUEST, "unknown or timed-out request id").into_response(),
    }
}

async fn init_error(State(api): State<Arc<RuntimeApi>>, body: Bytes) -> Response {
    api.mark_dead(format!("init error: {}", String::from_utf8_lossy(&body)));
    accepted()
}

// ─────────────────────────────────────────────────────────────── call counting

/// Calls by (who, service, operation): the functions' DynamoDB/SQS calls through the proxy
/// (`service` = `dynamodb`/`sqs`), and the HTTP requests the front routed (`service` =
/// `http`, operation = the `Mcp-Method`).
#[derive(Default)]
pub struct Counts(Mutex<BTreeMap<(String, String, String), u64>>);

impl Counts {
    fn add(&self, who: &str, service: &str, op: &str) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((who.into(), service.into(), op.into()))
            .or_default() += 1;
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<(String, String, String), u64> {
        self.0.lock().unwrap().clone()
    }

    /// The sum over entries matching the filter (`None` matches anything).
    pub fn sum(&self, who: Option<&str>, service: Option<&str>, ops: Option<&[&str]>) -> u64 {
        self.snapshot()
            .iter()
            .filter(|((w, s, o), _)| {
                who.is_none_or(|x| x == w)
                    && service.is_none_or(|x| x == s)
                    && ops.is_none_or(|x| x.contains(&o.as_str()))
            })
            .map(|(_, n)| n)
            .sum()
    }
}

/// DynamoDB operations that read.
pub const DYNAMO_READS: &[&str] = &["GetItem", "BatchGetItem", "Query", "Scan"];
/// DynamoDB operations that write.
pub const DYNAMO_WRITES: &[&str] = &[
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
];

/// The IAM actions template.yaml grants each function (`Policies` of its resource), by the
/// function's name here. Read from the template's text: every `dynamodb:…`/`sqs:…` action named
/// in the resource's block (comments stripped). Resource scoping (table vs index ARN) is not
/// checked; the point is that a code path never needs an action its role lacks.
pub fn granted_actions() -> BTreeMap<&'static str, Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml");
    let mut out = BTreeMap::new();
    for (resource, who) in [
        ("McpFunction", "mcp"),
        ("TasksFunction", "tasks"),
        ("WorkerFunction", "worker"),
        ("SweepFunction", "sweep"),
    ] {
        let head = format!("\n  {resource}:\n");
        let start = text
            .find(&head)
            .unwrap_or_else(|| panic!("{resource} in template.yaml"));
        let block = &text[start + head.len()..];
        // The block ends at the next resource (a two-space-indented key).
        let end = block
            .match_indices('\n')
            .map(|(i, _)| i + 1)
            .find(|&i| {
                let line = &block[i..];
                line.len() > 2 && line.starts_with("  ") && !line[2..].starts_with([' ', '#'])
            })
            .unwrap_or(block.len());
        let actions = block[..end]
            .lines()
            .map(|l| l.split(" #").next().unwrap_or(""))
            .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == ':')))
            .filter(|w| w.starts_with("dynamodb:") || w.starts_with("sqs:"))
            .map(str::to_owned)
            .collect();
        out.insert(who, actions);
    }
    out
}

struct Proxy {
    who: &'static str,
    dynamo: String,
    sqs: String,
    http: reqwest::Client,
    counts: Arc<Counts>,
}

const HOP_BY_HOP: [&str; 5] = [
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
];

/// Forwards one SDK request to the emulator, counting it by `X-Amz-Target`.
async fn forward(State(p): State<Arc<Proxy>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (service, op, upstream) = if let Some(op) = target.strip_prefix("DynamoDB_20120810.") {
        ("dynamodb", op, &p.dynamo)
    } else if let Some(op) = target.strip_prefix("AmazonSQS.") {
        ("sqs", op, &p.sqs)
    } else {
        ("other", target, &p.sqs)
    };
    p.counts.add(p.who, service, op);
    let url = format!(
        "{}{}",
        upstream.trim_end_matches('/'),
        parts.uri.path_and_query().map_or("/", |x| x.as_str())
    );
    let mut rb = p.http.request(parts.method.clone(), url).body(body);
    for (k, v) in &parts.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            rb = rb.header(k, v);
        }
    }
    let resp = match rb.send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let mut out = Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    let bytes = resp.bytes().await.unwrap_or_default();
    out.body(Body::from(bytes)).unwrap()
}

/// `listener` with Nagle's algorithm off on every connection it accepts, as the servers these
/// stand in for send: Lambda's Runtime API is a Go server (Go turns it off on every TCP
/// connection), and an emulated front that held a streamed answer's first chunk until the
/// client's delayed ACK (40 ms on Linux) would add that wait to every streamed answer.
fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            eprintln!("emulated AWS: TCP_NODELAY refused: {e}");
        }
    })
}

async fn serve(app: Router) -> (String, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(no_delay(listener), app).await;
    });
    (url, server)
}

// ─────────────────────────────────────────────────────────────── the API Gateway front

struct Front {
    mcp: Arc<RuntimeApi>,
    tasks: Arc<RuntimeApi>,
    counts: Arc<Counts>,
    /// Whether the mcp API's integration streams ([`Options::streaming`]).
    streaming: bool,
}

fn gateway_error(status: StatusCode, message: &str) -> Response {
    let mut r = (status, axum::Json(json!({ "message": message }))).into_response();
    r.headers_mut()
        .insert("x-amzn-errortype", HeaderValue::from_static("GatewayError"));
    r
}

/// `a=1&b=2&a=3` as API Gateway's two query maps (no percent-decoding: the tests send none).
fn query_maps(query: Option<&str>) -> (Value, Value) {
    let Some(q) = query.filter(|q| !q.is_empty()) else {
        return (Value::Null, Value::Null);
    };
    let mut single = serde_json::Map::new();
    let mut multi: serde_json::Map<String, Value> = serde_json::Map::new();
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        single.insert(k.into(), json!(v));
        multi
            .entry(k.to_owned())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!(v));
    }
    (Value::Object(single), Value::Object(multi))
}

/// One HTTP request → a REST API proxy event → the routed function → its proxy response →
/// HTTP, with API Gateway's own answers where it would give them.
async fn gateway(State(f): State<Arc<Front>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 10 << 20).await else {
        return gateway_error(StatusCode::PAYLOAD_TOO_LARGE, "Request Too Long");
    };
    let mcp_method = parts
        .headers
        .get("mcp-method")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The routing rules: `Mcp-Method: tasks/*` → the tasks API, everything else → the mcp API.
    let to_tasks = mcp_method
        .as_deref()
        .is_some_and(|m| m.starts_with("tasks/"));
    let method = parts.method.as_str();
    let path = parts.uri.path();
    // The resources each API has (template.yaml): tasks: POST /mcp; mcp: ANY /mcp and
    // GET /.well-known/{proxy+}.
    let (resource, path_params) = match (to_tasks, method, path) {
        (true, "POST", "/mcp") | (false, _, "/mcp") => ("/mcp", Value::Null),
        (false, "GET", p) if p.len() > "/.well-known/".len() && p.starts_with("/.well-known/") => (
            "/.well-known/{proxy+}",
            json!({"proxy": &p["/.well-known/".len()..]}),
        ),
        _ => return gateway_error(StatusCode::FORBIDDEN, "Missing Authentication Token"),
    };
    let (api, timeout) = match (to_tasks, f.streaming) {
        (true, _) => (&f.tasks, TASKS_TIMEOUT),
        (false, false) => (&f.mcp, MCP_TIMEOUT),
        (false, true) => (&f.mcp, MCP_STREAM_TIMEOUT),
    };
    f.counts.add(
        api.name,
        "http",
        mcp_method.as_deref().unwrap_or("(no Mcp-Method)"),
    );
    let mut single = serde_json::Map::new();
    let mut multi: serde_json::Map<String, Value> = serde_json::Map::new();
    for (k, v) in &parts.headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        single.insert(k.as_str().into(), json!(v));
        multi
            .entry(k.as_str().to_owned())
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!(v));
    }
    let (query, multi_query) = query_maps(parts.uri.query());
    let (body, is_base64) = match std::str::from_utf8(&body) {
        _ if body.is_empty() => (Value::Null, false),
        Ok(s) => (json!(s), false),
        Err(_) => (
            json!(base64::engine::general_purpose::STANDARD.encode(&body)),
            true,
        ),
    };
    let request_id = request_id();
    let event = json!({
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": query,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": path_params,
        "stageVariables": null,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": if to_tasks { "tasksapi01" } else { "mcpapi0001" },
            "domainName": parts.headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("localhost"),
            "httpMethod": method,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": parts.headers.get("user-agent").and_then(|h| h.to_str().ok())},
            "path": format!("/v1{path}"),
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "requestTimeEpoch": now_ms(),
            "resourceId": "res001",
            "resourcePath": resource,
            "stage": "v1"
        },
        "body": body,
        "isBase64Encoded": is_base64,
    });
    let event = serde_json::to_vec(&event).unwrap();
    if f.streaming && !to_tasks {
        return gateway_streamed(api, event, timeout, &request_id).await;
    }
    let invoked = tokio::time::timeout(GATEWAY_TIMEOUT, api.invoke(event, timeout)).await;
    let reply = match invoked {
        Err(_) => {
            return gateway_error(StatusCode::GATEWAY_TIMEOUT, "Endpoint request timed out");
        }
        Ok(Err(e)) => {
            eprintln!("front: {} invocation failed: {e}", api.name);
            return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
        }
        Ok(Ok(r)) => r,
    };
    let Ok(proxy) = serde_json::from_slice::<Value>(&reply) else {
        return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
    };
    let Some(status) = proxy["statusCode"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
    else {
        // API Gateway's "Malformed Lambda proxy response".
        return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
    };
    let mut headers = HeaderMap::new();
    // API Gateway merges `multiValueHeaders` and `headers`.
    if let Some(m) = proxy["multiValueHeaders"].as_object() {
        for (k, vs) in m {
            for v in vs.as_array().into_iter().flatten() {
                if let (Ok(k), Some(Ok(v))) = (
                    HeaderName::try_from(k.as_str()),
                    v.as_str().map(HeaderValue::from_str),
                ) {
                    headers.append(k, v);
                }
            }
        }
    }
    if let Some(m) = proxy["headers"].as_object() {
        for (k, v) in m {
            if let (Ok(k), Some(Ok(v))) = (
                HeaderName::try_from(k.as_str()),
                v.as_str().map(HeaderValue::from_str),
            ) && !headers.contains_key(&k)
            {
                headers.insert(k, v);
            }
        }
    }
    finish_headers(&mut headers, &request_id);
    let body = match (&proxy["body"], proxy["isBase64Encoded"].as_bool()) {
        (Value::String(s), Some(true)) => {
            match base64::engine::general_purpose::STANDARD.decode(s) {
                Ok(b) => b,
                Err(_) => return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error"),
            }
        }
        (Value::String(s), _) => s.clone().into_bytes(),
        _ => Vec::new(),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// What API Gateway does to an integration's response headers, buffered or streamed: drops the
/// hop-by-hop ones, adds its request id, and labels an unlabelled body JSON.
fn finish_headers(headers: &mut HeaderMap, request_id: &str) {
    for h in HOP_BY_HOP {
        headers.remove(h);
    }
    headers.insert(
        "x-amzn-requestid",
        HeaderValue::from_str(request_id).unwrap(),
    );
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
}

/// The streaming integration (`ResponseTransferMode: STREAM`): not bound by the 29-second
/// integration timeout; the status and headers go out once the function's prelude is in, the
/// body chunk by chunk as the function writes it, cut off after [`STREAM_LIMIT`] in all or
/// [`STREAM_IDLE`] without a byte, or where the function's stream broke.
async fn gateway_streamed(
    api: &RuntimeApi,
    event: Vec<u8>,
    timeout: Duration,
    request_id: &str,
) -> Response {
    let started = tokio::time::Instant::now();
    let invoked =
        tokio::time::timeout(STREAM_IDLE, api.invoke_with_response_stream(event, timeout)).await;
    let streamed = match invoked {
        Err(_) => {
            return gateway_error(StatusCode::GATEWAY_TIMEOUT, "Endpoint request timed out");
        }
        Ok(Err(e)) => {
            eprintln!("front: {} invocation failed: {e}", api.name);
            return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
        }
        Ok(Ok(Output::Buffered(_))) => {
            eprintln!(
                "front: {} answered buffered behind a streaming integration",
                api.name
            );
            return gateway_error(StatusCode::BAD_GATEWAY, "Internal server error");
        }
        Ok(Ok(Output::Streamed(s))) => s,
    };
    let mut headers = streamed.headers;
    for cookie in &streamed.cookies {
        if let Ok(v) = HeaderValue::from_str(cookie) {
            headers.append(header::SET_COOKIE, v);
        }
    }
    finish_headers(&mut headers, request_id);
    let (tx, rx) = mpsc::channel(16);
    let cut = Arc::new(AtomicBool::new(false));
    tokio::spawn(pump(
        api.name,
        streamed.body,
        tx,
        cut.clone(),
        started + STREAM_LIMIT,
    ));
    let mut response = Response::new(Body::new(Chunks { rx, cut }));
    *response.status_mut() = streamed.status;
    *response.headers_mut() = headers;
    response
}

/// Passes a streamed body on to the client within API Gateway's limits. The function's chunks
/// go out in order, and a broken stream (an error trailer, the invocation's deadline) after
/// them; at `end` (the whole response's limit), or after [`STREAM_IDLE`] without a chunk, the
/// response is cut at once. Either way the client sees the body end without its last chunk.
/// Returns when the body ended, was cut, or the client went away (dropping `from`).
async fn pump(
    who: &'static str,
    mut from: mpsc::Receiver<Result<Bytes, String>>,
    to: mpsc::Sender<Result<Bytes, String>>,
    cut: Arc<AtomicBool>,
    end: tokio::time::Instant,
) {
    let cut_off = |why: String| {
        eprintln!("front: the {who} response is cut off: {why}");
        cut.store(true, Ordering::SeqCst);
    };
    loop {
        let next = tokio::select! {
            _ = tokio::time::sleep_until(end) => {
                return cut_off(format!("API Gateway's {STREAM_LIMIT:?} limit"));
            }
            r = tokio::time::timeout(STREAM_IDLE, from.recv()) => match r {
                Ok(next) => next,
                Err(_) => return cut_off(format!("no byte for {STREAM_IDLE:?} (the idle limit)")),
            },
        };
        // The end of the body.
        let Some(item) = next else { return };
        let broken = item.is_err();
        if let Err(e) = &item {
            eprintln!("front: the {who} response is cut off: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep_until(end) => {
                return cut_off(format!("API Gateway's {STREAM_LIMIT:?} limit"));
            }
            sent = to.send(item) => if sent.is_err() || broken { return },
        }
    }
}

/// A response body fed by [`pump`]: each `Ok` a data frame, an `Err` (or the cut flag) the
/// connection's end without the body's last chunk.
struct Chunks {
    rx: mpsc::Receiver<Result<Bytes, String>>,
    cut: Arc<AtomicBool>,
}

impl HttpBody for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let cut_off = || Poll::Ready(Some(Err(std::io::Error::other("the stream was cut"))));
        if self.cut.load(Ordering::SeqCst) {
            return cut_off();
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) if self.cut.load(Ordering::SeqCst) => cut_off(),
            Poll::Ready(next) => {
                Poll::Ready(next.map(|item| item.map(Frame::data).map_err(std::io::Error::other)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

// ─────────────────────────────────────────────────────────────── the event source mapping

/// What the event source mapping did.
#[derive(Default)]
pub struct EsmStats {
    /// Worker invocations that carried at least one record of the task.
    pub invocations_by_task: HashMap<String, u32>,
    pub batches: u32,
    pub deleted: u32,
    pub reported_failed: u32,
    pub invoke_errors: u32,
    /// How long each worker invocation took, in milliseconds, in order.
    pub invocation_ms: Vec<u64>,
}

async fn esm(
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    worker: Arc<RuntimeApi>,
    timeout: Duration,
    stats: Arc<Mutex<EsmStats>>,
) {
    loop {
        let invoke = |event: Value| {
            let (worker, stats) = (worker.clone(), stats.clone());
            async move {
                // Counted as the invocation starts, as on Lambda: a test that sees a task
                // finished by this invocation must find the invocation counted already.
                {
                    let mut tasks: Vec<String> = event["Records"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str()?).ok())
                        .filter_map(|b| b["task_id"].as_str().map(str::to_owned))
                        .collect();
                    tasks.sort();
                    tasks.dedup();
                    let mut s = stats.lock().unwrap();
                    s.batches += 1;
                    for t in tasks {
                        *s.invocations_by_task.entry(t).or_default() += 1;
                    }
                }
                let body = worker
                    .invoke(serde_json::to_vec(&event).unwrap(), timeout)
                    .await?;
                Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
            }
        };
        let arn = "arn:aws:sqs:us-east-1:000000000000:work";
        let wait = Duration::from_secs(1);
        let r = match mcp_tasks_core::aws::esm::round(&sqs, &queue_url, arn, 10, wait, invoke).await
        {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("esm: receive failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut s = stats.lock().unwrap();
        s.invocation_ms.push(r.invoke_time.as_millis() as u64);
        match r.invoke_error {
            // The whole batch failed: SQS redelivers all of it after the visibility timeout.
            Some(e) => {
                eprintln!("esm: the worker invocation failed ({e}); the batch will be redelivered");
                s.invoke_errors += 1;
            }
            None => {
                s.deleted += r.deleted as u32;
                s.reported_failed += r.failed as u32;
            }
        }
    }
}

// ─────────────────────────────────────────────────────────────── the environment

/// Choices a test makes.
#[derive(Clone, Copy)]
pub struct Options {
    /// The worker function's timeout: every worker invocation's deadline is this far away.
    pub worker_timeout: Duration,
    /// `SWEEP_STALE_SECONDS` of the sweep function.
    pub sweep_stale_seconds: u64,
    /// Whether the mcp API's integration streams, as template.yaml deploys it (the default):
    /// the mcp function runs with `RESPONSE_STREAMING=true` and a 900 s timeout, and the front
    /// passes its streamed answers on as they arrive. `false`: the buffered integration (the
    /// 29 s integration timeout, a 30 s function, whole answers).
    pub streaming: bool,
    /// `STREAM_SECONDS` of the mcp function when streaming (`None`: its default, 840).
    pub stream_seconds: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            worker_timeout: Duration::from_secs(4),
            sweep_stale_seconds: 1,
            streaming: true,
            stream_seconds: None,
        }
    }
}

/// The four functions, their front, queue feed and counters, over a fresh table and queue.
pub struct Env {
    pub test: String,
    pub table: String,
    pub queue_url: String,
    /// The API Gateway front's MCP endpoint (`http://127.0.0.1:port/mcp`).
    pub url: String,
    pub dynamo: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub counts: Arc<Counts>,
    pub esm: Arc<Mutex<EsmStats>>,
    pub mcp: Arc<RuntimeApi>,
    pub tasks: Arc<RuntimeApi>,
    pub worker: Arc<RuntimeApi>,
    pub sweep: Arc<RuntimeApi>,
    children: Vec<(&'static str, Child)>,
    background: Vec<JoinHandle<()>>,
    log: Arc<Mutex<String>>,
    /// What the functions sent to the X-Ray daemon (`AWS_XRAY_DAEMON_ADDRESS`), a datagram
    /// each.
    xray: Arc<Mutex<Vec<String>>>,
    started: Instant,
}

impl Env {
    /// Starts everything, or returns `None` after the loud SKIPPED line when the emulator
    /// endpoints are not set (a failure with `REQUIRE_EMULATORS`).
    pub async fn start(test: &str, options: Options) -> Option<Env> {
        let [dynamo_endpoint, sqs_endpoint] = crate::common::endpoints(
            "aws_functions",
            [crate::common::DYNAMODB, crate::common::SQS],
        )?;
        let bins = tokio::task::spawn_blocking(binaries).await.unwrap();
        let started = Instant::now();

        // The table and the queue, with the project's own code.
        let dynamo =
            aws_sdk_dynamodb::Client::new(&crate::common::sdk_config(&dynamo_endpoint).await);
        let sqs = aws_sdk_sqs::Client::new(&crate::common::sdk_config(&sqs_endpoint).await);
        let table = crate::common::unique("fn-tasks");
        create_table(&dynamo, &table)
            .await
            .expect("creating the table");
        let queue_url = SqsQueue::create_queue(&sqs, &crate::common::unique("fn-work"))
            .await
            .expect("creating the queue");
        // As on AWS, the queue's visibility timeout is at least the worker's timeout; short, so
        // that a failed batch comes back soon.
        let visibility = options.worker_timeout.as_secs().max(1) + 2;
        sqs.set_queue_attributes()
            .queue_url(&queue_url)
            .attributes(
                QueueAttributeName::VisibilityTimeout,
                visibility.to_string(),
            )
            .send()
            .await
            .expect("setting the visibility timeout");

        let counts = Arc::new(Counts::default());
        let log = Arc::new(Mutex::new(String::new()));
        let mut background = Vec::new();
        // The X-Ray daemon Lambda runs beside a function with active tracing: here a UDP
        // socket that keeps every datagram.
        let (xray_addr, xray, daemon) = xray_daemon().await;
        background.push(daemon);
        let mut children = Vec::new();
        let mut apis = Vec::new();
        let http = reqwest::Client::new();
        for (who, exe) in [
            ("mcp", &bins.mcp),
            ("tasks", &bins.tasks),
            ("worker", &bins.worker),
            ("sweep", &bins.sweep),
        ] {
            let (proxy_url, proxy) =
                serve(Router::new().fallback(forward).with_state(Arc::new(Proxy {
                    who,
                    dynamo: dynamo_endpoint.clone(),
                    sqs: sqs_endpoint.clone(),
                    http: http.clone(),
                    counts: counts.clone(),
                })))
                .await;
            background.push(proxy);
            let (api, server) = RuntimeApi::start(who).await;
            background.push(server);
            let mut cmd = Command::new(exe);
            cmd.env_clear()
                .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
                .env("AWS_LAMBDA_FUNCTION_NAME", who)
                .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
                .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
                .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{who}"))
                .env("AWS_LAMBDA_LOG_STREAM_NAME", "local/[$LATEST]0")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_DEFAULT_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("AWS_EC2_METADATA_DISABLED", "true")
                .env("AWS_ENDPOINT_URL", &proxy_url)
                .env("RUST_LOG", "info")
                // What Lambda sets with the template's `LoggingConfig: {LogFormat: JSON}`.
                .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
                .env("AWS_LAMBDA_LOG_LEVEL", "INFO")
                .env("NO_COLOR", "1")
                .env("TABLE_NAME", &table)
                .env("QUEUE_URL", &queue_url)
                .env("TOOLS", "builtin")
                .env("AWS_XRAY_DAEMON_ADDRESS", &xray_addr)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            match who {
                "mcp" | "tasks" => {
                    cmd.env("AUTH_MODE", "none")
                        .env("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true");
                    if who == "mcp" {
                        cmd.env("STATE_KEY", "an-aws-functions-test-key-of-32-characters");
                        if options.streaming {
                            cmd.env("RESPONSE_STREAMING", "true");
                            if let Some(s) = options.stream_seconds {
                                cmd.env("STREAM_SECONDS", s.to_string());
                            }
                        }
                    }
                }
                "worker" => {
                    cmd.env("MAX_RECEIVES", "5");
                }
                _ => {
                    cmd.env(
                        "SWEEP_STALE_SECONDS",
                        options.sweep_stale_seconds.to_string(),
                    );
                }
            }
            *api.spawned.lock().unwrap() = Some(Instant::now());
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {}: {e}", exe.display()));
            pipe_lines(who, child.stdout.take().unwrap(), log.clone(), None);
            pipe_lines(
                who,
                child.stderr.take().unwrap(),
                log.clone(),
                Some(api.clone()),
            );
            children.push((who, child));
            apis.push(api);
        }
        let [mcp, tasks, worker, sweep]: [Arc<RuntimeApi>; 4] = apis.try_into().ok().unwrap();

        let front = Arc::new(Front {
            mcp: mcp.clone(),
            tasks: tasks.clone(),
            counts: counts.clone(),
            streaming: options.streaming,
        });
        let (front_url, server) = serve(Router::new().fallback(gateway).with_state(front)).await;
        background.push(server);

        let stats = Arc::new(Mutex::new(EsmStats::default()));
        background.push(tokio::spawn(esm(
            sqs.clone(),
            queue_url.clone(),
            worker.clone(),
            options.worker_timeout,
            stats.clone(),
        )));

        Some(Env {
            test: test.to_owned(),
            table,
            queue_url,
            url: format!("{front_url}/mcp"),
            dynamo,
            sqs,
            counts,
            esm: stats,
            mcp,
            tasks,
            worker,
            sweep,
            children,
            background,
            log,
            xray,
            started,
        })
    }

    /// A 2026-07-28 client of the front.
    pub fn client(&self) -> crate::support::Client {
        crate::support::Client::new(&self.url)
    }

    /// The task store over the same table (for tasks a client cannot create: a short TTL, a
    /// task stored but never enqueued).
    pub fn store(&self) -> DynamoStore {
        DynamoStore::new(self.dynamo.clone(), self.table.clone())
    }

    /// Invokes the sweep function with the scheduled event; returns its report.
    pub async fn run_sweep(&self) -> Value {
        let out = self
            .sweep
            .invoke(SCHEDULE_EVENT.as_bytes().to_vec(), SWEEP_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("the sweep failed: {e}"));
        serde_json::from_slice(&out).expect("a JSON sweep report")
    }

    /// Worker invocations whose batch named `task_id`.
    pub fn worker_invocations_for(&self, task_id: &str) -> u32 {
        self.esm
            .lock()
            .unwrap()
            .invocations_by_task
            .get(task_id)
            .copied()
            .unwrap_or(0)
    }

    /// Prints the measured calls as one labelled line per function and one of totals.
    pub fn report(&self, lifecycle: &str) {
        self.assert_permitted();
        let snap = self.counts.snapshot();
        let mut line = format!("AWS CALLS [{}: {lifecycle}]", self.test);
        for who in ["mcp", "tasks", "worker", "sweep"] {
            let parts: Vec<String> = snap
                .iter()
                .filter(|((w, _, _), _)| w == who)
                .map(|((_, s, o), n)| format!("{s}.{o}={n}"))
                .collect();
            if !parts.is_empty() {
                line.push_str(&format!(" | {who}: {}", parts.join(" ")));
            }
        }
        let esm = self.esm.lock().unwrap();
        line.push_str(&format!(
            " || TOTAL dynamodb reads={} writes={} sqs sends={} | worker invocations={} \
             (esm batches={} deleted={} reported failed={} invoke errors={}; ms each: {:?})",
            self.counts.sum(None, Some("dynamodb"), Some(DYNAMO_READS)),
            self.counts.sum(None, Some("dynamodb"), Some(DYNAMO_WRITES)),
            self.counts.sum(
                None,
                Some("sqs"),
                Some(&["SendMessage", "SendMessageBatch"])
            ),
            self.worker.invocations.load(Ordering::Relaxed),
            esm.batches,
            esm.deleted,
            esm.reported_failed,
            esm.invoke_errors,
            esm.invocation_ms,
        ));
        line.push_str(&format!(
            " | billed ms: mcp={} tasks={} worker={} (invocations: mcp={} tasks={})",
            self.mcp.busy_ms.load(Ordering::Relaxed),
            self.tasks.busy_ms.load(Ordering::Relaxed),
            self.worker.busy_ms.load(Ordering::Relaxed),
            self.mcp.invocations.load(Ordering::Relaxed),
            self.tasks.invocations.load(Ordering::Relaxed),
        ));
        println!("{line}");
    }

    /// Every DynamoDB/SQS call a function made is an action its role in template.yaml grants:
    /// a missing permission fails here instead of in production.
    pub fn assert_permitted(&self) {
        let granted = granted_actions();
        for ((who, service, op), n) in self.counts.snapshot() {
            let action = match service.as_str() {
                "dynamodb" => format!("dynamodb:{op}"),
                "sqs" => format!("sqs:{op}"),
                _ => continue,
            };
            let theirs = granted.get(who.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            assert!(
                theirs.contains(&action),
                "{who} called {action} x{n}, but template.yaml grants it only {theirs:?}"
            );
        }
    }

    /// Every line a function logged is a JSON object (CloudWatch's JSON log format), and none
    /// contains any of `secrets` (task arguments, answers, results: never logged).
    pub fn assert_logs_are_json_without(&self, secrets: &[&str]) {
        let logs = self.logs();
        let mut lines = 0;
        for line in logs.lines() {
            let Some((who, text)) = line.split_once("] ") else {
                continue;
            };
            assert!(
                serde_json::from_str::<serde_json::Map<String, Value>>(text).is_ok(),
                "{who}] logged a line that is not a JSON object: {text}"
            );
            for s in secrets {
                assert!(!text.contains(s), "{who}] logged {s:?}: {text}");
            }
            lines += 1;
        }
        assert!(lines > 0, "the functions logged nothing");
    }

    /// The functions' logs so far.
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The X-Ray segments the functions sent so far, each checked to be a daemon datagram
    /// (the format header line, then one segment document).
    pub fn xray_segments(&self) -> Vec<serde_json::Value> {
        self.xray
            .lock()
            .unwrap()
            .iter()
            .map(|d| {
                let (head, body) = d.split_once('\n').expect("a header line");
                assert_eq!(head, r#"{"format":"json","version":1}"#, "{d}");
                serde_json::from_str(body).expect("a JSON segment")
            })
            .collect()
    }

    /// The raw datagrams sent to the X-Ray daemon so far.
    pub fn xray_datagrams(&self) -> Vec<String> {
        self.xray.lock().unwrap().clone()
    }
}

/// A stand-in X-Ray daemon on 127.0.0.1: its address, what it received, and its task.
async fn xray_daemon() -> (String, Arc<Mutex<Vec<String>>>, JoinHandle<()>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    let received = Arc::new(Mutex::new(Vec::new()));
    let sink = received.clone();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = socket.recv(&mut buf).await {
            sink.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    });
    (addr, received, task)
}

/// Copies a child's output into the shared log, line by line, prefixed with the function;
/// on the end of stderr (the process exited) marks the function dead.
fn pipe_lines(
    who: &'static str,
    stream: impl Read + Send + 'static,
    log: Arc<Mutex<String>>,
    api: Option<Arc<RuntimeApi>>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let mut l = log.lock().unwrap();
            l.push_str(&format!("[{who}] {line}\n"));
        }
        if let Some(api) = api {
            api.mark_dead("the function process exited".into());
        }
    });
}

impl Drop for Env {
    fn drop(&mut self) {
        for task in &self.background {
            task.abort();
        }
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Let the reader threads drain the pipes.
        std::thread::sleep(Duration::from_millis(100));
        let log = self.logs();
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("aws_functions-{}.log", self.test));
        let _ = std::fs::write(&file, &log);
        if std::thread::panicking() {
            eprintln!(
                "\n==== {} failed after {:.1?}; the functions' logs (also in {}) ====\n{log}==== end of logs ====",
                self.test,
                self.started.elapsed(),
                file.display()
            );
        } else {
            eprintln!(
                "aws_functions: {} took {:.1?} (logs in {})",
                self.test,
                self.started.elapsed(),
                file.display()
            );
        }
    }
}

// ─────────────────────────────────────────────────────────────── one function alone

/// Runs `cargo <args> --message-format=json-render-diagnostics` in the workspace (with
/// whatever `CARGO_TARGET_DIR` says) and returns the executables it reported, by target name
/// (a binary's or an example's). tests/cold_start.rs builds the release binaries with it.
pub fn cargo_build(args: &[&str]) -> Result<HashMap<String, PathBuf>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo {} failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut found = HashMap::new();
    for line in out.stdout.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(name), Some(exe)) = (v["target"]["name"].as_str(), v["executable"].as_str()) {
            found.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    Ok(found)
}

/// One function binary alone under its own fresh Runtime API, started with exactly the given
/// environment (plus `AWS_LAMBDA_RUNTIME_API`): a cold start, timed from the spawn. The
/// process is killed on drop.
pub struct Solo {
    pub api: Arc<RuntimeApi>,
    child: Child,
    server: JoinHandle<()>,
    log: Arc<Mutex<String>>,
}

impl Solo {
    /// Starts the Runtime API, then spawns `exe` (the spawn is the start of its init).
    pub async fn spawn(name: &'static str, exe: &std::path::Path, env: &[(&str, &str)]) -> Solo {
        let (api, server) = RuntimeApi::start(name).await;
        let mut cmd = Command::new(exe);
        cmd.env_clear()
            .envs(env.iter().copied())
            .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let log = Arc::new(Mutex::new(String::new()));
        *api.spawned.lock().unwrap() = Some(Instant::now());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", exe.display()));
        pipe_lines(name, child.stdout.take().unwrap(), log.clone(), None);
        pipe_lines(
            name,
            child.stderr.take().unwrap(),
            log.clone(),
            Some(api.clone()),
        );
        Solo {
            api,
            child,
            server,
            log,
        }
    }

    /// Waits until the function asks for its first invocation; returns its init duration
    /// (spawn → first `/invocation/next`, as the Runtime API saw it).
    pub async fn init(&self, within: Duration) -> Result<Duration, String> {
        let until = tokio::time::Instant::now() + within;
        loop {
            if let Some(d) = self.api.init_duration() {
                return Ok(d);
            }
            if let Some(why) = self.api.dead.lock().unwrap().clone() {
                return Err(format!("{}: {why}\n{}", self.api.name, self.logs()));
            }
            // `notify_one` keeps its wake-up for a waiter still to come: none is lost between
            // the checks above and this wait.
            let woken = tokio::time::timeout_at(until, self.api.init_or_death.notified());
            if woken.await.is_err() {
                return Err(format!(
                    "{}: no /invocation/next within {within:?}\n{}",
                    self.api.name,
                    self.logs()
                ));
            }
        }
    }

    /// What the process wrote so far (stdout and stderr, line by line).
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Solo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.server.abort();
    }
}
