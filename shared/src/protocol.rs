//! The MCP 2026-07-28 wire: JSON-RPC envelope, method names and typed requests (both lanes),
//! per-request `_meta`, header rules, error codes and the HTTP status each error travels with.
//!
//! Every error a client can provoke is an [`McpError`]: a JSON-RPC error object plus the HTTP
//! status it is sent with. It is built once, where the problem is found, and turned into bytes
//! in exactly one place ([`crate::handler`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub mod envelope;
pub mod headers;
pub mod method;
pub mod request;
pub mod state;

pub use method::Method;

/// The protocol revision this server speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Versions a client may use with us (legacy eras are served by a later lane).
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];
/// The tasks extension identifier (SEP-2663).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// `_meta` keys.
pub mod meta {
    /// Protocol version of this request.
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// Client capabilities of this request.
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Client name/version (informational).
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// Deprecated per-request log level.
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// Server name/version on every result.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
}

/// JSON-RPC: invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: unknown or unadvertised method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: bad parameters (also unknown tool, unknown/expired task).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP: a header disagrees with the body, or a required header is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP: the request lacks a client capability this call needs.
pub const MISSING_CAPABILITY: i64 = -32021;
/// MCP: the protocol version is not supported.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// Error code.
    pub code: i64,
    /// Short, fixed, client-safe message (never internals).
    pub message: String,
    /// Structured detail defined by the spec for that code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An internal error with a client-safe message.
    pub fn internal(message: &str) -> Self {
        Self {
            code: INTERNAL_ERROR,
            message: message.to_owned(),
            data: None,
        }
    }
}

/// A protocol error with the HTTP status it is sent with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{} ({})", .error.message, .error.code)]
pub struct McpError {
    /// HTTP status code.
    pub status: u16,
    /// The JSON-RPC error.
    pub error: ErrorObject,
}

impl McpError {
    fn new(status: u16, code: i64, message: impl Into<String>, data: Option<Value>) -> Self {
        Self {
            status,
            error: ErrorObject {
                code,
                message: message.into(),
                data,
            },
        }
    }

    /// Body is not JSON.
    pub fn parse_error() -> Self {
        Self::new(
            400,
            PARSE_ERROR,
            "Parse error: the body is not valid JSON",
            None,
        )
    }

    /// Body is JSON but not a JSON-RPC request or notification.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(400, INVALID_REQUEST, message, None)
    }

    /// Unknown method (HTTP 404, as the 2026-07-28 transport pins it).
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            404,
            METHOD_NOT_FOUND,
            format!("Method not found: {}", truncate(method, 64)),
            None,
        )
    }

    /// Bad or missing `_meta` (HTTP 400, pinned by the transport).
    pub fn invalid_meta(message: impl Into<String>) -> Self {
        Self::new(400, INVALID_PARAMS, message, None)
    }

    /// Application-level bad params (unknown tool, bad arguments, unknown task): HTTP 200,
    /// like the reference TypeScript SDK, so clients' legacy-fallback probes (which look at
    /// 4xx answers) are not triggered by an ordinary mistake.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(200, INVALID_PARAMS, message, None)
    }

    /// The answer for a task that is unknown, expired or another tenant's: one fixed message
    /// so the three cases are byte-identical.
    pub fn task_not_found() -> Self {
        Self::invalid_params("Task not found or expired")
    }

    /// A header disagrees with the body.
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(400, HEADER_MISMATCH, message, None)
    }

    /// A capability the call needs was not declared on this request.
    pub fn missing_capability(message: impl Into<String>, required: Value) -> Self {
        Self::new(
            400,
            MISSING_CAPABILITY,
            message,
            Some(json!({ "requiredCapabilities": required })),
        )
    }

    /// The tasks extension is needed.
    pub fn tasks_extension_required(message: impl Into<String>) -> Self {
        Self::missing_capability(message, json!({"extensions": {TASKS_EXTENSION: {}}}))
    }

    /// The protocol version is not one we speak.
    pub fn unsupported_version(requested: &str) -> Self {
        Self::new(
            400,
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            Some(json!({"supported": SUPPORTED_VERSIONS, "requested": truncate(requested, 64)})),
        )
    }

    /// Something failed on our side; the detail is logged, never sent.
    pub fn internal() -> Self {
        Self::new(500, INTERNAL_ERROR, "Internal error", None)
    }

    /// A server-side failure the client should know about, with a fixed message.
    pub fn internal_with(message: &str) -> Self {
        Self::new(200, INTERNAL_ERROR, message, None)
    }

    /// An error object raised by a tool or job, with the status its code travels with.
    pub fn from_object(error: ErrorObject) -> Self {
        Self {
            status: status_for_code(error.code),
            error,
        }
    }

    /// The same error with another HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Body larger than the configured limit.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            INVALID_REQUEST,
            format!("Request body exceeds {limit} bytes"),
            None,
        )
    }
}

/// Cuts untrusted text before echoing it back.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The parts of `params._meta` the server uses.
#[derive(Debug, Clone, Default)]
pub struct RequestMeta {
    /// The request's protocol version.
    pub protocol_version: String,
    /// The request's client capabilities (`{}` when nothing optional).
    pub client_capabilities: Value,
    /// Opt-in to `notifications/progress`.
    pub progress_token: Option<Value>,
}

impl RequestMeta {
    /// Whether this request declared the tasks extension.
    pub fn declares_tasks(&self) -> bool {
        declares_tasks(&self.client_capabilities)
    }
}

/// Whether a capabilities object declares the tasks extension.
pub fn declares_tasks(caps: &Value) -> bool {
    caps.get("extensions")
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some_and(Value::is_object)
}

/// Whether a capabilities object declares a top-level capability (`sampling`, `elicitation`, …).
pub fn declares(caps: &Value, name: &str) -> bool {
    caps.get(name).is_some_and(Value::is_object)
}

/// The client capabilities a job reads: which input requests it may make (see
/// [`crate::jobs::JobContext::client_declares`]).
pub const INPUT_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

/// What a task keeps of its creating request's capabilities: each of
/// [`INPUT_CAPABILITIES`] it declared, as `{}` (at most 43 bytes of JSON). The task record
/// is rewritten at every lease and checkpoint and read at every poll, so whatever else the
/// client sent (sub-capabilities, `experimental`, extensions, padding) stays with the request.
pub fn task_capabilities(caps: &Value) -> Value {
    let kept: Map<String, Value> = INPUT_CAPABILITIES
        .iter()
        .filter(|name| declares(caps, name))
        .map(|name| ((*name).to_owned(), json!({})))
        .collect();
    Value::Object(kept)
}

/// The `_meta` every result carries.
pub fn result_meta(server_name: &str, server_version: &str) -> Value {
    json!({ meta::SERVER_INFO: { "name": server_name, "version": server_version } })
}

/// A success response.
pub fn success(id: &Value, result: Map<String, Value>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response. When the request's id could not be read, `id` is left out: the
/// 2026-07-28 schema makes it optional but allows only a string or an integer (JSON-RPC 2.0's
/// `null` does not validate).
pub fn failure(id: Option<&Value>, error: &ErrorObject) -> Value {
    match id {
        Some(id) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        None => json!({"jsonrpc": "2.0", "error": error}),
    }
}

/// The HTTP status an error raised by a tool or job travels with: the codes the transport
/// pins to 400, and 200 for every other application-level error.
pub fn status_for_code(code: i64) -> u16 {
    match code {
        HEADER_MISMATCH | MISSING_CAPABILITY | UNSUPPORTED_VERSION => 400,
        _ => 200,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_capability_error_names_the_extension() {
        let e = McpError::tasks_extension_required("needs tasks");
        assert_eq!(e.status, 400);
        assert_eq!(e.error.code, -32021);
        assert_eq!(
            e.error.data,
            Some(
                json!({"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})
            )
        );
    }

    #[test]
    fn unsupported_version_lists_what_we_speak() {
        let e = McpError::unsupported_version("1999-01-01");
        assert_eq!(e.status, 400);
        assert_eq!(
            e.error.data,
            Some(json!({"supported": ["2026-07-28"], "requested": "1999-01-01"}))
        );
    }

    #[test]
    fn error_response_round_trips() {
        let e = McpError::method_not_found("ping");
        let v = failure(Some(&json!(7)), &e.error);
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found: ping"}})
        );
        let back: ErrorObject = serde_json::from_value(v["error"].clone()).unwrap();
        assert_eq!(back, e.error);
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("ok", 5), "ok");
    }

    #[test]
    fn a_task_keeps_only_the_input_capabilities_it_may_use() {
        let padded = json!({
            "elicitation": {"form": {}, "url": {}},
            "sampling": {"tools": {}},
            "roots": false,
            "experimental": {"pad": "x".repeat(200_000)},
            "extensions": {TASKS_EXTENSION: {}},
        });
        let kept = task_capabilities(&padded);
        assert_eq!(kept, json!({"elicitation": {}, "sampling": {}}));
        let all = json!({"elicitation": {}, "sampling": {}, "roots": {"listChanged": true}});
        let all = task_capabilities(&all);
        assert!(INPUT_CAPABILITIES.iter().all(|c| declares(&all, c)));
        assert_eq!(serde_json::to_vec(&all).unwrap().len(), 43);
        assert_eq!(task_capabilities(&json!({})), json!({}));
    }

    #[test]
    fn tasks_declaration_must_be_an_object() {
        assert!(declares_tasks(
            &json!({"extensions": {TASKS_EXTENSION: {}}})
        ));
        assert!(!declares_tasks(
            &json!({"extensions": {TASKS_EXTENSION: true}})
        ));
        assert!(!declares_tasks(&json!({})));
    }
}
