//! The Lambda Runtime API of one function: invocations in, buffered answers and errors out.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::net::{no_delay, now_ms, request_id};
use super::streamed::respond_streamed;

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
    pub(super) name: &'static str,
    tx: mpsc::UnboundedSender<Invocation>,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Invocation>>,
    /// Taken invocations: their deadline (epoch ms) and where the answer goes.
    pub(super) inflight: Mutex<HashMap<String, (u64, oneshot::Sender<Reply>)>>,
    /// Why the function can no longer be invoked (its process exited, or init failed).
    pub(super) dead: Mutex<Option<String>>,
    pub addr: SocketAddr,
    /// Invocations handed to the function.
    pub invocations: AtomicU64,
    /// Whether invocations are handed a fixed deadline already past, as `cargo lambda watch`
    /// (the local serverless run) hands them; the invocation is still stopped at its real
    /// timeout, as a deployment would stop it.
    pub past_deadlines: AtomicBool,
    /// The X-Ray trace root (`Root=1-…`) each invocation was given, in order.
    pub trace_roots: Mutex<Vec<String>>,
    /// When each taken invocation was handed over, until it is answered.
    taken_at: Mutex<HashMap<String, Instant>>,
    /// Billed time, as Lambda counts it: from handing an invocation over to its answer (for a
    /// streamed answer, to its prelude), summed over invocations, in milliseconds.
    pub busy_ms: AtomicU64,
    /// When the process was spawned, and how long it took to ask for its first invocation:
    /// Lambda's "Init Duration" (runtime start, SDK clients, configuration).
    pub(super) spawned: Mutex<Option<Instant>>,
    init: OnceLock<Duration>,
    /// Woken when `init` is set or the process dies: [`Solo::init`] waits on it, so the
    /// harness sleeps while a function starts instead of polling beside it.
    pub(super) init_or_death: tokio::sync::Notify,
}

impl RuntimeApi {
    pub(super) async fn start(name: &'static str) -> (Arc<Self>, JoinHandle<()>) {
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
            past_deadlines: AtomicBool::new(false),
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
    pub(super) fn answered(&self, id: &str) {
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
        .header("lambda-runtime-deadline-ms", {
            let told = if api.past_deadlines.load(Ordering::Relaxed) {
                PAST_DEADLINE_MS
            } else {
                deadline
            };
            told.to_string()
        })
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

/// The deadline `cargo lambda watch` hands every invocation: fixed, and long past.
const PAST_DEADLINE_MS: u64 = 1_700_000_000_000;

pub(super) fn accepted() -> Response {
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

/// Copies a child's output into the shared log, line by line, prefixed with the function;
/// on the end of stderr (the process exited) marks the function dead.
pub(super) fn pipe_lines(
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
