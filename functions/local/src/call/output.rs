//! What `mcp-tasks call` prints when the call ends: the result's text or the final JSON on
//! stdout, and the exit status.
//!
//! stdout carries what the server sent, so the token a server echoes is replaced by a mark
//! there too, always. When stdout is a terminal the result's control characters are escaped
//! ([`terminal::visible`]); into a pipe or a file the text goes as the tool wrote it (a script
//! gets its exact bytes). JSON always has DEL and the C1 controls escaped
//! ([`terminal::json_text`]): the same JSON value, nothing a terminal acts on.

use std::io::Write;

use serde_json::{Value, json};

use super::ui::Ui;
use super::{EXIT_ERROR, EXIT_FAILED, EXIT_OK, Outcome};
use crate::terminal;

/// Prints the outcome; returns the exit status.
pub(super) fn finish(ui: &mut Ui, outcome: Outcome, as_json: bool) -> i32 {
    match outcome {
        Outcome::Result(result) => {
            let is_error = result.get("isError") == Some(&json!(true));
            if as_json {
                print_json(ui, &result);
            } else if is_error {
                ui.line(&format!("tool error: {}", content_text(&result).trim_end()));
            } else {
                print_text(ui, &content_text(&result));
            }
            if is_error { EXIT_FAILED } else { EXIT_OK }
        }
        Outcome::RpcError(e) => {
            if as_json {
                print_json(ui, &json!({"error": e}));
            }
            ui.error(&rpc_error_text(&e));
            EXIT_ERROR
        }
        Outcome::TaskEnded(task) => {
            if as_json {
                print_json(ui, &task);
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

/// A result's text on stdout, ending with a newline.
fn print_text(ui: &Ui, text: &str) {
    let text = ui.redact(text);
    let text = match ui.stdout_tty {
        true => terminal::visible(&text),
        false => text.as_str().into(),
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    if !text.is_empty() && !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
}

/// The final JSON on stdout, pretty.
fn print_json(ui: &Ui, v: &Value) {
    let mut v = v.clone();
    ui.redact_json(&mut v);
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}",
        terminal::json_text(&v, true)
    );
}

/// The text of a `CallToolResult`: its text content, other kinds as a one-line summary, or
/// the structured content when there is no content.
pub(super) fn content_text(result: &Value) -> String {
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
pub(super) fn rpc_error_text(e: &Value) -> String {
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
