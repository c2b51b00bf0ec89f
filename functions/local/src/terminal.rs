//! Text from others (a server's answers, a store's records) made safe to show on a terminal.
//!
//! A terminal acts on control characters: ESC starts sequences that move the cursor, clear the
//! screen, set the window title or, on some terminals, answer back into the input; C1 controls
//! (U+0080–U+009F, CSI among them) do the same on terminals that read them; BEL, BS, CR and DEL
//! rewrite what is shown. Such characters are written as visible escapes (`\u{1b}`), so a
//! result can neither hide text nor act on the terminal. Newline and tab are kept: they lay
//! out text and act on nothing.

use std::borrow::Cow;

use serde_json::Value;

/// Whether a terminal could act on `c`: C0 controls but newline and tab, DEL, C1 controls.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `s` with every character a terminal could act on escaped as `\u{…}` (`\r`, `\0` for those).
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match is_unsafe(c) {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    Cow::Owned(out)
}

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
    fn controls_are_escaped_and_layout_kept() {
        assert_eq!(visible("plain été"), "plain été");
        assert_eq!(
            visible("a\x1b[2Jb\u{9b}31m\x7f\x07\r\n\tc"),
            "a\\u{1b}[2Jb\\u{9b}31m\\u{7f}\\u{7}\\r\n\tc"
        );
    }

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
