//! The terminal side of `mcp-tasks call` on stderr: status lines, the progress line (redrawn
//! in place on a terminal), and what is scrubbed from everything written there.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use mcp_tasks_core::protocol::method;
use serde_json::Value;

use crate::terminal;

/// What a server's echo of the bearer token is replaced with, wherever it is written.
pub(super) const TOKEN_MARK: &str = "[token]";

/// How far along a status message says the work is: "Hashed 400000 of 1000000 rounds" is
/// 0.4, "42%" is 0.42. `None` when it says neither.
pub(super) fn fraction_in(message: &str) -> Option<f64> {
    let words: Vec<&str> = message.split_whitespace().collect();
    let number = |w: &str| {
        w.trim_matches(|c: char| !c.is_ascii_digit())
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
    };
    for w in words.windows(3) {
        if w[1] == "of"
            && let (Some(done), Some(total)) = (number(w[0]), number(w[2]))
            && total > 0.0
            && (0.0..=total).contains(&done)
        {
            return Some(done / total);
        }
    }
    words.iter().find_map(|w| {
        let p = w.trim_end_matches([',', '.', ')']).strip_suffix('%')?;
        p.parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(|p| p / 100.0)
    })
}

/// Everything written to stderr: status lines, the progress line, prompts and errors, all
/// scrubbed of the token, their control characters escaped ([`terminal::visible`]); and what
/// the result written to stdout is scrubbed of ([`super::output`]).
pub(super) struct Ui {
    /// The bearer token, trimmed: replaced by [`TOKEN_MARK`] wherever a server echoes it.
    pub(super) secret: Option<String>,
    /// stdout is a terminal: the result's control characters are escaped there too.
    pub(super) stdout_tty: bool,
    /// stderr is a terminal: one progress line redrawn in place.
    pub(super) tty: bool,
    pub(super) stdin_tty: bool,
    /// A progress line is on screen (terminal mode).
    pub(super) drawn: bool,
    /// The last status and message written (plain mode writes only changes).
    pub(super) last: Option<(String, Option<String>)>,
    pub(super) started: Instant,
    pub(super) frame: usize,
}

impl Ui {
    pub(super) fn new(secret: Option<String>) -> Self {
        Self {
            secret: secret
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
            stdout_tty: std::io::stdout().is_terminal(),
            tty: std::io::stderr().is_terminal(),
            stdin_tty: std::io::stdin().is_terminal(),
            drawn: false,
            last: None,
            started: Instant::now(),
            frame: 0,
        }
    }

    /// `s` without the token, its control characters escaped (stderr, terminal or not: a log
    /// read later is read on a terminal).
    pub(super) fn clean(&self, s: &str) -> String {
        terminal::visible(&self.redact(s)).into_owned()
    }

    /// `s` with the token replaced by [`TOKEN_MARK`].
    pub(super) fn redact(&self, s: &str) -> String {
        match &self.secret {
            Some(t) => s.replace(t.as_str(), TOKEN_MARK),
            None => s.to_owned(),
        }
    }

    /// `v` with the token replaced in every string and key.
    pub(super) fn redact_json(&self, v: &mut Value) {
        let Some(t) = &self.secret else { return };
        match v {
            Value::String(s) if s.contains(t.as_str()) => *s = self.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|i| self.redact_json(i)),
            Value::Object(m) => {
                let old = std::mem::take(m);
                for (k, mut item) in old {
                    self.redact_json(&mut item);
                    m.insert(self.redact(&k), item);
                }
            }
            _ => {}
        }
    }

    /// Takes the progress line off the screen.
    pub(super) fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }

    /// A status line.
    pub(super) fn line(&mut self, s: &str) {
        self.clear();
        eprintln!("mcp-tasks: {}", self.clean(s));
    }

    pub(super) fn error(&mut self, s: &str) {
        self.clear();
        eprintln!("mcp-tasks: error: {}", self.clean(s));
    }

    /// Shows where the work is: redraws the line on a terminal, else writes a line when the
    /// status or message changed.
    pub(super) fn progress(&mut self, status: &str, message: Option<&str>, fraction: Option<f64>) {
        let message = message.map(|m| self.clean(m).replace(['\n', '\t'], " "));
        let secs = self.started.elapsed().as_secs();
        let percent = fraction.map(|f| (f * 100.0).round() as u32);
        if !self.tty {
            let now = (status.to_owned(), message.clone());
            if self.last.as_ref() != Some(&now) {
                let mut l = format!("[{secs}s] {status}");
                if let Some(p) = percent {
                    l.push_str(&format!(" {p}%"));
                }
                if let Some(m) = &message {
                    l.push_str(&format!(": {m}"));
                }
                self.last = Some(now);
                eprintln!("mcp-tasks: {l}");
            }
            return;
        }
        const SPIN: [char; 4] = ['|', '/', '-', '\\'];
        self.frame = self.frame.wrapping_add(1);
        let mut l = format!("{} {status} {secs}s", SPIN[self.frame % SPIN.len()]);
        if let Some(f) = fraction {
            let width = 20;
            let full = ((f.clamp(0.0, 1.0)) * width as f64).round() as usize;
            l.push_str(&format!(
                " [{}{}] {:>3}%",
                "#".repeat(full),
                "-".repeat(width - full),
                percent.unwrap_or(0)
            ));
        }
        if let Some(m) = &message {
            l.push(' ');
            l.push_str(m);
        }
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|c| *c >= 20)
            .unwrap_or(80);
        let l: String = l.chars().take(columns - 1).collect();
        eprint!("\r\x1b[2K{l}");
        let _ = std::io::stderr().flush();
        self.drawn = true;
    }

    /// A notification on a synchronous call's event stream.
    pub(super) fn notification(&mut self, n: &Value) {
        if n["method"] != method::PROGRESS {
            return;
        }
        let p = &n["params"];
        let fraction = match (p["progress"].as_f64(), p["total"].as_f64()) {
            (Some(done), Some(total)) if total > 0.0 => Some((done / total).clamp(0.0, 1.0)),
            _ => None,
        };
        let message = p["message"].as_str().map(str::to_owned);
        self.progress(
            "running",
            message.as_deref(),
            fraction.or_else(|| message.as_deref().and_then(fraction_in)),
        );
    }
}
