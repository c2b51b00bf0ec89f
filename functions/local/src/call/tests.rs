use serde_json::json;

use super::form::field_value;
use super::sse::Sse;
use super::transport::{Reply, mirror, parse_reply, redact_url, shown_url};
use super::ui::{Ui, fraction_in};

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
        ui.clean("server said: Bearer s3cr3t-token\x1b[2J\u{9b}1m\tok"),
        "server said: Bearer [token]\\u{1b}[2J\\u{9b}1m\tok"
    );
    let mut echoed =
        json!({"a s3cr3t-token key": [1, "x s3cr3t-token y"], "n": {"t": "s3cr3t-token"}});
    ui.redact_json(&mut echoed);
    assert_eq!(
        echoed,
        json!({"a [token] key": [1, "x [token] y"], "n": {"t": "[token]"}})
    );
    assert_eq!(redact_url("https://u:s3cr3t@host/mcp"), "…@host/mcp");
    let u = reqwest::Url::parse("https://u:s3cr3t@host/mcp").unwrap();
    assert_eq!(shown_url(&u), "https://host/mcp");
}

/// The protocol's names and numbers (version, extension id, `_meta` keys, methods, header
/// names, error codes, the base64 sentinel) come from `mcp_tasks_core::protocol`: a copy here
/// could drift from what the server checks.
#[test]
fn protocol_constants_are_not_declared_again() {
    let sources = [
        ("call.rs", include_str!("../call.rs")),
        ("transport.rs", include_str!("transport.rs")),
        ("sse.rs", include_str!("sse.rs")),
        ("ui.rs", include_str!("ui.rs")),
        ("form.rs", include_str!("form.rs")),
        ("output.rs", include_str!("output.rs")),
    ];
    let owned = [
        "\"2026-07-28\"",
        "\"io.modelcontextprotocol/",
        "\"tools/list\"",
        "\"tools/call\"",
        "\"tasks/get\"",
        "\"tasks/update\"",
        "\"tasks/cancel\"",
        "\"notifications/progress\"",
        "\"elicitation/create\"",
        "\"mcp-protocol-version\"",
        "\"mcp-method\"",
        "\"mcp-name\"",
        "\"mcp-param-",
        "-32020",
        "-32021",
        "\"=?base64?",
    ];
    for (file, text) in sources {
        // Comments may name them.
        let code = (1..)
            .zip(text.lines())
            .filter(|(_, l)| !l.trim_start().starts_with("//"));
        for (n, line) in code {
            for literal in owned {
                assert!(
                    !line.contains(literal),
                    "call/{file}:{n}: {literal} declared again: use \
                     mcp_tasks_core::protocol"
                );
            }
        }
    }
}
