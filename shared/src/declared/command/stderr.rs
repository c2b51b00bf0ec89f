//! A `command` target's stderr, read in lines of bounded length: whatever the program writes
//! (a line of hundreds of MiB without a newline, a flood of short lines), the reader holds at
//! most one read buffer and [`MAX_LOG_LINE`] bytes of the current line; the rest of a long
//! line is read and thrown away up to its newline. The first [`MAX_LOG_LINES`] lines of a step
//! are logged, their control characters escaped ([`crate::terminal::visible`]), so a program
//! echoing a tenant's argument can neither act on the terminal that shows the log nor forge a
//! log line; the rest are counted.

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// Longest stderr line kept and logged, in bytes (the rest of the line is read and dropped).
pub const MAX_LOG_LINE: usize = 1024;
/// Most stderr lines logged per step (the rest are counted, not logged).
pub const MAX_LOG_LINES: usize = 100;
/// One read's buffer.
const READ_BUFFER: usize = 16 * 1024;

/// Reads `from` to its end (or its first error), handing `each` every line: its first `max`
/// bytes (without the newline), and whether more of it was dropped. A last line without a
/// newline is handed over too.
pub async fn bounded_lines<R: AsyncRead + Unpin>(
    mut from: R,
    max: usize,
    mut each: impl FnMut(&[u8], bool),
) {
    let mut buf = vec![0u8; READ_BUFFER];
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let keep = |line: &mut Vec<u8>, cut: &mut bool, bytes: &[u8]| {
        let room = max - line.len();
        if bytes.len() > room {
            line.extend_from_slice(&bytes[..room]);
            *cut = true;
        } else {
            line.extend_from_slice(bytes);
        }
    };
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &buf[..n];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            keep(&mut line, &mut cut, &rest[..i]);
            each(&line, cut);
            line.clear();
            cut = false;
            rest = &rest[i + 1..];
        }
        keep(&mut line, &mut cut, rest);
    }
    if !line.is_empty() || cut {
        each(&line, cut);
    }
}

/// Logs the stderr of `program`'s step: the first [`MAX_LOG_LINES`] lines, each cut at
/// [`MAX_LOG_LINE`] bytes and escaped; then how many were not logged.
pub async fn log<R: AsyncRead + Unpin>(from: R, program: &str) {
    let (mut logged, mut dropped) = (0usize, 0usize);
    bounded_lines(from, MAX_LOG_LINE, |line, cut| {
        if logged == MAX_LOG_LINES {
            dropped += 1;
            return;
        }
        logged += 1;
        let text = String::from_utf8_lossy(line);
        let line = crate::terminal::visible(&text);
        match cut {
            true => tracing::info!(program = %program, line = %line, cut, "declared tool: stderr"),
            false => tracing::info!(program = %program, line = %line, "declared tool: stderr"),
        }
    })
    .await;
    if dropped > 0 {
        tracing::info!(program = %program, dropped, "declared tool: stderr lines not logged");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of<R: AsyncRead + Unpin>(from: R, max: usize) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        bounded_lines(from, max, |l, cut| out.push((l.to_vec(), cut))).await;
        out
    }

    #[tokio::test]
    async fn lines_are_cut_at_the_bound_and_the_rest_skipped_to_the_newline() {
        let input: &[u8] = b"short\n0123456789abcdef\n\nlast";
        let got = lines_of(input, 10).await;
        let want: Vec<(Vec<u8>, bool)> = vec![
            (b"short".to_vec(), false),
            (b"0123456789".to_vec(), true),
            (b"".to_vec(), false),
            (b"last".to_vec(), false),
        ];
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_line_longer_than_many_buffers_is_one_cut_line() {
        // 64 MiB without a newline, then a short line: read in pieces, never held whole.
        let long = tokio::io::repeat(b'x').take(64 << 20);
        let input = long.chain(&b"\nnext\n"[..]);
        let got = lines_of(input, MAX_LOG_LINE).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (vec![b'x'; MAX_LOG_LINE], true));
        assert_eq!(got[1], (b"next".to_vec(), false));
    }

    #[tokio::test]
    async fn a_line_exactly_at_the_bound_is_whole() {
        let got = lines_of(&b"abcd\nabcde"[..], 4).await;
        assert_eq!(
            got,
            vec![(b"abcd".to_vec(), false), (b"abcd".to_vec(), true)]
        );
    }
}
