//! `TCP_NODELAY` on the function's own connection to the Lambda Runtime API.
//!
//! # Why
//!
//! A streamed answer (the mcp function behind the streaming integration, the template's only mode)
//! goes to the Runtime API as one `POST …/response` with a chunked body: `lambda_runtime` writes
//! the request head, then each chunk as it comes. Its connection is hyper-util's `HttpConnector`
//! with `TCP_NODELAY` off (it even clears it after connecting), so Nagle's algorithm holds the
//! first chunk until the head is acknowledged, and the Runtime API's side delays that ACK by
//! Linux's delayed-ACK timer (40 ms): every streamed answer waited ~40 ms before its body left the
//! function. Measured on the emulated stack (`tests/aws_functions.rs` `cold_start_figures`, release
//! binaries): a warm `server/discover` took 44 ms streamed against 1.5 ms buffered (29×); with this
//! module, 1.5 ms streamed too (0.99× buffered), the same run's reference. `lambda_runtime` (1.5)
//! builds that connector itself and takes none from its caller, so the option is set here, from
//! outside, on the socket it opened: each HTTP invocation, before it answers (the connection that
//! carried its event is idle in the runtime's pool by then, and is the one its answer goes out on),
//! looks through the process's descriptors for TCP sockets connected to `AWS_LAMBDA_RUNTIME_API`
//! and sets the option on any that lack it. A connection keeps the option for its life, so the
//! first invocation sets it and later ones only check that connection (two system calls) and list
//! the descriptors again (~15 µs for a function's dozen or so) only once it is gone. Once
//! `lambda_runtime` sets the option itself (or takes a connector), this module goes.
//!
//! Linux only (Lambda, and `cargo lambda watch` on Linux); elsewhere it does nothing.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Sets `TCP_NODELAY` on this process's connections to the Runtime API that lack it; see the
/// module's doc. Returns how many it changed (1 at the first invocation, then 0 while that
/// connection lasts).
pub fn send_answers_without_delay() -> usize {
    static RUNTIME_API: OnceLock<RuntimeApi> = OnceLock::new();
    static LOGGED: AtomicBool = AtomicBool::new(false);
    let changed = RUNTIME_API.get_or_init(RuntimeApi::from_env).ensure();
    // The first time at `info`, later ones at `debug`: the runtime's pool opens a new
    // connection whenever an answer's request asks for one before the event's connection is
    // back in the pool (4 to 10 in 41 invocations on the emulated stack), and a line for each
    // would be paid for in the logs. One such fresh connection does not wait for a delayed ACK
    // (a new connection's first segments are acknowledged at once): only a reused one did.
    if changed > 0 && !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::info!(connections = changed, "runtime_api.nodelay_set");
    } else if changed > 0 {
        tracing::debug!(connections = changed, "runtime_api.nodelay_set");
    }
    changed
}

/// This process's connections to the Runtime API, as far as they were seen.
struct RuntimeApi {
    /// Where `AWS_LAMBDA_RUNTIME_API` points (empty: unknown, nothing is done).
    peers: Vec<SocketAddr>,
    /// Whether the runtime holds one connection at a time: it does unless it runs concurrent
    /// invocations (`AWS_LAMBDA_MAX_CONCURRENCY` > 1, each with its own connection).
    one_at_a_time: bool,
    /// The descriptors of the connections found at the last look.
    known: Mutex<Vec<i32>>,
}

impl RuntimeApi {
    fn from_env() -> Self {
        let var = |k| std::env::var(k).ok();
        Self::new(
            var("AWS_LAMBDA_RUNTIME_API")
                .and_then(|a| a.to_socket_addrs().ok())
                .map(Iterator::collect)
                .unwrap_or_default(),
            var("AWS_LAMBDA_MAX_CONCURRENCY")
                .and_then(|c| c.parse::<u32>().ok())
                .is_none_or(|c| c <= 1),
        )
    }

    fn new(peers: Vec<SocketAddr>, one_at_a_time: bool) -> Self {
        Self {
            peers,
            one_at_a_time,
            known: Mutex::new(Vec::new()),
        }
    }

    /// Sets the option where it lacks; returns how many connections it changed. With one
    /// connection at a time, a known connection still open, still to the Runtime API and
    /// with the option set is the one the answer goes out on, and nothing else is looked at
    /// (a `getsockopt` or two instead of a listing of every descriptor, ~15 µs); otherwise
    /// (first call, that connection closed or its descriptor reused) every descriptor is.
    fn ensure(&self) -> usize {
        if self.peers.is_empty() {
            return 0;
        }
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if self.one_at_a_time
            && !known.is_empty()
            && known
                .iter()
                .all(|&fd| sockets::state(fd, &self.peers) == Some(true))
        {
            return 0;
        }
        let mut changed = 0;
        known.clear();
        for fd in sockets::all() {
            match sockets::state(fd, &self.peers) {
                Some(true) => known.push(fd),
                Some(false) if sockets::set_nodelay(fd) => {
                    known.push(fd);
                    changed += 1;
                }
                _ => {}
            }
        }
        changed
    }
}

#[cfg(target_os = "linux")]
mod sockets {
    use std::mem::ManuallyDrop;
    use std::net::{SocketAddr, TcpStream};
    use std::os::fd::{FromRawFd as _, RawFd};

    /// This process's open descriptors.
    pub(super) fn all() -> Vec<RawFd> {
        let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
            return Vec::new();
        };
        fds.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// Whether `fd` has `TCP_NODELAY` on, if it is a TCP connection to one of `peers`.
    pub(super) fn state(fd: RawFd, peers: &[SocketAddr]) -> Option<bool> {
        let socket = borrow(fd);
        if !socket.peer_addr().is_ok_and(|p| peers.contains(&p)) {
            return None;
        }
        socket.nodelay().ok()
    }

    /// Sets `TCP_NODELAY` on `fd`; whether it could.
    pub(super) fn set_nodelay(fd: RawFd) -> bool {
        borrow(fd).set_nodelay(true).is_ok()
    }

    fn borrow(fd: RawFd) -> ManuallyDrop<TcpStream> {
        // SAFETY: the stream is never dropped (`ManuallyDrop`), so this never closes the
        // descriptor, which stays owned by whoever opened it; only `getpeername`,
        // `getsockopt` and `setsockopt` are called on it, none of which touches memory but
        // their own arguments. What is not a TCP connection to the Runtime API is left alone:
        // a descriptor closed meanwhile (`EBADF`), one that is no socket (`ENOTSOCK`), a Unix
        // socket (no IP peer), any other peer, a socket without the TCP option. A descriptor
        // reused meanwhile is changed only if it is itself such a connection, which is the
        // point.
        ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) })
    }
}

/// Elsewhere than Linux: nothing is found, nothing changed.
#[cfg(not(target_os = "linux"))]
mod sockets {
    use std::net::SocketAddr;

    pub(super) fn all() -> Vec<i32> {
        Vec::new()
    }

    pub(super) fn state(_fd: i32, _peers: &[SocketAddr]) -> Option<bool> {
        None
    }

    pub(super) fn set_nodelay(_fd: i32) -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn api() -> (TcpListener, Vec<SocketAddr>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let peers = vec![listener.local_addr().unwrap()];
        (listener, peers)
    }

    /// Real sockets: the connection to the Runtime API gets the option, once; a connection to
    /// another peer, and the Runtime API's own end, are left as they are.
    #[test]
    fn only_connections_to_the_runtime_api_get_nodelay() {
        let (listener, peers) = api();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_api = TcpStream::connect(peers[0]).unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(!to_api.nodelay().unwrap() && !to_other.nodelay().unwrap());

        // Other tests of this process hold connections of their own, never to this listener:
        // exactly one socket here is connected to it.
        let runtime = RuntimeApi::new(peers, true);
        assert_eq!(runtime.ensure(), 1);
        assert!(to_api.nodelay().unwrap(), "the Runtime API connection");
        assert!(!to_other.nodelay().unwrap(), "another peer's connection");
        // The accepted end's peer is the client's ephemeral port, not the listener.
        assert!(!accepted.nodelay().unwrap());
        // Already set: nothing more to change, and the option stays.
        assert_eq!(runtime.ensure(), 0);
        assert!(to_api.nodelay().unwrap());
        // No Runtime API known: nothing is looked at.
        assert_eq!(RuntimeApi::new(Vec::new(), true).ensure(), 0);
    }

    /// The connection a runtime opens after its first one closed is found at the next call,
    /// whatever descriptor it got (the old one's, reused, or another).
    #[test]
    fn a_connection_opened_after_the_known_one_closed_is_found() {
        let (_listener, peers) = api();
        let runtime = RuntimeApi::new(peers.clone(), true);
        let first = TcpStream::connect(peers[0]).unwrap();
        assert_eq!(runtime.ensure(), 1);
        drop(first);
        let second = TcpStream::connect(peers[0]).unwrap();
        assert!(!second.nodelay().unwrap());
        assert_eq!(runtime.ensure(), 1);
        assert!(second.nodelay().unwrap());
    }

    /// With one connection at a time, a known connection that is still fine is the one the
    /// answer goes out on, and nothing else is looked at; with concurrent invocations each
    /// has its own connection, and every call looks at all of them.
    #[test]
    fn concurrent_runtimes_look_at_every_connection_each_time() {
        let (_listener, peers) = api();
        let first = TcpStream::connect(peers[0]).unwrap();
        let one = RuntimeApi::new(peers.clone(), true);
        let many = RuntimeApi::new(peers.clone(), false);
        assert_eq!(one.ensure(), 1);
        assert_eq!(many.ensure(), 0, "already set by the other");
        let second = TcpStream::connect(peers[0]).unwrap();
        assert_eq!(one.ensure(), 0, "the known connection is fine: no listing");
        assert!(!second.nodelay().unwrap());
        assert_eq!(many.ensure(), 1);
        assert!(second.nodelay().unwrap() && first.nodelay().unwrap());
    }
}
