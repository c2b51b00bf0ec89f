//! `TCP_NODELAY` on the function's own connection to the Lambda Runtime API.
//!
//! # Why
//!
//! A streamed answer (the mcp function behind the streaming integration, the template's only mode)
//! goes to the Runtime API as one `POST …/response` with a chunked body: `lambda_runtime` writes
//! the request head, then each chunk as it comes. Its connection is hyper-util's `HttpConnector`
//! with `TCP_NODELAY` off (it even clears it after connecting), so Nagle's algorithm held the first
//! chunk until the head was acknowledged, and the Runtime API's side delays that ACK on a
//! connection in steady use by Linux's delayed-ACK timer (40 ms): every streamed answer waited
//! ~40 ms before its body left the function. `lambda_runtime` (1.5) builds that connector itself
//! and takes none from its caller, so the option is set here, from outside, on the sockets it
//! opened: each streamed invocation, before it answers, looks through the process's descriptors
//! (`/proc/self/fd`, ~15 µs for a function's dozen or so) for TCP connections to
//! `AWS_LAMBDA_RUNTIME_API` and sets the option on any that lack it. The connection that carried
//! the event is among them, and is usually the one the answer goes out on; when the runtime's pool
//! opens another for the answer (it does when the answer's request asks before the event's
//! connection is back in the pool: up to one invocation in four here), that one is new, and a new
//! connection's first segments are acknowledged at once, so it does not wait either; the next
//! invocation finds it. Measured on the emulated stack (`tests/aws_functions/figures.rs`
//! `cold_start_figures`, release binaries, warm `server/discover`): 44 ms median streamed against
//! 1.5 ms buffered (29×) without this; with it 1.3–1.5 ms (0.98–1.18× buffered, the same run's
//! reference) and no answer over 30 ms in 2,400 over six runs. Checking only the last connection
//! found instead of listing every time left 2 of 1,200 at ~45 ms (most likely the pool keeping the
//! other of two connections between two invocations). Once `lambda_runtime` sets the option itself
//! (or takes a connector), this module goes.
//!
//! Linux only (Lambda, and `cargo lambda watch` on Linux); elsewhere it does nothing.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sets `TCP_NODELAY` on this process's connections to the Runtime API that lack it; see the
/// module's doc.
pub(super) fn send_answers_without_delay() {
    static RUNTIME_API: OnceLock<Vec<SocketAddr>> = OnceLock::new();
    static LOGGED: AtomicBool = AtomicBool::new(false);
    let peers = RUNTIME_API.get_or_init(|| {
        std::env::var("AWS_LAMBDA_RUNTIME_API")
            .ok()
            .and_then(|a| a.to_socket_addrs().ok())
            .map(Iterator::collect)
            .unwrap_or_default()
    });
    let changed = nodelay_to(peers);
    // The first time at `info`, later ones at `debug`: the runtime's pool opens connections
    // of its own accord (4 to 10 in 41 invocations on the emulated stack), and a line for each
    // would be paid for in the logs.
    if changed > 0 && !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::info!(connections = changed, "runtime_api.nodelay_set");
    } else if changed > 0 {
        tracing::debug!(connections = changed, "runtime_api.nodelay_set");
    }
}

/// Sets `TCP_NODELAY` on every TCP connection of this process to one of `peers` that lacks it;
/// returns how many it changed.
fn nodelay_to(peers: &[SocketAddr]) -> usize {
    if peers.is_empty() {
        return 0;
    }
    sockets::all()
        .into_iter()
        .filter(|&fd| sockets::state(fd, peers) == Some(false) && sockets::set_nodelay(fd))
        .count()
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
        assert_eq!(nodelay_to(&peers), 1);
        assert!(to_api.nodelay().unwrap(), "the Runtime API connection");
        assert!(!to_other.nodelay().unwrap(), "another peer's connection");
        // The accepted end's peer is the client's ephemeral port, not the listener.
        assert!(!accepted.nodelay().unwrap());
        // Already set: nothing more to change, and the option stays.
        assert_eq!(nodelay_to(&peers), 0);
        assert!(to_api.nodelay().unwrap());
        // No Runtime API known: nothing is looked at.
        assert_eq!(nodelay_to(&[]), 0);
    }

    /// Every connection the runtime opens later is found at the next call, the first one
    /// still open or not, whatever descriptor it got.
    #[test]
    fn connections_opened_later_are_found_at_the_next_call() {
        let (_listener, peers) = api();
        let first = TcpStream::connect(peers[0]).unwrap();
        assert_eq!(nodelay_to(&peers), 1);
        let second = TcpStream::connect(peers[0]).unwrap();
        assert_eq!(nodelay_to(&peers), 1, "beside the first");
        assert!(first.nodelay().unwrap() && second.nodelay().unwrap());
        drop(first);
        let third = TcpStream::connect(peers[0]).unwrap();
        assert!(!third.nodelay().unwrap());
        assert_eq!(nodelay_to(&peers), 1, "after the first closed");
        assert!(third.nodelay().unwrap());
    }
}
