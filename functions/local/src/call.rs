//! `mcp-tasks call URL TOOL [ARGS_JSON]`: a small MCP 2026-07-28 client for people and scripts.
//!
//! It sends one `tools/call` to any 2026-07-28 server (this one, local or deployed, or another)
//! declaring the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) and form-mode
//! elicitation, the way `docs/upstream/DIGEST.md` (§1.3, §1.4, §2) describes a client:
//!
//! - headers `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` (the tool, or the task id on
//!   `tasks/*`), `Accept: application/json, text/event-stream`, and `Authorization: Bearer`
//!   when a token is given; `Mcp-Param-*` headers when the server answers `-32020` and its
//!   `tools/list` marks arguments with `x-mcp-header` (then the call is sent once more);
//! - `params._meta` with the protocol version, the client capabilities and the client info, on
//!   every request.
//!
//! The answer decides what follows:
//!
//! - a `CallToolResult` (`resultType: "complete"`, or absent): printed at once;
//! - an `InputRequiredResult` (SEP-2322 rounds): the questions are asked on the terminal and the
//!   call is sent again with `inputResponses` and the server's `requestState`;
//! - a task handle (`resultType: "task"`): `tasks/get` is polled at the task's `pollIntervalMs`,
//!   its `statusMessage` is shown as a progress line, `input_required` questions are asked on
//!   the terminal and answered with `tasks/update`, and the task's `result` is printed when it
//!   completes. Ctrl-C sends `tasks/cancel` before leaving.
//!
//! Progress: the tasks extension carries no progress numbers (DIGEST §6), only a
//! `statusMessage`; a message that reads "N of M" (or holds a percentage) is drawn as a bar.
//! Synchronous calls that stream `notifications/progress` (an SSE answer, because the request
//! carries a `progressToken`) show those.
//!
//! Output: the result's text content on stdout (other content kinds as a one-line summary);
//! with `--json` the final JSON instead. Status, progress and prompts go to stderr: one
//! redrawn line when stderr is a terminal, plain lines otherwise.
//!
//! Exit status: 0 completed, 1 tool error (`isError`) or a task that failed or was cancelled
//! elsewhere, 2 usage, protocol or HTTP error, 130 interrupted (Ctrl-C).
//!
//! Bounds: every request has a timeout (connect, headers, body; an event stream may stay open
//! as long as it keeps sending), answers larger than [`MAX_BODY`] are refused, and anything
//! that is not a JSON-RPC answer to the request sent ends the command with a message and exit
//! status 2. The bearer token is never printed: the URL is shown without its password, and
//! every message written is scrubbed of the token's text (a server could echo it).

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

/// The protocol revision this client speaks.
const PROTOCOL_VERSION: &str = "2026-07-28";
/// The tasks extension's identifier.
const TASKS: &str = "io.modelcontextprotocol/tasks";
/// Largest answer read (a JSON body, or a whole event stream).
pub const MAX_BODY: usize = 16 << 20;
/// Largest line read from stdin for one answer.
const MAX_INPUT_LINE: u64 = 64 << 10;
/// Most SEP-2322 rounds one call may take (a server asking forever is a broken server).
const MAX_ROUNDS: usize = 32;
/// Most `tools/list` pages read while looking for a tool's `x-mcp-header` arguments.
const MAX_LIST_PAGES: usize = 50;
/// Consecutive failed polls (timeouts, refused connections, 5xx) before giving up.
const MAX_POLL_RETRIES: u32 = 5;
/// Bounds applied to a server's `pollIntervalMs`.
const POLL_MIN: Duration = Duration::from_millis(100);
const POLL_MAX: Duration = Duration::from_secs(60);
/// The environment variable holding the bearer token.
pub const TOKEN_ENV: &str = "MCP_TASKS_TOKEN";

/// Exit statuses.
const EXIT_OK: i32 = 0;
const EXIT_FAILED: i32 = 1;
const EXIT_ERROR: i32 = 2;
const EXIT_INTERRUPTED: i32 = 130;

/// `mcp-tasks call` arguments.
#[derive(clap::Args)]
pub struct CallArgs {
    /// The server's MCP endpoint, e.g. http://127.0.0.1:8787/mcp.
    url: String,
    /// The tool to call.
    tool: String,
    /// The tool's arguments: a JSON object.
    #[arg(default_value = "{}")]
    args_json: String,
    /// Print the final JSON (the CallToolResult, the failed or cancelled task, or
    /// `{"error": …}`) on stdout instead of the result's text.
    #[arg(long)]
    json: bool,
    /// Bearer token [default: the MCP_TASKS_TOKEN environment variable, which unlike a flag
    /// does not show in the process list]. Never printed.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Seconds each HTTP request may take (to connect, to answer, to send its body; an event
    /// stream may stay open while it keeps sending).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    /// Do not declare the tasks extension: the server must answer synchronously (or refuse).
    #[arg(long)]
    no_tasks: bool,
}

/// Why the command cannot go on (exit status 2). The text never holds the token: messages
/// are built without it, and [`Ui`] scrubs it again before writing.
#[derive(Debug)]
struct Fatal {
    message: String,
    /// A timeout, a refused connection, an overloaded server: worth retrying an idempotent
    /// request (`tasks/get`).
    transient: bool,
}

impl Fatal {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: false,
        }
    }

    fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: true,
        }
    }
}

/// How a call ended (short of a [`Fatal`] error or Ctrl-C).
enum Outcome {
    /// A `CallToolResult`: from a synchronous answer or a completed task.
    Result(Value),
    /// A JSON-RPC error answering `tools/call` (unknown tool, bad arguments, missing capability).
    RpcError(Value),
    /// The last `tasks/get` of a task that ended `failed` or `cancelled`.
    TaskEnded(Value),
}

/// Runs the command; returns the exit status.
pub async fn run(args: CallArgs) -> i32 {
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var(TOKEN_ENV).ok())
        .filter(|t| !t.trim().is_empty());
    let mut ui = Ui::new(token.clone());
    let (mut rpc, arguments) = match setup(&args, token.as_deref()) {
        Ok(s) => s,
        Err(f) => {
            ui.error(&f.message);
            return EXIT_ERROR;
        }
    };
    if rpc.url.scheme() == "http" && token.is_some() && !is_loopback(&rpc.url) {
        ui.line("warning: sending the bearer token over plain HTTP");
    }
    // Registered before the first request (biased select: polled first), so Ctrl-C from here
    // on is ours and not the default "terminate".
    let interrupted = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No signal handling on this platform: never "interrupted".
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(interrupted);
    let mut task_id: Option<String> = None;
    let ended = tokio::select! {
        biased;
        () = &mut interrupted => None,
        r = call(&mut rpc, &mut ui, &args.tool, arguments, &mut task_id) => Some(r),
    };
    let code = match ended {
        None => interrupt(&mut rpc, &mut ui, task_id.as_deref()).await,
        Some(Err(f)) => {
            let mut message = f.message;
            if let Some(id) = &task_id {
                message.push_str(&format!(" (task {id} may still be running)"));
            }
            ui.error(&message);
            EXIT_ERROR
        }
        Some(Ok(outcome)) => finish(&mut ui, outcome, args.json),
    };
    let _ = std::io::stdout().flush();
    code
}

/// Checks the arguments and builds the HTTP client.
fn setup(args: &CallArgs, token: Option<&str>) -> Result<(Rpc, Value), Fatal> {
    let url = reqwest::Url::parse(&args.url)
        .map_err(|e| Fatal::new(format!("URL {:?} is not a URL: {e}", redact_url(&args.url))))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Fatal::new(format!(
            "URL {} must be http:// or https://",
            shown_url(&url)
        )));
    }
    let arguments: Value = serde_json::from_str(&args.args_json)
        .map_err(|e| Fatal::new(format!("ARGS_JSON is not JSON: {e}")))?;
    if !arguments.is_object() {
        return Err(Fatal::new("ARGS_JSON must be a JSON object, e.g. '{}'"));
    }
    let auth = match token {
        None => None,
        Some(t) => {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", t.trim())).map_err(|_| {
                Fatal::new("the token holds characters that cannot be sent in an HTTP header")
            })?;
            v.set_sensitive(true);
            Some(v)
        }
    };
    let timeout = Duration::from_secs(args.timeout);
    let http = reqwest::Client::builder()
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        // A 3xx is reported, not followed: the token stays with the URL it was given for.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("mcp-tasks-call/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Fatal::new(format!("cannot set up HTTP: {}", describe(e))))?;
    let mut caps = json!({"elicitation": {}});
    if !args.no_tasks {
        caps["extensions"] = json!({TASKS: {}});
    }
    let rpc = Rpc {
        http,
        url,
        auth,
        caps,
        timeout,
        next_id: 1,
    };
    Ok((rpc, arguments))
}

/// The whole call: `tools/call` (with SEP-2322 rounds), then the task, if it became one.
async fn call(
    rpc: &mut Rpc,
    ui: &mut Ui,
    tool: &str,
    arguments: Value,
    task_id: &mut Option<String>,
) -> Result<Outcome, Fatal> {
    let mut params = json!({"name": tool, "arguments": arguments});
    let mut mirrored: Option<Vec<(HeaderName, String)>> = None;
    let mut rounds = 0;
    let created = loop {
        let reply = rpc
            .request(
                "tools/call",
                &params,
                Some(tool),
                mirrored.as_deref().unwrap_or_default(),
                &mut |n| ui.notification(n),
            )
            .await?;
        ui.clear();
        let result = match reply {
            Reply::Error(e) if e["code"] == json!(HEADER_MISMATCH) && mirrored.is_none() => {
                // The tool mirrors arguments in `Mcp-Param-*` headers: learn which from its
                // schema and send the call once more.
                let headers = param_headers(rpc, tool, &params["arguments"]).await?;
                if headers.is_empty() {
                    return Ok(Outcome::RpcError(e));
                }
                mirrored = Some(headers);
                continue;
            }
            Reply::Error(e) => return Ok(Outcome::RpcError(e)),
            Reply::Result(r) => r,
        };
        match result.get("resultType").and_then(Value::as_str) {
            None | Some("complete") => return Ok(Outcome::Result(result)),
            Some("task") => break result,
            Some("input_required") => {
                rounds += 1;
                if rounds > MAX_ROUNDS {
                    return Err(Fatal::new(format!(
                        "the server asked for input {MAX_ROUNDS} times in a row; giving up"
                    )));
                }
                let requests = result
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .filter(|r| !r.is_empty())
                    .ok_or_else(|| {
                        Fatal::new("the server asked for input without inputRequests")
                    })?;
                let mut answers = Map::new();
                for (key, request) in requests {
                    answers.insert(key.clone(), ui.answer(request).await?);
                }
                params["inputResponses"] = Value::Object(answers);
                match result.get("requestState") {
                    Some(Value::String(s)) => params["requestState"] = json!(s),
                    None | Some(Value::Null) => {
                        if let Some(p) = params.as_object_mut() {
                            p.remove("requestState");
                        }
                    }
                    Some(_) => return Err(Fatal::new("the server sent a non-string requestState")),
                }
            }
            Some(other) => {
                return Err(Fatal::new(format!(
                    "the server answered tools/call with an unknown resultType {:?}",
                    other
                )));
            }
        }
    };
    let id = created
        .get("taskId")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 1024)
        .ok_or_else(|| Fatal::new("the server answered a task without a usable taskId"))?
        .to_owned();
    *task_id = Some(id.clone());
    ui.line(&format!(
        "task {id} created ({})",
        created["status"].as_str().unwrap_or("?")
    ));
    follow(rpc, ui, &id, &created).await
}

/// Polls a task until it ends, answering its questions on the way.
async fn follow(rpc: &mut Rpc, ui: &mut Ui, id: &str, created: &Value) -> Result<Outcome, Fatal> {
    let mut interval = poll_interval(created);
    let mut answered: HashSet<String> = HashSet::new();
    let mut failures = 0;
    loop {
        tokio::time::sleep(interval).await;
        let task = match rpc
            .request(
                "tasks/get",
                &json!({"taskId": id}),
                Some(id),
                &[],
                &mut |_| {},
            )
            .await
        {
            Ok(Reply::Result(t)) => {
                failures = 0;
                t
            }
            Ok(Reply::Error(e)) => {
                return Err(Fatal::new(format!(
                    "tasks/get refused: {}",
                    rpc_error_text(&e)
                )));
            }
            Err(f) if f.transient && failures < MAX_POLL_RETRIES => {
                failures += 1;
                ui.line(&format!(
                    "tasks/get failed ({}); retrying ({failures}/{MAX_POLL_RETRIES})",
                    f.message
                ));
                tokio::time::sleep((interval * failures).min(Duration::from_secs(10))).await;
                continue;
            }
            Err(f) => return Err(f),
        };
        if task.get("taskId").is_some_and(|t| t != id) {
            return Err(Fatal::new("tasks/get answered about another task"));
        }
        interval = poll_interval(&task);
        let status = task.get("status").and_then(Value::as_str).unwrap_or("");
        let message = task.get("statusMessage").and_then(Value::as_str);
        match status {
            "working" => ui.progress(status, message, message.and_then(fraction_in)),
            "input_required" => {
                ui.progress(status, message, None);
                let requests = task
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .ok_or_else(|| Fatal::new("an input_required task without inputRequests"))?;
                let mut answers = Map::new();
                for (key, request) in requests {
                    // Keys are never reused; one the server has not yet taken off is not asked
                    // twice.
                    if !answered.contains(key) {
                        ui.clear();
                        answers.insert(key.clone(), ui.answer(request).await?);
                    }
                }
                if !answers.is_empty() {
                    answered.extend(answers.keys().cloned());
                    let update = json!({"taskId": id, "inputResponses": answers});
                    match rpc
                        .request("tasks/update", &update, Some(id), &[], &mut |_| {})
                        .await?
                    {
                        Reply::Result(_) => {}
                        Reply::Error(e) => {
                            return Err(Fatal::new(format!(
                                "tasks/update refused: {}",
                                rpc_error_text(&e)
                            )));
                        }
                    }
                    // The answers are in: look again soon rather than a whole interval later.
                    interval = interval.min(Duration::from_millis(250));
                }
            }
            "completed" => {
                ui.clear();
                let result = task
                    .get("result")
                    .filter(|r| r.is_object())
                    .ok_or_else(|| Fatal::new("a completed task without a result"))?;
                return Ok(Outcome::Result(result.clone()));
            }
            "failed" | "cancelled" => {
                ui.clear();
                return Ok(Outcome::TaskEnded(task));
            }
            other => {
                return Err(Fatal::new(format!(
                    "tasks/get answered an unknown status {other:?}"
                )));
            }
        }
    }
}

/// Ctrl-C: cancels the task, if there is one, and leaves with 130. A second Ctrl-C leaves at
/// once.
async fn interrupt(rpc: &mut Rpc, ui: &mut Ui, task_id: Option<&str>) -> i32 {
    ui.clear();
    let Some(id) = task_id else {
        ui.line("interrupted");
        return EXIT_INTERRUPTED;
    };
    ui.line(&format!("interrupted: cancelling task {id}"));
    let params = json!({"taskId": id});
    let mut ignore = |_: &Value| {};
    let cancel = rpc.request("tasks/cancel", &params, Some(id), &[], &mut ignore);
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => ui.line(&format!("interrupted again: task {id} may still be running")),
        r = cancel => match r {
            Ok(Reply::Result(_)) => ui.line(&format!("task {id} cancelled")),
            Ok(Reply::Error(e)) => ui.error(&format!("tasks/cancel refused: {}", rpc_error_text(&e))),
            Err(f) => ui.error(&format!("tasks/cancel failed: {} (task {id} may still be running)", f.message)),
        },
    }
    EXIT_INTERRUPTED
}

/// Prints the outcome; returns the exit status.
fn finish(ui: &mut Ui, outcome: Outcome, as_json: bool) -> i32 {
    match outcome {
        Outcome::Result(result) => {
            let is_error = result.get("isError") == Some(&json!(true));
            if as_json {
                print_json(&result);
            } else if is_error {
                ui.line(&format!("tool error: {}", content_text(&result).trim_end()));
            } else {
                let text = content_text(&result);
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                if !text.is_empty() && !text.ends_with('\n') {
                    let _ = out.write_all(b"\n");
                }
            }
            if is_error { EXIT_FAILED } else { EXIT_OK }
        }
        Outcome::RpcError(e) => {
            if as_json {
                print_json(&json!({"error": e}));
            }
            ui.error(&rpc_error_text(&e));
            EXIT_ERROR
        }
        Outcome::TaskEnded(task) => {
            if as_json {
                print_json(&task);
            }
            let id = task["taskId"].as_str().unwrap_or("?");
            let status = task["status"].as_str().unwrap_or("?");
            let why = match (task.get("error"), task.get("statusMessage")) {
                (Some(e), _) if e.is_object() => rpc_error_text(e),
                (_, Some(Value::String(m))) => m.clone(),
                _ => String::new(),
            };
            ui.line(&format!("task {id} {status}: {why}"));
            EXIT_FAILED
        }
    }
}

fn print_json(v: &Value) {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// The text of a `CallToolResult`: its text content, other kinds as a one-line summary, or
/// the structured content when there is no content.
fn content_text(result: &Value) -> String {
    let items = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if items.is_empty() {
        return match result.get("structuredContent") {
            Some(s) => serde_json::to_string_pretty(s).unwrap_or_default(),
            None => String::new(),
        };
    }
    let mut out = String::new();
    for item in items {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        let piece = match s("type") {
            "text" => s("text").to_owned(),
            kind @ ("image" | "audio") => {
                format!(
                    "[{kind} {}, {} bytes]",
                    s("mimeType"),
                    s("data").len() / 4 * 3
                )
            }
            "resource_link" => format!("[link {}]", s("uri")),
            "resource" => match item["resource"].get("text").and_then(Value::as_str) {
                Some(t) => t.to_owned(),
                None => format!(
                    "[resource {}]",
                    item["resource"]["uri"].as_str().unwrap_or("")
                ),
            },
            other => format!("[{other} content]"),
        };
        out.push_str(&piece);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// A JSON-RPC error object as one line: message, code and (short) data.
fn rpc_error_text(e: &Value) -> String {
    let mut s = format!(
        "{} (code {})",
        e["message"].as_str().unwrap_or("(no message)"),
        e["code"]
    );
    if let Some(data) = e.get("data").filter(|d| !d.is_null()) {
        let d = data.to_string();
        if d.len() <= 500 {
            s.push_str(&format!(": {d}"));
        }
    }
    s
}

/// The next gap between polls: the task's `pollIntervalMs`, within bounds (1 s without one).
fn poll_interval(task: &Value) -> Duration {
    task.get("pollIntervalMs")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(1))
        .clamp(POLL_MIN, POLL_MAX)
}

/// How far along a status message says the work is: "Hashed 400000 of 1000000 rounds" is
/// 0.4, "42%" is 0.42. `None` when it says neither.
fn fraction_in(message: &str) -> Option<f64> {
    let words: Vec<&str> = message.split_whitespace().collect();
    let number = |w: &str| {
        w.trim_matches(|c: char| !c.is_ascii_digit())
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
    };
    for w in words.windows(3) {
        if w[1] == "of"
            && let (Some(done), Some(total)) = (number(w[0]), number(w[2]))
            && total > 0.0
            && (0.0..=total).contains(&done)
        {
            return Some(done / total);
        }
    }
    words.iter().find_map(|w| {
        let p = w.trim_end_matches([',', '.', ')']).strip_suffix('%')?;
        p.parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| p / 100.0)
    })
}

/// The JSON-RPC error code a server answers when headers and body disagree.
const HEADER_MISMATCH: i64 = -32020;

/// A JSON-RPC answer to a request we sent.
enum Reply {
    Result(Value),
    /// The error object (`code`, `message`, `data`?).
    Error(Value),
}

/// The HTTP side: one endpoint, one token, the same capabilities on every request.
struct Rpc {
    http: reqwest::Client,
    url: reqwest::Url,
    auth: Option<HeaderValue>,
    caps: Value,
    timeout: Duration,
    next_id: u64,
}

impl Rpc {
    /// Sends one request and reads its answer: a JSON body, or an event stream whose
    /// notifications go to `on_notification` until the answer arrives.
    async fn request(
        &mut self,
        method: &str,
        params: &Value,
        name: Option<&str>,
        extra: &[(HeaderName, String)],
        on_notification: &mut dyn FnMut(&Value),
    ) -> Result<Reply, Fatal> {
        let id = self.next_id;
        self.next_id += 1;
        let mut params = params.clone();
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": self.caps,
            "io.modelcontextprotocol/clientInfo":
                {"name": "mcp-tasks-call", "version": env!("CARGO_PKG_VERSION")},
        });
        if method == "tools/call" {
            // Opt in to `notifications/progress` when the server answers synchronously.
            meta["progressToken"] = json!(format!("call-{id}"));
        }
        params["_meta"] = meta;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut headers = HeaderMap::new();
        let fixed = [
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
            ("mcp-protocol-version", PROTOCOL_VERSION.to_owned()),
            ("mcp-method", method.to_owned()),
        ];
        for (k, v) in fixed {
            headers.insert(k, header_value(&v)?);
        }
        if let Some(n) = name {
            headers.insert("mcp-name", header_value(&header_text(n))?);
        }
        for (k, v) in extra {
            headers.insert(k.clone(), header_value(v)?);
        }
        if let Some(a) = &self.auth {
            headers.insert(reqwest::header::AUTHORIZATION, a.clone());
        }
        let send = self
            .http
            .post(self.url.clone())
            .headers(headers)
            .body(body.to_string())
            .send();
        let what = format!("{method} to {}", shown_url(&self.url));
        let mut resp = match tokio::time::timeout(self.timeout, send).await {
            Err(_) => {
                return Err(Fatal::transient(format!(
                    "{what}: no answer within {:?}",
                    self.timeout
                )));
            }
            Ok(Err(e)) => return Err(Fatal::transient(format!("{what}: {}", describe(e)))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if status == 401 || status == 403 {
            let challenge = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(|c| format!(" (WWW-Authenticate: {c})"))
                .unwrap_or_default();
            let why = match (status.as_u16(), &self.auth) {
                (401, None) => {
                    format!("the server needs a bearer token: give one with --token or {TOKEN_ENV}")
                }
                (401, Some(_)) => "the server refused the bearer token".to_owned(),
                _ => "the bearer token is not allowed to do this".to_owned(),
            };
            return Err(Fatal::new(format!(
                "{what}: HTTP {status}: {why}{challenge}"
            )));
        }
        let overloaded = status.is_server_error() || status == 429;
        let fail = |m: String| {
            if overloaded {
                Fatal::transient(m)
            } else {
                Fatal::new(m)
            }
        };
        match content_type.as_str() {
            "application/json" => {
                let bytes = self
                    .read_body(&mut resp)
                    .await
                    .map_err(|m| fail(format!("{what}: {m}")))?;
                let reply = serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| e.to_string())
                    .and_then(|v| parse_reply(&v, id));
                match reply {
                    Ok(r @ Reply::Error(_)) => Ok(r),
                    Ok(r) if status.is_success() => Ok(r),
                    Ok(_) => Err(fail(format!("{what}: HTTP {status} with a result"))),
                    Err(m) if status.is_success() => Err(Fatal::new(format!(
                        "{what}: the server did not answer JSON-RPC ({m}): {}",
                        snippet(&bytes)
                    ))),
                    Err(_) => Err(fail(format!("{what}: HTTP {status}: {}", snippet(&bytes)))),
                }
            }
            "text/event-stream" if status.is_success() => self
                .read_stream(&mut resp, id, on_notification)
                .await
                .map_err(|m| Fatal::new(format!("{what}: {m}"))),
            _ => {
                if status.is_redirection() {
                    let to = resp
                        .headers()
                        .get(reqwest::header::LOCATION)
                        .and_then(|v| v.to_str().ok())
                        .map(redact_url)
                        .unwrap_or_default();
                    return Err(Fatal::new(format!(
                        "{what}: HTTP {status} to {to:?} (redirects are not followed: give that URL)"
                    )));
                }
                let bytes = self.read_body(&mut resp).await.unwrap_or_default();
                let text = snippet(&bytes);
                Err(fail(if status.is_success() {
                    format!(
                        "{what}: HTTP {status} with Content-Type {content_type:?}, not JSON or an event stream: {text}"
                    )
                } else {
                    format!("{what}: HTTP {status}: {text}")
                }))
            }
        }
    }

    /// A whole body, refused past [`MAX_BODY`] or the timeout.
    async fn read_body(&self, resp: &mut reqwest::Response) -> Result<Vec<u8>, String> {
        if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
            return Err(format!("the answer is larger than {MAX_BODY} bytes"));
        }
        let read = async {
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(describe)? {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(format!("the answer is larger than {MAX_BODY} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| format!("the answer's body took longer than {:?}", self.timeout))?
    }

    /// An event stream: notifications until the answer to request `id`. Each read must come
    /// within the timeout; the whole stream is capped at [`MAX_BODY`].
    async fn read_stream(
        &self,
        resp: &mut reqwest::Response,
        id: u64,
        on_notification: &mut dyn FnMut(&Value),
    ) -> Result<Reply, String> {
        let mut sse = Sse::default();
        let mut total = 0usize;
        let mut events = Vec::new();
        loop {
            let chunk = tokio::time::timeout(self.timeout, resp.chunk())
                .await
                .map_err(|_| format!("the event stream was silent for {:?}", self.timeout))?
                .map_err(describe)?;
            match &chunk {
                None => sse.end(&mut events),
                Some(c) => {
                    total += c.len();
                    if total > MAX_BODY {
                        return Err(format!("the event stream is longer than {MAX_BODY} bytes"));
                    }
                    sse.feed(c, &mut events);
                }
            }
            for data in events.drain(..) {
                let v: Value = serde_json::from_str(&data).map_err(|e| {
                    format!("an event is not JSON ({e}): {}", snippet(data.as_bytes()))
                })?;
                if v.get("method").is_some() {
                    // A notification about this request (a request from the server would be
                    // a protocol violation in 2026-07-28; it is ignored).
                    if v.get("id").is_none() {
                        on_notification(&v);
                    }
                    continue;
                }
                return parse_reply(&v, id);
            }
            if chunk.is_none() {
                return Err("the event stream ended without an answer".into());
            }
        }
    }
}

/// Checks that `v` is the JSON-RPC answer to request `id`.
fn parse_reply(v: &Value, id: u64) -> Result<Reply, String> {
    if v.get("jsonrpc") != Some(&json!("2.0")) {
        return Err("not a JSON-RPC 2.0 message".into());
    }
    let id_ok = v.get("id") == Some(&json!(id));
    match (v.get("result"), v.get("error")) {
        (Some(r), None) if id_ok && r.is_object() => Ok(Reply::Result(r.clone())),
        // An error may carry a null id (the server could not read ours).
        (None, Some(e))
            if (id_ok || v.get("id") == Some(&Value::Null))
                && e["code"].is_i64()
                && e["message"].is_string() =>
        {
            Ok(Reply::Error(e.clone()))
        }
        _ if !id_ok => Err(format!(
            "the answer's id is {}, not {id}",
            v.get("id").unwrap_or(&Value::Null)
        )),
        _ => Err("neither a result object nor an error object".into()),
    }
}

/// A `text/event-stream` reader: complete events' `data` in, in order.
#[derive(Default)]
struct Sse {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

impl Sse {
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<String>) {
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.field(&line, events);
            } else {
                self.line.push(b);
            }
        }
    }

    /// The stream ended: a last event without its blank line still counts.
    fn end(&mut self, events: &mut Vec<String>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.field(&line, events);
        }
        self.field(b"", events);
    }

    fn field(&mut self, line: &[u8], events: &mut Vec<String>) {
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                events.push(String::from_utf8_lossy(&std::mem::take(&mut self.data)).into_owned());
            }
            return;
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // Comments (`:`), `event:`, `id:` and `retry:` carry nothing this client uses.
    }
}

/// Looks up which arguments of `tool` are mirrored in `Mcp-Param-*` headers (its
/// `inputSchema`, from `tools/list`) and returns those headers for `arguments`.
async fn param_headers(
    rpc: &mut Rpc,
    tool: &str,
    arguments: &Value,
) -> Result<Vec<(HeaderName, String)>, Fatal> {
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = match rpc
            .request("tools/list", &params, None, &[], &mut |_| {})
            .await?
        {
            Reply::Result(r) => r,
            Reply::Error(_) => return Ok(Vec::new()),
        };
        let tools = page.get("tools").and_then(Value::as_array);
        if let Some(t) = tools.into_iter().flatten().find(|t| t["name"] == tool) {
            let mut out = Vec::new();
            mirror(&t["inputSchema"], arguments, &mut out);
            return Ok(out);
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if cursor.as_deref() != Some(c) => cursor = Some(c.to_owned()),
            _ => break,
        }
    }
    Ok(Vec::new())
}

/// The `Mcp-Param-{Name}` headers for properties marked `x-mcp-header: Name`, reachable
/// through `properties` chains (SEP-2243); values not header-safe go base64-encoded.
fn mirror(schema: &Value, arguments: &Value, out: &mut Vec<(HeaderName, String)>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (prop, ps) in props {
        let Some(value) = arguments.get(prop).filter(|v| !v.is_null()) else {
            continue;
        };
        match ps.get("x-mcp-header").and_then(Value::as_str) {
            Some(token) => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => continue,
                };
                if let Ok(name) = HeaderName::from_bytes(format!("mcp-param-{token}").as_bytes()) {
                    out.push((name, header_text(&text)));
                }
            }
            None if value.is_object() => mirror(ps, value, out),
            None => {}
        }
    }
}

/// A header value for `v`: as is when header-safe, else `=?base64?…?=`.
fn header_text(v: &str) -> String {
    let safe = v.bytes().all(|b| (0x20..0x7f).contains(&b))
        && v.trim() == v
        && !v.starts_with("=?base64?");
    if safe {
        v.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    }
}

fn header_value(v: &str) -> Result<HeaderValue, Fatal> {
    HeaderValue::from_str(v).map_err(|_| Fatal::new(format!("cannot send {v:?} as a header")))
}

/// A transport error, with its causes, without the URL (shown separately, without userinfo).
fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// The URL as shown in messages: without user name or password.
fn shown_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// A URL that did not parse, as shown: cut before any `@` (which may follow credentials).
fn redact_url(url: &str) -> String {
    match url.rfind('@') {
        Some(at) => format!("…{}", &url[at..]),
        None => url.to_owned(),
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or("");
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The start of a body, for messages: at most 300 characters, one line.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(1200)]);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cut: String = one_line.chars().take(300).collect();
    if cut.len() < one_line.len() {
        cut.push('…');
    }
    if cut.is_empty() {
        "(empty body)".into()
    } else {
        cut
    }
}

/// Everything written to stderr: status lines, the progress line, prompts and errors, all
/// scrubbed of the token and of control characters a server could use to rewrite the
/// terminal.
struct Ui {
    secret: Option<String>,
    /// stderr is a terminal: one progress line redrawn in place.
    tty: bool,
    stdin_tty: bool,
    /// A progress line is on screen (terminal mode).
    drawn: bool,
    /// The last status and message written (plain mode writes only changes).
    last: Option<(String, Option<String>)>,
    started: Instant,
    frame: usize,
}

impl Ui {
    fn new(secret: Option<String>) -> Self {
        Self {
            secret: secret
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
            tty: std::io::stderr().is_terminal(),
            stdin_tty: std::io::stdin().is_terminal(),
            drawn: false,
            last: None,
            started: Instant::now(),
            frame: 0,
        }
    }

    /// `s` without the token or control characters.
    fn clean(&self, s: &str) -> String {
        let mut s = s.to_owned();
        if let Some(t) = &self.secret {
            s = s.replace(t.as_str(), "[token]");
        }
        s.chars()
            .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
            .collect()
    }

    /// Takes the progress line off the screen.
    fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }

    /// A status line.
    fn line(&mut self, s: &str) {
        self.clear();
        eprintln!("mcp-tasks: {}", self.clean(s));
    }

    fn error(&mut self, s: &str) {
        self.clear();
        eprintln!("mcp-tasks: error: {}", self.clean(s));
    }

    /// Shows where the work is: redraws the line on a terminal, else writes a line when the
    /// status or message changed.
    fn progress(&mut self, status: &str, message: Option<&str>, fraction: Option<f64>) {
        let message = message.map(|m| self.clean(m).replace('\n', " "));
        let secs = self.started.elapsed().as_secs();
        let percent = fraction.map(|f| (f * 100.0).round() as u32);
        if !self.tty {
            let now = (status.to_owned(), message.clone());
            if self.last.as_ref() != Some(&now) {
                let mut l = format!("[{secs}s] {status}");
                if let Some(p) = percent {
                    l.push_str(&format!(" {p}%"));
                }
                if let Some(m) = &message {
                    l.push_str(&format!(": {m}"));
                }
                self.last = Some(now);
                eprintln!("mcp-tasks: {l}");
            }
            return;
        }
        const SPIN: [char; 4] = ['|', '/', '-', '\\'];
        self.frame = self.frame.wrapping_add(1);
        let mut l = format!("{} {status} {secs}s", SPIN[self.frame % SPIN.len()]);
        if let Some(f) = fraction {
            let width = 20;
            let full = ((f.clamp(0.0, 1.0)) * width as f64).round() as usize;
            l.push_str(&format!(
                " [{}{}] {:>3}%",
                "#".repeat(full),
                "-".repeat(width - full),
                percent.unwrap_or(0)
            ));
        }
        if let Some(m) = &message {
            l.push(' ');
            l.push_str(m);
        }
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|c| *c >= 20)
            .unwrap_or(80);
        let l: String = l.chars().take(columns - 1).collect();
        eprint!("\r\x1b[2K{l}");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    /// A notification on a synchronous call's event stream.
    fn notification(&mut self, n: &Value) {
        if n["method"] != "notifications/progress" {
            return;
        }
        let p = &n["params"];
        let fraction = match (p["progress"].as_f64(), p["total"].as_f64()) {
            (Some(done), Some(total)) if total > 0.0 => Some((done / total).clamp(0.0, 1.0)),
            _ => None,
        };
        let message = p["message"].as_str().map(str::to_owned);
        self.progress(
            "running",
            message.as_deref(),
            fraction.or_else(|| message.as_deref().and_then(fraction_in)),
        );
    }

    /// Asks one input request on the terminal; returns the answer to send.
    async fn answer(&mut self, request: &Value) -> Result<Value, Fatal> {
        let method = request["method"].as_str().unwrap_or("");
        let params = &request["params"];
        let mode = params["mode"].as_str().unwrap_or("form");
        if method != "elicitation/create" || mode != "form" {
            let kind = if method == "elicitation/create" {
                format!("{method} in {mode} mode")
            } else {
                method.to_owned()
            };
            return Err(Fatal::new(format!(
                "the server asked for {kind:?}, which this client did not declare and cannot answer"
            )));
        }
        self.clear();
        eprintln!(
            "? {}",
            self.clean(params["message"].as_str().unwrap_or("(no message)"))
        );
        eprintln!("  (Enter leaves an optional field empty; !decline or !cancel refuses)");
        let schema = &params["requestedSchema"];
        let required: HashSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut content = Map::new();
        let empty = Map::new();
        let props = schema["properties"].as_object().unwrap_or(&empty);
        for (name, field) in props {
            let required = required.contains(name.as_str());
            let label = self.clean(&field_label(name, field, required));
            loop {
                eprint!("  {label}: ");
                let _ = std::io::stderr().flush();
                let Some(line) = read_line().await? else {
                    eprintln!();
                    return Ok(json!({"action": "cancel"}));
                };
                let text = line.trim();
                if !self.stdin_tty {
                    eprintln!();
                }
                match text {
                    "!decline" => return Ok(json!({"action": "decline"})),
                    "!cancel" => return Ok(json!({"action": "cancel"})),
                    _ => {}
                }
                match field_value(field, text, required) {
                    Ok(Some(v)) => {
                        content.insert(name.clone(), v);
                        break;
                    }
                    Ok(None) => break,
                    Err(why) => eprintln!("  {}", self.clean(&why)),
                }
            }
        }
        Ok(json!({"action": "accept", "content": content}))
    }
}

/// One line from stdin (`None` at its end), at most [`MAX_INPUT_LINE`] bytes.
async fn read_line() -> Result<Option<String>, Fatal> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let n = std::io::stdin()
            .lock()
            .take(MAX_INPUT_LINE)
            .read_line(&mut line)?;
        Ok::<_, std::io::Error>((n > 0).then_some(line))
    })
    .await
    .map_err(|e| Fatal::new(format!("reading stdin: {e}")))?
    .map_err(|e| Fatal::new(format!("reading stdin: {e}")))
}

/// The choices of an enum field: (value, label).
fn choices(field: &Value) -> Vec<(Value, String)> {
    if let Some(values) = field["enum"].as_array() {
        let names = field["enumNames"].as_array();
        return values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let label = names
                    .and_then(|n| n.get(i))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| plain(v));
                (v.clone(), label)
            })
            .collect();
    }
    field["oneOf"]
        .as_array()
        .or_else(|| field["anyOf"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|o| {
            let v = o.get("const")?.clone();
            let label = o["title"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| plain(&v));
            Some((v, label))
        })
        .collect()
}

/// A JSON scalar as a person would type it.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// How a field is asked: its title, description, kind and default.
fn field_label(name: &str, field: &Value, required: bool) -> String {
    let mut l = field["title"].as_str().unwrap_or(name).to_owned();
    if let Some(d) = field["description"].as_str() {
        l.push_str(&format!(" — {d}"));
    }
    let opts = choices(field);
    if !opts.is_empty() {
        let list: Vec<String> = opts
            .iter()
            .enumerate()
            .map(|(i, (_, label))| format!("{}) {label}", i + 1))
            .collect();
        l.push_str(&format!(" [{}]", list.join(", ")));
    } else {
        match field["type"].as_str() {
            Some("boolean") => l.push_str(" [y/n]"),
            Some(t @ ("number" | "integer")) => l.push_str(&format!(" ({t})")),
            _ => {}
        }
    }
    if let Some(d) = field.get("default") {
        l.push_str(&format!(" (default {})", plain(d)));
    } else if !required {
        l.push_str(" (optional)");
    }
    l
}

/// Reads a typed answer for one field: `Ok(None)` leaves an optional field out, `Err` says
/// why the answer does not fit (the field is asked again).
fn field_value(field: &Value, text: &str, required: bool) -> Result<Option<Value>, String> {
    if text.is_empty() {
        return match field.get("default") {
            Some(d) => Ok(Some(d.clone())),
            None if required => Err("an answer is required".into()),
            None => Ok(None),
        };
    }
    let opts = choices(field);
    if !opts.is_empty() {
        let by_number = text
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| opts.get(i));
        return by_number
            .or_else(|| {
                opts.iter()
                    .find(|(v, label)| plain(v) == text || label == text)
            })
            .map(|(v, _)| Some(v.clone()))
            .ok_or_else(|| "choose one of the listed values (or its number)".into());
    }
    let bound = |k: &str| field[k].as_f64();
    let in_range =
        |n: f64| bound("minimum").is_none_or(|m| n >= m) && bound("maximum").is_none_or(|m| n <= m);
    match field["type"].as_str() {
        Some("boolean") => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Some(json!(true))),
            "n" | "no" | "false" => Ok(Some(json!(false))),
            _ => Err("answer y or n".into()),
        },
        Some("integer") => match text.parse::<i64>() {
            Ok(n) if in_range(n as f64) => Ok(Some(json!(n))),
            Ok(_) => Err("out of range".into()),
            Err(_) => Err("an integer, please".into()),
        },
        Some("number") => match text.parse::<f64>().ok().filter(|n| n.is_finite()) {
            Some(n) if in_range(n) => Ok(Some(json!(n))),
            Some(_) => Err("out of range".into()),
            None => Err("a number, please".into()),
        },
        _ => {
            let len = text.chars().count() as u64;
            if field["minLength"].as_u64().is_some_and(|m| len < m) {
                return Err(format!("at least {} characters", field["minLength"]));
            }
            if field["maxLength"].as_u64().is_some_and(|m| len > m) {
                return Err(format!("at most {} characters", field["maxLength"]));
            }
            Ok(Some(json!(text)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_read_from_status_messages() {
        assert_eq!(fraction_in("Hashed 400000 of 1000000 rounds"), Some(0.4));
        assert_eq!(fraction_in("Waited 1.0 of 4.0 s"), Some(0.25));
        assert_eq!(fraction_in("step 3 of 4, 42% done"), Some(0.75));
        assert_eq!(fraction_in("about 42% done"), Some(0.42));
        assert_eq!(fraction_in("one of those days"), None);
        assert_eq!(fraction_in("5 of 0"), None);
        assert_eq!(fraction_in("7 of 3"), None);
    }

    #[test]
    fn event_streams_are_split_into_events() {
        let mut sse = Sse::default();
        let mut out = Vec::new();
        sse.feed(b": keep-alive\n\nevent: message\r\ndata: {\"a\":", &mut out);
        assert!(out.is_empty());
        sse.feed(b"1}\r\n\r\ndata: x\ndata: y\n\ndata: last", &mut out);
        assert_eq!(out, vec!["{\"a\":1}".to_owned(), "x\ny".to_owned()]);
        sse.end(&mut out);
        assert_eq!(out.last().map(String::as_str), Some("last"));
    }

    #[test]
    fn replies_must_answer_the_request_sent() {
        let ok = json!({"jsonrpc": "2.0", "id": 3, "result": {"resultType": "complete"}});
        assert!(matches!(parse_reply(&ok, 3), Ok(Reply::Result(_))));
        assert!(parse_reply(&ok, 4).is_err());
        let err = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}});
        assert!(matches!(parse_reply(&err, 4), Ok(Reply::Error(_))));
        assert!(parse_reply(&json!({"jsonrpc": "2.0", "id": 3}), 3).is_err());
        assert!(parse_reply(&json!({"id": 3, "result": {}}), 3).is_err());
        assert!(parse_reply(&json!([1, 2]), 3).is_err());
    }

    #[test]
    fn mirrored_arguments_become_headers() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "inner": {"type": "object", "properties": {"flag": {"type": "boolean", "x-mcp-header": "Flag"}}},
            "plain": {"type": "string"}}});
        let mut out = Vec::new();
        let args = json!({"region": "été", "n": 42, "inner": {"flag": true}, "plain": "p"});
        mirror(&schema, &args, &mut out);
        let got: Vec<(String, String)> = out.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        assert_eq!(
            got,
            vec![
                ("mcp-param-flag".to_owned(), "true".to_owned()),
                ("mcp-param-n".to_owned(), "42".to_owned()),
                (
                    "mcp-param-region".to_owned(),
                    "=?base64?w6l0w6k=?=".to_owned()
                ),
            ]
        );
        assert_eq!(header_text(" x"), "=?base64?IHg=?=");
        assert_eq!(header_text("plain-value"), "plain-value");
    }

    #[test]
    fn answers_are_typed_by_the_requested_schema() {
        let b = json!({"type": "boolean"});
        assert_eq!(field_value(&b, "y", true), Ok(Some(json!(true))));
        assert_eq!(field_value(&b, "No", true), Ok(Some(json!(false))));
        assert!(field_value(&b, "maybe", true).is_err());
        assert!(field_value(&b, "", true).is_err());
        assert_eq!(field_value(&b, "", false), Ok(None));
        let i = json!({"type": "integer", "minimum": 1, "maximum": 5, "default": 2});
        assert_eq!(field_value(&i, "", true), Ok(Some(json!(2))));
        assert_eq!(field_value(&i, "4", true), Ok(Some(json!(4))));
        assert!(field_value(&i, "9", true).is_err());
        let e = json!({"type": "string", "enum": ["red", "green"]});
        assert_eq!(field_value(&e, "2", true), Ok(Some(json!("green"))));
        assert_eq!(field_value(&e, "red", true), Ok(Some(json!("red"))));
        assert!(field_value(&e, "blue", true).is_err());
        let s = json!({"type": "string", "maxLength": 3});
        assert!(field_value(&s, "abcd", true).is_err());
    }

    #[test]
    fn the_token_is_scrubbed_from_everything_written() {
        let ui = Ui::new(Some("s3cr3t-token".into()));
        assert_eq!(
            ui.clean("server said: Bearer s3cr3t-token\x1b[2J"),
            "server said: Bearer [token] [2J"
        );
        assert_eq!(redact_url("https://u:s3cr3t@host/mcp"), "…@host/mcp");
        let u = reqwest::Url::parse("https://u:s3cr3t@host/mcp").unwrap();
        assert_eq!(shown_url(&u), "https://host/mcp");
    }
}
