//! Reading one POSTed JSON-RPC message: a request, a notification, or something we refuse.
//! Limits on nesting and size are enforced here, before any handler sees the value.

use serde_json::{Map, Value};

use super::{McpError, RequestMeta, meta};

/// Deepest JSON nesting accepted (serde_json itself stops at 128).
pub const MAX_DEPTH: usize = 64;
/// Longest string value accepted (the body limit bounds the total).
pub const MAX_STRING_BYTES: usize = 1024 * 1024;
/// Longest object key accepted.
pub const MAX_KEY_BYTES: usize = 1024;
/// Most members of one object or items of one array.
pub const MAX_MEMBERS: usize = 10_000;
/// Largest `params._meta` of a 2026-07-28 request, as compact JSON: a protocol version, client
/// capabilities with their extensions, client info and a progress token take a few hundred
/// bytes; past this the request is refused (`-32602`, HTTP 400) before anything is done.
pub const MAX_META_BYTES: usize = 16 * 1024;

/// One decoded POST body.
#[derive(Debug)]
pub enum Incoming {
    /// A request: it gets a response.
    Request(Request),
    /// A notification: `202 Accepted`, no body.
    Notification {
        /// Its method.
        method: String,
    },
}

/// A JSON-RPC request.
#[derive(Debug, Clone)]
pub struct Request {
    /// String or integer id, echoed on the response.
    pub id: Value,
    /// Method name.
    pub method: String,
    /// `params` (an empty object when absent).
    pub params: Map<String, Value>,
}

/// Parses a body. On failure returns the error and, when it could be read, the request id
/// (so even an invalid request's error echoes its id).
pub fn parse(body: &[u8]) -> Result<Incoming, (Option<Value>, McpError)> {
    let value: Value = serde_json::from_slice(body).map_err(|_| (None, McpError::parse_error()))?;
    if let Err(why) = check_shape(&value) {
        return Err((None, McpError::invalid_request(why)));
    }
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "Batches are not supported: send one JSON-RPC message per POST"
        } else {
            "The body must be a JSON-RPC request object"
        };
        return Err((None, McpError::invalid_request(what)));
    };
    let id = obj.remove("id");
    let valid_id = matches!(&id, Some(Value::String(_)))
        || matches!(&id, Some(Value::Number(n)) if n.is_i64() || n.is_u64());
    let echo_id = if valid_id { id.clone() } else { None };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((
            echo_id,
            McpError::invalid_request("jsonrpc must be \"2.0\""),
        ));
    }
    let Some(Value::String(method)) = obj.remove("method") else {
        let msg = if obj.contains_key("result") || obj.contains_key("error") {
            "Clients must not POST JSON-RPC responses to this server"
        } else {
            "method must be a string"
        };
        return Err((echo_id, McpError::invalid_request(msg)));
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err((
                echo_id,
                McpError::invalid_request("params must be an object"),
            ));
        }
    };
    match id {
        None => Ok(Incoming::Notification { method }),
        Some(_) if !valid_id => Err((
            None,
            McpError::invalid_request("id must be a string or an integer"),
        )),
        Some(id) => Ok(Incoming::Request(Request { id, method, params })),
    }
}

/// Enforces the nesting, string, key and member limits, without recursion (a hostile body
/// cannot blow the stack). The message names the limit, never the offending content.
fn check_shape(v: &Value) -> Result<(), String> {
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        if d > MAX_DEPTH {
            return Err(format!("JSON nesting deeper than {MAX_DEPTH}"));
        }
        match v {
            Value::String(s) if s.len() > MAX_STRING_BYTES => {
                return Err(format!("a string is longer than {MAX_STRING_BYTES} bytes"));
            }
            Value::Array(a) if a.len() > MAX_MEMBERS => {
                return Err(format!("an array has more than {MAX_MEMBERS} items"));
            }
            Value::Object(o) if o.len() > MAX_MEMBERS => {
                return Err(format!("an object has more than {MAX_MEMBERS} members"));
            }
            Value::Object(o) if o.keys().any(|k| k.len() > MAX_KEY_BYTES) => {
                return Err(format!(
                    "an object key is longer than {MAX_KEY_BYTES} bytes"
                ));
            }
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Reads the required `_meta` of a 2026-07-28 request. Missing or mistyped required keys are
/// `-32602` with HTTP 400, as the transport pins.
pub fn read_meta(params: &Map<String, Value>) -> Result<RequestMeta, McpError> {
    let Some(m) = params.get("_meta") else {
        return Err(McpError::invalid_meta(
            "params._meta is required (protocolVersion and clientCapabilities)",
        ));
    };
    let Some(m) = m.as_object() else {
        return Err(McpError::invalid_meta("params._meta must be an object"));
    };
    if json_len_over(m, MAX_META_BYTES) {
        return Err(McpError::invalid_meta(format!(
            "params._meta is larger than {MAX_META_BYTES} bytes"
        )));
    }
    let version = match m.get(meta::PROTOCOL_VERSION) {
        Some(Value::String(v)) => v.clone(),
        Some(_) => {
            return Err(McpError::invalid_meta(format!(
                "_meta[\"{}\"] must be a string",
                meta::PROTOCOL_VERSION
            )));
        }
        None => {
            return Err(McpError::invalid_meta(format!(
                "_meta[\"{}\"] is required",
                meta::PROTOCOL_VERSION
            )));
        }
    };
    let caps = match m.get(meta::CLIENT_CAPABILITIES) {
        Some(c @ Value::Object(_)) => c.clone(),
        Some(_) => {
            return Err(McpError::invalid_meta(format!(
                "_meta[\"{}\"] must be an object",
                meta::CLIENT_CAPABILITIES
            )));
        }
        None => {
            return Err(McpError::invalid_meta(format!(
                "_meta[\"{}\"] is required",
                meta::CLIENT_CAPABILITIES
            )));
        }
    };
    let progress_token = progress_token(m.get("progressToken")).map_err(McpError::invalid_meta)?;
    Ok(RequestMeta {
        protocol_version: version,
        client_capabilities: caps,
        progress_token,
    })
}

/// Whether `v` as compact JSON is longer than `max` bytes; counts without building the text and
/// stops counting past `max`.
fn json_len_over(v: &impl serde::Serialize, max: usize) -> bool {
    struct Counter {
        n: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.max {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter { n: 0, max };
    serde_json::to_writer(&mut c, v).is_err()
}

/// A request's `_meta.progressToken`: none (absent or null), a string or an integer; anything
/// else is refused with the message given.
pub fn progress_token(token: Option<&Value>) -> Result<Option<Value>, &'static str> {
    match token {
        None | Some(Value::Null) => Ok(None),
        Some(t @ Value::String(_)) => Ok(Some(t.clone())),
        Some(t @ Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(t.clone())),
        Some(_) => Err("_meta.progressToken must be a string or an integer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(body: &str) -> (Option<Value>, i64) {
        match parse(body.as_bytes()) {
            Err((id, e)) => (id, e.error.code),
            Ok(_) => panic!("accepted {body}"),
        }
    }

    #[test]
    fn requests_and_notifications_are_told_apart() {
        let r = parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#).unwrap();
        assert!(
            matches!(r, Incoming::Request(Request { ref method, .. }) if method == "tools/list")
        );
        let n = parse(br#"{"jsonrpc":"2.0","method":"notifications/x"}"#).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
    }

    #[test]
    fn malformed_bodies_get_spec_errors_with_the_id_when_readable() {
        assert_eq!(err("{not json"), (None, -32700));
        assert_eq!(err("[]"), (None, -32600));
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#),
            (Some(json!(3)), -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":"a","method":5}"#),
            (Some(json!("a")), -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            (Some(json!(1)), -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#),
            (None, -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#),
            (None, -32600)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            (Some(json!(1)), -32600)
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{deep}}}}}"#);
        assert_eq!(parse(body.as_bytes()).unwrap_err().1.error.code, -32600);
    }

    #[test]
    fn oversized_strings_keys_and_collections_are_refused() {
        let wrap = |params: String| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{params}}}}}"#)
        };
        let long = format!("\"{}\"", "s".repeat(MAX_STRING_BYTES + 1));
        let key = format!("{{\"{}\":1}}", "k".repeat(MAX_KEY_BYTES + 1));
        let items = format!("[{}]", vec!["0"; MAX_MEMBERS + 1].join(","));
        for bad in [long, key, items] {
            let (_, e) = parse(wrap(bad).as_bytes()).unwrap_err();
            assert_eq!((e.status, e.error.code), (400, -32600));
        }
        let fine = format!("\"{}\"", "s".repeat(1000));
        assert!(parse(wrap(fine).as_bytes()).is_ok());
    }

    #[test]
    fn meta_requires_version_and_capabilities() {
        let ok = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": 5}});
        let m = read_meta(ok.as_object().unwrap()).unwrap();
        assert_eq!(m.progress_token, Some(json!(5)));
        for bad in [
            json!({}),
            json!({"_meta": 1}),
            json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": 1,
                "io.modelcontextprotocol/clientCapabilities": {}}}),
        ] {
            let e = read_meta(bad.as_object().unwrap()).unwrap_err();
            assert_eq!((e.status, e.error.code), (400, -32602), "{bad}");
        }
    }

    #[test]
    fn an_oversized_meta_is_refused_without_echoing_it() {
        let meta = |pad: usize| {
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":
                    {"experimental": {"pad": "p".repeat(pad)}}}})
        };
        let fits = meta(MAX_META_BYTES - 200);
        assert!(read_meta(fits.as_object().unwrap()).is_ok());
        let over = meta(MAX_META_BYTES);
        let e = read_meta(over.as_object().unwrap()).unwrap_err();
        assert_eq!((e.status, e.error.code), (400, -32602));
        assert_eq!(e.error.message, "params._meta is larger than 16384 bytes");
        assert!(json_len_over(&json!("abc"), 4));
        assert!(!json_len_over(&json!("ab"), 4));
    }
}
