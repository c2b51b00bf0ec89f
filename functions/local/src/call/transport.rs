//! The HTTP side of `mcp-tasks call`: one JSON-RPC request at a time to one endpoint, its
//! answer read as JSON or as an event stream, within bounds; and the `Mcp-Param-*` headers of
//! a tool that mirrors arguments.

use std::time::Duration;

use mcp_tasks_core::protocol::headers::{
    MCP_METHOD, MCP_NAME, MCP_PARAM_PREFIX, MCP_PROTOCOL_VERSION, encode_value,
};
use mcp_tasks_core::protocol::{PROTOCOL_VERSION, meta, method};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::sse::Sse;
use super::{Fatal, MAX_BODY, MAX_LIST_PAGES, TOKEN_ENV};

/// A JSON-RPC answer to a request we sent.
pub(super) enum Reply {
    Result(Value),
    /// The error object (`code`, `message`, `data`?).
    Error(Value),
}

/// The HTTP side: one endpoint, one token, the same capabilities on every request.
pub(super) struct Rpc {
    pub(super) http: reqwest::Client,
    pub(super) url: reqwest::Url,
    pub(super) auth: Option<HeaderValue>,
    pub(super) caps: Value,
    pub(super) timeout: Duration,
    pub(super) next_id: u64,
}

impl Rpc {
    /// Sends one request and reads its answer: a JSON body, or an event stream whose
    /// notifications go to `on_notification` until the answer arrives.
    pub(super) async fn request(
        &mut self,
        method: &str,
        params: &Value,
        name: Option<&str>,
        extra: &[(HeaderName, String)],
        on_notification: &mut dyn FnMut(&Value),
    ) -> Result<Reply, Fatal> {
        let id = self.next_id;
        self.next_id += 1;
        let body = self.envelope(method, params, id);
        let headers = self.headers(method, name, extra)?;
        let send = self
            .http
            .post(self.url.clone())
            .headers(headers)
            .body(body.to_string())
            .send();
        let what = format!("{method} to {}", shown_url(&self.url));
        let resp = match tokio::time::timeout(self.timeout, send).await {
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
        if status == 401 || status == 403 {
            return Err(self.refused(&resp, &what));
        }
        self.answer(resp, id, &what, on_notification).await
    }

    /// The JSON-RPC request: `params` with our `_meta` (protocol version, capabilities, client
    /// info, and a progress token on `tools/call`).
    fn envelope(&self, method: &str, params: &Value, id: u64) -> Value {
        let mut params = params.clone();
        let mut meta = json!({
            (meta::PROTOCOL_VERSION): PROTOCOL_VERSION,
            (meta::CLIENT_CAPABILITIES): self.caps,
            (meta::CLIENT_INFO):
                {"name": "mcp-tasks-call", "version": env!("CARGO_PKG_VERSION")},
        });
        if method == method::TOOLS_CALL {
            // Opt in to `notifications/progress` when the server answers synchronously.
            meta["progressToken"] = json!(format!("call-{id}"));
        }
        params["_meta"] = meta;
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// The request's headers: the fixed ones, `Mcp-Name`, `extra` and the bearer token.
    fn headers(
        &self,
        method: &str,
        name: Option<&str>,
        extra: &[(HeaderName, String)],
    ) -> Result<HeaderMap, Fatal> {
        let mut headers = HeaderMap::new();
        let fixed = [
            ("content-type", "application/json".to_owned()),
            ("accept", "application/json, text/event-stream".to_owned()),
            (MCP_PROTOCOL_VERSION, PROTOCOL_VERSION.to_owned()),
            (MCP_METHOD, method.to_owned()),
        ];
        for (k, v) in fixed {
            headers.insert(k, header_value(&v)?);
        }
        if let Some(n) = name {
            headers.insert(MCP_NAME, header_value(&encode_value(n))?);
        }
        for (k, v) in extra {
            headers.insert(k.clone(), header_value(v)?);
        }
        if let Some(a) = &self.auth {
            headers.insert(reqwest::header::AUTHORIZATION, a.clone());
        }
        Ok(headers)
    }

    /// A `401` or `403`: what the token lacks, and the server's challenge.
    fn refused(&self, resp: &reqwest::Response, what: &str) -> Fatal {
        let status = resp.status();
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
        Fatal::new(format!("{what}: HTTP {status}: {why}{challenge}"))
    }

    /// The answer to request `id`: a JSON body or an event stream, or what the status says.
    async fn answer(
        &self,
        mut resp: reqwest::Response,
        id: u64,
        what: &str,
        on_notification: &mut dyn FnMut(&Value),
    ) -> Result<Reply, Fatal> {
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
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
    pub(super) async fn read_body(&self, resp: &mut reqwest::Response) -> Result<Vec<u8>, String> {
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
    pub(super) async fn read_stream(
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
pub(super) fn parse_reply(v: &Value, id: u64) -> Result<Reply, String> {
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

/// Looks up which arguments of `tool` are mirrored in `Mcp-Param-*` headers (its
/// `inputSchema`, from `tools/list`) and returns those headers for `arguments`.
pub(super) async fn param_headers(
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
            .request(method::TOOLS_LIST, &params, None, &[], &mut |_| {})
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
pub(super) fn mirror(schema: &Value, arguments: &Value, out: &mut Vec<(HeaderName, String)>) {
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
                if let Ok(name) =
                    HeaderName::from_bytes(format!("{MCP_PARAM_PREFIX}{token}").as_bytes())
                {
                    out.push((name, encode_value(&text)));
                }
            }
            None if value.is_object() => mirror(ps, value, out),
            None => {}
        }
    }
}

pub(super) fn header_value(v: &str) -> Result<HeaderValue, Fatal> {
    HeaderValue::from_str(v).map_err(|_| Fatal::new(format!("cannot send {v:?} as a header")))
}

/// A transport error, with its causes, without the URL (shown separately, without userinfo).
pub(super) fn describe(e: reqwest::Error) -> String {
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
pub(super) fn shown_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// A URL that did not parse, as shown: cut before any `@` (which may follow credentials).
pub(super) fn redact_url(url: &str) -> String {
    match url.rfind('@') {
        Some(at) => format!("…{}", &url[at..]),
        None => url.to_owned(),
    }
}

pub(super) fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or("");
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The start of a body, for messages: at most 300 characters, one line.
pub(super) fn snippet(bytes: &[u8]) -> String {
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
