//! Text from others (a server's answers, a store's records, a program's stderr) made safe to
//! show on a terminal or write to a log read on one.
//!
//! A terminal acts on control characters: ESC starts sequences that move the cursor, clear the
//! screen, set the window title, write the clipboard (OSC 52) or, on some terminals, answer
//! back into the input; C1 controls (U+0080–U+009F, CSI among them) do the same on terminals
//! that read them; BEL, BS, CR and DEL rewrite what is shown (a carriage return lets a line
//! pass for another). Such characters are written as visible escapes (`\u{1b}`), so a text can
//! neither hide text nor act on the terminal. Newline and tab are kept: they lay out text and
//! act on nothing. The command line (`mcp-tasks call`, `mcp-tasks tasks`) and the server's log
//! of a `command` target's stderr use this one function.

use std::borrow::Cow;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_layout_kept() {
        assert_eq!(visible("plain été"), "plain été");
        assert_eq!(
            visible("a\x1b[2Jb\u{9b}31m\x7f\x07\r\n\tc"),
            "a\\u{1b}[2Jb\\u{9b}31m\\u{7f}\\u{7}\\r\n\tc"
        );
    }
}
