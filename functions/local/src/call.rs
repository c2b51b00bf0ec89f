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
//! redrawn line when stderr is a terminal, plain lines otherwise. What the server sent has its
//! control characters escaped on stderr always, on stdout when it is a terminal (see
//! `output.rs`), so no answer can act on the terminal.
//!
//! Exit status: 0 completed, 1 tool error (`isError`) or a task that failed or was cancelled
//! elsewhere, 2 usage, protocol or HTTP error, 130 interrupted (Ctrl-C).
//!
//! Bounds: every request has a timeout (connect, headers, body; an event stream may stay open
//! as long as it keeps sending), answers larger than [`MAX_BODY`] are refused, and anything
//! that is not a JSON-RPC answer to the request sent ends the command with a message and exit
//! status 2. The bearer token is never printed: the URL is shown without its password, and
//! everything written, stdout included, has the token's text replaced by a mark (a server
//! could echo it).

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use mcp_tasks_core::protocol::{HEADER_MISMATCH, TASKS_EXTENSION, method};
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

mod form;
mod output;
mod sse;
#[cfg(test)]
mod tests;
mod transport;
mod ui;

use output::{finish, rpc_error_text};
use transport::{Reply, Rpc, describe, is_loopback, param_headers, redact_url, shown_url};
use ui::{Ui, fraction_in};

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
        caps["extensions"] = json!({TASKS_EXTENSION: {}});
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
                method::TOOLS_CALL,
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
                method::TASKS_GET,
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
                        .request(method::TASKS_UPDATE, &update, Some(id), &[], &mut |_| {})
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
    let cancel = rpc.request(method::TASKS_CANCEL, &params, Some(id), &[], &mut ignore);
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

/// The next gap between polls: the task's `pollIntervalMs`, within bounds (1 s without one).
fn poll_interval(task: &Value) -> Duration {
    task.get("pollIntervalMs")
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(1))
        .clamp(POLL_MIN, POLL_MAX)
}
