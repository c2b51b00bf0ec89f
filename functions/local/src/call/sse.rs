//! A `text/event-stream` reader for `mcp-tasks call`.

/// A `text/event-stream` reader: complete events' `data` in, in order.
#[derive(Default)]
pub(super) struct Sse {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

impl Sse {
    pub(super) fn feed(&mut self, bytes: &[u8], events: &mut Vec<String>) {
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.field(&line, events);
            } else {
                self.line.push(b);
            }
        }
    }

    /// The stream ended: a last event without its blank line still counts.
    pub(super) fn end(&mut self, events: &mut Vec<String>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.field(&line, events);
        }
        self.field(b"", events);
    }

    pub(super) fn field(&mut self, line: &[u8], events: &mut Vec<String>) {
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                events.push(String::from_utf8_lossy(&std::mem::take(&mut self.data)).into_owned());
            }
            return;
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // Comments (`:`), `event:`, `id:` and `retry:` carry nothing this client uses.
    }
}
