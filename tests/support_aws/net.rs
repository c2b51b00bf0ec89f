//! What the emulators share: loopback listeners (Nagle off), request ids, the clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use tokio::task::JoinHandle;

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// A fresh request id (unique within the process; Lambda uses UUIDs).
pub(super) fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = now_ms();
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (t >> 16) as u32,
        t as u16,
        std::process::id() & 0xfff,
        n & 0xfff,
        n
    )
}

/// `listener` with Nagle's algorithm off on every connection it accepts, as the servers these
/// stand in for send: Lambda's Runtime API is a Go server (Go turns it off on every TCP
/// connection), and an emulated front that held a streamed answer's first chunk until the
/// client's delayed ACK (40 ms on Linux) would add that wait to every streamed answer.
pub(super) fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            eprintln!("emulated AWS: TCP_NODELAY refused: {e}");
        }
    })
}

pub(super) async fn serve(app: Router) -> (String, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = axum::serve(no_delay(listener), app).await;
    });
    (url, server)
}
