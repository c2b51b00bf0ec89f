//! SEP-2243 header rules: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*`
//! must agree with the body, which is the source of truth.

use base64::Engine as _;
use http::HeaderMap;
use serde_json::{Map, Value};

use super::McpError;

/// `MCP-Protocol-Version`: the revision the request speaks (mirrors `_meta`).
pub const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Method`: the JSON-RPC method of the body.
pub const MCP_METHOD: &str = "mcp-method";
/// `Mcp-Name`: the tool of a `tools/call`, the task id of a `tasks/*` request.
pub const MCP_NAME: &str = "mcp-name";
/// `Mcp-Param-{Token}`: an argument a tool's schema marks with `x-mcp-header: Token`.
pub const MCP_PARAM_PREFIX: &str = "mcp-param-";

/// The base64 sentinel for values that are not header-safe: `=?base64?…?=`.
const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// A header's value, trimmed, with the base64 sentinel decoded. `Err` when the header is not
/// valid text or its sentinel is malformed.
pub fn header_value(headers: &HeaderMap, name: &str) -> Result<Option<String>, McpError> {
    let Some(raw) = headers.get(name) else {
        return Ok(None);
    };
    let raw = raw
        .to_str()
        .map_err(|_| McpError::header_mismatch(format!("Header {name} is not valid ASCII")))?
        .trim();
    decode_sentinel(raw)
        .map(Some)
        .ok_or_else(|| McpError::header_mismatch(format!("Header {name} has malformed base64")))
}

/// Decodes `=?base64?…?=`; any other value is taken literally.
pub fn decode_sentinel(raw: &str) -> Option<String> {
    let Some(inner) = raw
        .strip_prefix(SENTINEL_PREFIX)
        .and_then(|r| r.strip_suffix(SENTINEL_SUFFIX))
    else {
        return Some(raw.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The header value a client sends for `v`: `v` itself when it is header-safe (visible ASCII
/// and spaces, no space at either end, not sentinel-like), else the base64 sentinel. The
/// inverse of [`decode_sentinel`].
pub fn encode_value(v: &str) -> String {
    let safe = v.bytes().all(|b| (0x20..0x7f).contains(&b))
        && v.trim() == v
        && !v.starts_with(SENTINEL_PREFIX);
    if safe {
        v.to_owned()
    } else {
        format!(
            "{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}",
            base64::engine::general_purpose::STANDARD.encode(v)
        )
    }
}

/// Checks one header against the body value it mirrors. A missing header is an error only
/// when `required`.
pub fn expect_header(
    headers: &HeaderMap,
    name: &str,
    body: &str,
    required: bool,
) -> Result<(), McpError> {
    match header_value(headers, name)? {
        Some(v) if v == body => Ok(()),
        Some(_) => Err(McpError::header_mismatch(format!(
            "Header {name} does not match the request body"
        ))),
        None if required => Err(McpError::header_mismatch(format!(
            "Header {name} is required"
        ))),
        None => Ok(()),
    }
}

/// Properties of a tool's `inputSchema` that carry `x-mcp-header`: (header token, property).
pub fn mirrored_params(input_schema: &Value) -> Vec<(String, String)> {
    input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter_map(|(prop, schema)| {
                    let token = schema.get("x-mcp-header")?.as_str()?;
                    Some((token.to_owned(), prop.clone()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Checks every `Mcp-Param-{Token}` header of a `tools/call` against its argument. Integers
/// compare numerically; booleans and strings compare as text.
pub fn check_params(
    headers: &HeaderMap,
    mirrored: &[(String, String)],
    arguments: &Map<String, Value>,
) -> Result<(), McpError> {
    for (token, prop) in mirrored {
        let name = format!("{MCP_PARAM_PREFIX}{token}");
        let header = header_value(headers, &name)?;
        let body = arguments.get(prop).filter(|v| !v.is_null());
        match (header, body) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(McpError::header_mismatch(format!(
                    "Header Mcp-Param-{token} is set but the argument {prop} is absent"
                )));
            }
            (None, Some(_)) => {
                return Err(McpError::header_mismatch(format!(
                    "Header Mcp-Param-{token} is required for argument {prop}"
                )));
            }
            (Some(h), Some(b)) => {
                let same = match b {
                    Value::String(s) => *s == h,
                    Value::Number(n) => match (n.as_i64(), h.parse::<i64>()) {
                        (Some(a), Ok(b)) => a == b,
                        _ => n.as_f64() == h.parse::<f64>().ok(),
                    },
                    Value::Bool(x) => x.to_string() == h,
                    _ => false,
                };
                if !same {
                    return Err(McpError::header_mismatch(format!(
                        "Header Mcp-Param-{token} does not match argument {prop}"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn values_a_client_encodes_decode_to_themselves() {
        assert_eq!(encode_value("plain-value"), "plain-value");
        assert_eq!(encode_value(" x"), "=?base64?IHg=?=");
        assert_eq!(encode_value("été"), "=?base64?w6l0w6k=?=");
        // A value that looks like a sentinel is encoded, so it is not decoded as one.
        for v in ["plain", " x", "été", "=?base64?abc?=", "a\nb", ""] {
            assert_eq!(
                decode_sentinel(&encode_value(v)).as_deref(),
                Some(v),
                "{v:?}"
            );
        }
    }

    #[test]
    fn sentinel_values_are_decoded_and_malformed_ones_refused() {
        assert_eq!(
            decode_sentinel("=?base64?w6l0w6k=?=").as_deref(),
            Some("été")
        );
        assert_eq!(decode_sentinel("plain").as_deref(), Some("plain"));
        assert_eq!(
            decode_sentinel("=?base64?abc").as_deref(),
            Some("=?base64?abc")
        );
        assert_eq!(decode_sentinel("=?base64?!!!?="), None);
        assert_eq!(decode_sentinel("=?base64?YQ?="), None, "bad padding");
    }

    #[test]
    fn header_names_are_case_insensitive_values_trimmed_and_case_sensitive() {
        let h = headers(&[("MCP-METHOD", "  tools/list ")]);
        assert!(expect_header(&h, "mcp-method", "tools/list", true).is_ok());
        assert!(expect_header(&h, "mcp-method", "Tools/List", true).is_err());
        assert!(expect_header(&HeaderMap::new(), "mcp-name", "x", true).is_err());
        assert!(expect_header(&HeaderMap::new(), "mcp-name", "x", false).is_ok());
    }

    #[test]
    fn mirrored_params_compare_by_type() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"}}});
        let m = mirrored_params(&schema);
        assert_eq!(m.len(), 2);
        let args = json!({"region": "eu-west-1", "n": 42});
        let args = args.as_object().unwrap();
        let ok = headers(&[("mcp-param-region", "eu-west-1"), ("mcp-param-n", "42")]);
        assert!(check_params(&ok, &m, args).is_ok());
        let missing = headers(&[("mcp-param-n", "42")]);
        assert_eq!(
            check_params(&missing, &m, args).unwrap_err().error.code,
            -32020
        );
        let wrong = headers(&[("mcp-param-region", "us"), ("mcp-param-n", "42")]);
        assert!(check_params(&wrong, &m, args).is_err());
    }
}
