//! Text from others (a server's answers, a store's records) made safe to show on a terminal:
//! [`visible`] (shared with the server's log, `mcp_tasks_core::terminal`) escapes every
//! character a terminal acts on; [`json_text`] does the same for JSON text, keeping it the
//! same JSON value.

use serde_json::Value;

pub use mcp_tasks_core::terminal::{is_unsafe, visible};

/// `v` as JSON text, pretty or compact, with DEL and the C1 controls escaped too (`\u007f`,
/// `\u0080`…`\u009f`): serde_json escapes only U+0000–U+001F. The text is the same JSON value.
pub fn json_text(v: &Value, pretty: bool) -> String {
    let text = match pretty {
        true => serde_json::to_string_pretty(v),
        false => serde_json::to_string(v),
    }
    .unwrap_or_default();
    // Outside strings serde_json writes only ASCII punctuation, digits, letters and
    // whitespace, so any DEL or C1 character is inside a string, where `\u` is valid.
    if !text.chars().any(is_unsafe) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match is_unsafe(c) {
            true => out.push_str(&format!("\\u{:04x}", c as u32)),
            false => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_escapes_del_and_c1_and_stays_the_same_value() {
        let v = json!({"k\u{85}": ["\x1b[2J", "\u{7f}\u{9b}x", "\u{a0}ok", 1.5]});
        for pretty in [false, true] {
            let text = json_text(&v, pretty);
            assert!(!text.chars().any(is_unsafe), "{text:?}");
            assert!(text.contains("\\u007f\\u009bx"), "{text}");
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        }
    }
}
