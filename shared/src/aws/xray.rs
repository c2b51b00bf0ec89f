//! One X-Ray segment per work message the worker handles, in the trace of the request that
//! created the work.
//!
//! Lambda records a segment for each sampled invocation, but an SQS-triggered invocation runs
//! in a trace of its own: the trace a message carries (SQS's `AWSTraceHeader`, which
//! [`super::sqs`] sets from the sending invocation's) does not continue by itself. So the
//! worker sends, for each message it handles, a segment to the X-Ray daemon that Lambda runs
//! beside each function with active tracing (`AWS_XRAY_DAEMON_ADDRESS`, UDP): in the message's
//! trace, a child of the segment that sent it, from the start of the handling to its end, with
//! the task id, the outcome and the receive count as annotations (searchable:
//! `annotation.task_id = "…"`). In the X-Ray console the request, the mcp invocation that
//! created the task and every worker run of its job — hand-overs and wake-ups included — are
//! one trace.
//!
//! What a segment never carries: a task's arguments, results, status message or tenant.
//! Bounded: one datagram of well under 1 KB per message handled; sent without waiting (a full
//! socket buffer drops the segment, never the work); nothing when the header is missing,
//! malformed or not sampled (`Sampled=0`), or when no daemon is configured (the local server,
//! a function without active tracing).

use std::net::{SocketAddr, ToSocketAddrs as _, UdpSocket};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The longest string annotation, in bytes (X-Ray keeps up to 1,000 characters).
const MAX_ANNOTATION: usize = 256;

/// The segment name when the function's own name is unusable (never in Lambda).
const DEFAULT_NAME: &str = "mcp-tasks-worker";

/// The parts of an X-Ray trace header a segment needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `1-xxxxxxxx-yyyyyyyyyyyyyyyyyyyyyyyy`.
    pub trace_id: String,
    /// The sending segment's id (16 hex digits), when the header names one.
    pub parent_id: Option<String>,
}

impl TraceContext {
    /// The context of a sampled header (`Root=…;Parent=…;Sampled=1`, fields in any order);
    /// `None` for anything malformed or not sampled.
    pub fn sampled(header: &str) -> Option<Self> {
        let (mut root, mut parent, mut sampled) = (None, None, false);
        for field in header.split(';') {
            match field.trim().split_once('=') {
                Some(("Root", v)) => root = Some(v),
                Some(("Parent", v)) => parent = Some(v),
                Some(("Sampled", v)) => sampled = v == "1",
                _ => {}
            }
        }
        let root = root.filter(|r| is_trace_id(r))?;
        sampled.then(|| Self {
            trace_id: root.to_owned(),
            parent_id: parent.filter(|p| is_hex(p, 16)).map(str::to_owned),
        })
    }
}

/// `1-` + 8 hex digits (the epoch) + `-` + 24 hex digits.
fn is_trace_id(s: &str) -> bool {
    let mut parts = s.split('-');
    parts.next() == Some("1")
        && parts.next().is_some_and(|t| is_hex(t, 8))
        && parts.next().is_some_and(|r| is_hex(r, 24))
        && parts.next().is_none()
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Where segments go: the daemon's UDP address and a socket to send from.
#[derive(Debug)]
pub struct Daemon {
    socket: UdpSocket,
    addr: SocketAddr,
}

impl Daemon {
    /// The daemon named by `AWS_XRAY_DAEMON_ADDRESS`, resolved once per process; `None` when
    /// it is unset or unusable (logged once).
    pub fn from_env() -> Option<&'static Daemon> {
        static DAEMON: OnceLock<Option<Daemon>> = OnceLock::new();
        DAEMON
            .get_or_init(|| {
                let setting = std::env::var("AWS_XRAY_DAEMON_ADDRESS").ok()?;
                Daemon::at(&setting)
                    .inspect_err(|e| {
                        tracing::warn!(error = %e, "AWS_XRAY_DAEMON_ADDRESS unusable; no X-Ray segments")
                    })
                    .ok()
            })
            .as_ref()
    }

    /// A daemon at `setting`: `host:port`, or the two-address form `tcp:host:port
    /// udp:host:port` (the UDP one is used).
    pub fn at(setting: &str) -> std::io::Result<Self> {
        let udp = setting
            .split_whitespace()
            .find_map(|a| a.strip_prefix("udp:"))
            .or_else(|| setting.split_whitespace().find(|a| !a.starts_with("tcp:")))
            .ok_or_else(|| std::io::Error::other("no UDP address"))?;
        let addr = udp
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("address did not resolve"))?;
        let local: SocketAddr = if addr.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let socket = UdpSocket::bind(local)?;
        socket.set_nonblocking(true)?;
        Ok(Self { socket, addr })
    }

    /// Sends one segment document, without waiting; a failure is logged and dropped.
    fn send(&self, segment: &Value) {
        let mut datagram = br#"{"format":"json","version":1}"#.to_vec();
        datagram.push(b'\n');
        if serde_json::to_writer(&mut datagram, segment).is_err() {
            return;
        }
        if let Err(e) = self.socket.send_to(&datagram, self.addr) {
            tracing::debug!(error = %e, "X-Ray segment not sent");
        }
    }
}

/// The segment of one work message: started when its handling starts, annotated as it goes,
/// sent when dropped (on every path out of the handling).
#[derive(Debug)]
pub struct MessageSegment {
    daemon: &'static Daemon,
    context: TraceContext,
    name: String,
    start: f64,
    annotations: Map<String, Value>,
    fault: bool,
}

impl MessageSegment {
    /// A segment in the trace `header` names, if it is sampled and a daemon is configured.
    pub fn start(header: Option<&str>) -> Option<Self> {
        Self::start_with(Daemon::from_env()?, header?)
    }

    /// As [`MessageSegment::start`], to a given daemon.
    pub fn start_with(daemon: &'static Daemon, header: &str) -> Option<Self> {
        let context = TraceContext::sampled(header)?;
        let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME")
            .ok()
            .filter(|n| {
                !n.is_empty()
                    && n.len() <= 200
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            })
            .unwrap_or_else(|| DEFAULT_NAME.to_owned());
        Some(Self {
            daemon,
            context,
            name,
            start: now(),
            annotations: Map::new(),
            fault: false,
        })
    }

    /// Adds an annotation (a string or a number; keys are fixed names of ours). A string is
    /// cut to [`MAX_ANNOTATION`] bytes: a work message is ours, but one that is not (a task id
    /// of any length) must not grow the datagram.
    pub fn annotate(&mut self, key: &'static str, value: impl Into<Value>) {
        let mut value = value.into();
        if let Value::String(s) = &mut value
            && s.len() > MAX_ANNOTATION
        {
            let mut end = MAX_ANNOTATION;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
        }
        self.annotations.insert(key.to_owned(), value);
    }

    /// Marks the handling as failed on our side (a store or queue error).
    pub fn fault(&mut self) {
        self.fault = true;
    }

    /// The segment document as it would be sent now.
    fn document(&self) -> Value {
        let mut segment = json!({
            "name": self.name,
            "id": segment_id(),
            "trace_id": self.context.trace_id,
            "start_time": self.start,
            "end_time": now().max(self.start),
            "annotations": self.annotations,
        });
        if let Some(parent) = &self.context.parent_id {
            segment["parent_id"] = json!(parent);
        }
        if self.fault {
            segment["fault"] = json!(true);
        }
        segment
    }
}

impl Drop for MessageSegment {
    fn drop(&mut self) {
        self.daemon.send(&self.document());
    }
}

/// Seconds since the epoch, as X-Ray wants them.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A fresh 64-bit segment id, 16 hex digits.
fn segment_id() -> String {
    let mut b = [0u8; 8];
    crate::clock::random_bytes(&mut b);
    format!("{:016x}", u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "1-5759e988-bd862e3fe1be46a994272793";

    #[test]
    fn only_a_sampled_well_formed_header_gives_a_context() {
        let ok = TraceContext::sampled(&format!("Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=1"));
        assert_eq!(
            ok,
            Some(TraceContext {
                trace_id: ROOT.into(),
                parent_id: Some("53995c3f42cd8ad8".into())
            })
        );
        // Any order, extra fields, no parent.
        let ok = TraceContext::sampled(&format!("Sampled=1;Lineage=a:1;Root={ROOT}")).unwrap();
        assert_eq!(ok.parent_id, None);
        // A malformed parent is left out, not passed on.
        let ok = TraceContext::sampled(&format!("Root={ROOT};Parent=xyz;Sampled=1")).unwrap();
        assert_eq!(ok.parent_id, None);
        for refused in [
            format!("Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=0"),
            format!("Root={ROOT};Parent=53995c3f42cd8ad8"),
            format!("Root={ROOT};Sampled=?"),
            "Root=1-5759e988-bd86;Sampled=1".to_owned(),
            "Root=2-5759e988-bd862e3fe1be46a994272793;Sampled=1".to_owned(),
            format!("Root={ROOT}-extra;Sampled=1"),
            "Sampled=1".to_owned(),
            String::new(),
        ] {
            assert_eq!(TraceContext::sampled(&refused), None, "{refused}");
        }
    }

    #[test]
    fn the_daemon_address_takes_both_forms() {
        assert_eq!(
            Daemon::at("127.0.0.1:2000").unwrap().addr,
            "127.0.0.1:2000".parse().unwrap()
        );
        assert_eq!(
            Daemon::at("tcp:127.0.0.1:2001 udp:127.0.0.1:2002")
                .unwrap()
                .addr,
            "127.0.0.1:2002".parse().unwrap()
        );
        assert!(Daemon::at("tcp:127.0.0.1:2001").is_err());
        assert!(Daemon::at("").is_err());
        assert!(Daemon::at("not an address").is_err());
    }

    #[test]
    fn a_dropped_segment_reaches_the_daemon_once_with_its_annotations() {
        let listener = UdpSocket::bind("127.0.0.1:0").unwrap();
        listener
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let daemon: &'static Daemon = Box::leak(Box::new(
            Daemon::at(&listener.local_addr().unwrap().to_string()).unwrap(),
        ));
        let header = format!("Root={ROOT};Parent=53995c3f42cd8ad8;Sampled=1");
        {
            let mut segment = MessageSegment::start_with(daemon, &header).unwrap();
            segment.annotate("task_id", "01TASK");
            segment.annotate("receives", 2);
            segment.annotate("outcome", "é".repeat(200));
            segment.fault();
        }
        let mut buf = [0u8; 65_536];
        let n = listener.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        let (head, body) = text.split_once('\n').unwrap();
        assert_eq!(head, r#"{"format":"json","version":1}"#);
        let segment: Value = serde_json::from_str(body).unwrap();
        assert_eq!(segment["trace_id"], ROOT);
        assert_eq!(segment["parent_id"], "53995c3f42cd8ad8");
        assert!(is_hex(segment["id"].as_str().unwrap(), 16), "{segment}");
        assert!(segment["end_time"].as_f64() >= segment["start_time"].as_f64());
        assert_eq!(segment["annotations"]["task_id"], "01TASK");
        assert_eq!(segment["annotations"]["receives"], 2);
        // Cut to the bound, on a character boundary.
        assert_eq!(segment["annotations"]["outcome"], "é".repeat(128));
        assert_eq!(segment["fault"], true);
        // Not sampled: nothing is sent.
        assert!(MessageSegment::start_with(daemon, &format!("Root={ROOT};Sampled=0")).is_none());
        listener
            .set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        assert!(listener.recv(&mut buf).is_err(), "one datagram per segment");
    }
}
