//! The local server's HTTP listener: an accept loop over hyper's HTTP/1 connection driver with
//! the bounds `axum::serve` does not offer, so that clients that connect and then dawdle
//! cannot pin memory or connection slots for long.
//!
//! - **Header read timeout** ([`EdgeSettings::header_read_timeout`], 10 s): a connection must
//!   deliver a request's whole head within it, or hyper closes it. The clock starts when the
//!   connection is accepted, and again whenever a keep-alive connection waits for its next
//!   request, so it is also the idle timeout: an idle connection is closed after 10 s. Idle
//!   counts from the last byte written or read: hyper waits for the next request only once
//!   the last answer is all written to the socket, and the socket takes no more than 64 KiB
//!   ahead of the client (below), so a client still reading a long answer is not cut off (it
//!   was, when the kernel took a whole answer at once and the 10 s ran while the client read).
//! - **Write timeout** ([`EdgeSettings::write_timeout`], 10 s): an answer being written must
//!   make progress: a write the client takes no byte of for that long ends the connection,
//!   which is reset (nothing more can reach a client that does not read). This is what frees
//!   the slot of a client that pipelines requests and never reads the answers.
//! - **Answers queued for one connection**: hyper answers one request at a time and reads the
//!   next only once the answer before is written; the kernel is let hold at most 64 KiB of
//!   answers not yet sent for a connection (`TCP_NOTSENT_LOWAT`, Linux) before a write waits.
//!   So a client that stops reading leaves at most that, plus the answer being written, queued
//!   for it, its further pipelined requests are not read, and the write timeout ends it.
//! - **Body read timeout** ([`EdgeSettings::body_read_timeout`], 10 s): the whole body, from
//!   the end of the head (see [`crate::http::router_for_edge`]); on expiry the client
//!   gets `408` with a JSON-RPC error and the connection is closed. The body is only read for
//!   a request that passed the header checks (with auth on: a valid token), so a client
//!   without one is refused before that and never makes the server buffer a byte of its body.
//! - **Connection cap** ([`EdgeSettings::max_connections`], 1024): at most that many
//!   connections are served at once. Over it the server stops accepting: new connections wait
//!   in the kernel's listen backlog (and are served, in order, as soon as a slot frees; those
//!   that give up first never cost the process anything) rather than being accepted and
//!   closed, which would turn a burst into errors and client retries. A slot frees when its
//!   connection closes, which the timeouts bound for clients that send nothing useful or read
//!   nothing.
//!
//! - **Requests in flight per tenant** ([`EdgeSettings::max_requests_per_tenant`], 64): once a
//!   request is admitted (its tenant known, its body not read), it counts against its tenant
//!   until its answer has been produced (an event stream's answer is counted until it starts).
//!   Over the limit the request is answered `429` with `Retry-After: 1` and its body is not
//!   read. So one tenant — a client with a valid token that sends bodies slowly, or fires
//!   hundreds of calls at once — holds at most 64 bodies (256 MiB at the 4 MiB limit) and 64
//!   handlers, whatever it does, and the other tenants' requests are served beside it.
//!
//! Why these numbers: a request to this server is a small JSON document (4 MiB at most) that
//! a client on any working network sends in well under a second, so 10 s for the head and 10
//! s for the body are ample for honest clients and short for a client that holds a slot on
//! purpose. 1024 connections is far above what the MCP clients of one deployment open (a few
//! each) and keeps the worst case bounded: each connection costs a task, hyper's read buffer
//! (about 400 KiB at most, for the head) and, only once admitted (with auth on: a valid
//! token), at most one body of `max_body_bytes`. Each connection is also a file descriptor:
//! where the soft limit is the traditional 1024 (`ulimit -n`), raise it or lower the cap; if
//! accepting runs out of descriptors the loop logs it and pauses for a second.
//!
//! The operator's metrics get a listener of their own ([`serve_metrics`]): the same loop, with
//! its own small connection cap, serving nothing but `GET /metrics`.
//!
//! None of this applies on Lambda: API Gateway terminates the connections and hands the
//! function whole requests, within its own timeouts and limits.
//!
//! A connection is closed with a short linger (at most 2 s, reading and dropping whatever the
//! client still sends after our side is shut down), so that a client whose body was refused
//! unread still reads the answer instead of a connection reset.
//!
//! Shutdown is graceful: the loop stops accepting, every connection is asked to finish its
//! in-flight request and close, and [`serve`] returns once all are gone.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::handler::McpService;

mod socket;

/// Bounds of the local HTTP listener (see the module docs for the reasoning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    /// Longest time to receive a request's head (request line and headers); also how long an
    /// idle keep-alive connection is kept (counted from its last byte written or read).
    pub header_read_timeout: Duration,
    /// Longest an answer may wait for the client to take any of its bytes; then the
    /// connection is reset.
    pub write_timeout: Duration,
    /// Longest time to receive a request's whole body once its head has been accepted.
    pub body_read_timeout: Duration,
    /// Most connections served at once; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// Most admitted requests of one tenant in flight at once; over it, `429`.
    pub max_requests_per_tenant: usize,
}

impl Default for EdgeSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_requests_per_tenant: 64,
        }
    }
}

/// Longest a closing connection keeps reading (and dropping) what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read and dropped while lingering: a bit more than a whole refused body.
const LINGER_MAX_BYTES: usize = 8 * 1024 * 1024;

/// How long to pause accepting after an error that is not about one connection (out of file
/// descriptors, say), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Most connections the metrics listener serves at once: a scraper or two and an operator.
const METRICS_MAX_CONNECTIONS: usize = 16;

/// Serves `service` on `listener` within `settings` until `shutdown` completes, then shuts
/// down gracefully (stop accepting, let in-flight requests finish, wait for every connection
/// to close).
pub async fn serve(
    listener: TcpListener,
    service: Arc<McpService>,
    settings: EdgeSettings,
    shutdown: impl Future<Output = ()> + Send,
) {
    let app = crate::http::edge_handler(
        service,
        Some(settings.body_read_timeout),
        Some(settings.max_requests_per_tenant),
    );
    accept_loop(listener, Handler::Mcp(app), settings, shutdown).await;
}

/// Serves the operator's metrics ([`crate::handler::metrics_reply`]) on `listener`, with the
/// same timeouts as `settings` and a connection cap of its own, until `shutdown` completes.
/// `allowed_hosts` are the names accepted in `Host` and `Origin` (empty: any).
pub async fn serve_metrics(
    listener: TcpListener,
    allowed_hosts: Vec<String>,
    settings: EdgeSettings,
    shutdown: impl Future<Output = ()> + Send,
) {
    let settings = EdgeSettings {
        max_connections: METRICS_MAX_CONNECTIONS,
        ..settings
    };
    let hosts = Handler::Metrics(allowed_hosts.into());
    accept_loop(listener, hosts, settings, shutdown).await;
}

async fn accept_loop(
    listener: TcpListener,
    app: Handler,
    settings: EdgeSettings,
    shutdown: impl Future<Output = ()> + Send,
) {
    let max = settings
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let slots = Arc::new(Semaphore::new(max));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A slot first: over the cap, nothing is accepted and new connections wait in the
        // kernel's backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    if !is_connection_error(&e) {
                        tracing::error!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        socket::cap_unsent(&stream);
        let timed_out = socket::WriteTimedOut::default();
        let io = socket::Watched::new(stream, settings.write_timeout, timed_out.clone());
        let conn = builder.serve_connection(TokioIo::new(io), app.clone());
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = permit;
            run_connection(conn, stop, &timed_out).await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it ends: all slots back means all connections gone.
    let _ = slots.acquire_many(max as u32).await;
}

/// What a listener serves, as a hyper service (no router: every path goes to the handler,
/// which decides, as [`crate::http::router_for_edge`] does on Lambda). Its futures are boxed,
/// so `Unpin`, which [`http1::Connection::poll_without_shutdown`] needs to hand the socket
/// back.
#[derive(Clone)]
enum Handler {
    /// The MCP endpoint.
    Mcp(crate::http::EdgeHandler),
    /// The operator's metrics, with the host names accepted.
    Metrics(Arc<[String]>),
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Handler {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        match self {
            Handler::Mcp(edge) => {
                let edge = edge.clone();
                Box::pin(async move { Ok(edge.call(req.map(axum::body::Body::new)).await) })
            }
            Handler::Metrics(hosts) => {
                let reply = crate::handler::metrics_reply(
                    req.method(),
                    req.uri().path(),
                    req.headers(),
                    hosts,
                );
                Box::pin(std::future::ready(Ok(crate::http::into_response(reply))))
            }
        }
    }
}

/// Drives one connection to its end (asked to finish early when `stop` turns true), then
/// closes it: with a linger, or at once with a reset when the client stopped taking its
/// answers.
async fn run_connection<S>(
    mut conn: http1::Connection<TokioIo<socket::Watched>, S>,
    mut stop: watch::Receiver<bool>,
    timed_out: &socket::WriteTimedOut,
) where
    S: hyper::service::HttpService<hyper::body::Incoming> + Unpin,
    S::Future: Unpin,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let ended = tokio::select! {
        r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => r,
        () = async { let _ = stop.wait_for(|s| *s).await; } => {
            Pin::new(&mut conn).graceful_shutdown();
            std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await
        }
    };
    if let Err(e) = ended {
        // Timeouts, resets and malformed requests: routine at an exposed edge.
        tracing::debug!(error = ?e, "connection ended with an error");
    }
    let tcp = conn.into_parts().io.into_inner().into_inner();
    if timed_out.load(std::sync::atomic::Ordering::Relaxed) {
        // Lingering would only wait on a client that does not read; the reset also drops at
        // once what the kernel still held for it.
        let _ = tcp.set_zero_linger();
        return;
    }
    linger(tcp).await;
}

/// Closes a connection the way that lets the client read the last answer: our side is
/// shut down first (the client sees the answer, then end-of-stream), and whatever the client
/// still sends — the rest of a body we refused without reading — is read and dropped for a
/// short while. Closing at once with unread bytes would make the kernel reset the connection,
/// and a reset can destroy the answer before the client reads it. Costs a fixed buffer and at
/// most [`LINGER`] of the connection's slot.
async fn linger(mut tcp: TcpStream) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if tcp.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut buf = vec![0u8; 16 * 1024];
    let mut dropped = 0usize;
    while dropped < LINGER_MAX_BYTES {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => dropped += n,
            _ => return,
        }
    }
}

/// Errors that concern only the connection being accepted (the next accept may well work).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionRefused | K::ConnectionAborted | K::ConnectionReset | K::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn tools_list() -> (String, String) {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}})
        .to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             accept: application/json\r\nmcp-protocol-version: 2026-07-28\r\n\
             mcp-method: tools/list\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        (head, body)
    }

    #[tokio::test]
    async fn shutdown_lets_the_request_in_flight_finish_then_returns() {
        let dir = tempfile::tempdir().unwrap();
        let opts =
            crate::local::LocalOptions::new("127.0.0.1:0".parse().unwrap(), dir.path().into());
        let server = crate::local::start(opts).await.unwrap();
        let addr = server.addr;
        let _idle = TcpStream::connect(addr).await.unwrap();
        let (head, body) = tools_list();
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(head.as_bytes()).await.unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let started = std::time::Instant::now();
        let run = tokio::spawn(server.run_until(async {
            let _ = stop_rx.await;
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_tx.send(()).unwrap();
        // The shutdown is under way; the request in flight still gets its answer.
        tokio::time::sleep(Duration::from_millis(200)).await;
        busy.write_all(body.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), busy.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"tools\""), "{answer}");
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("the server stops despite an idle connection")
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        // And nobody is listening any more.
        assert!(TcpStream::connect(addr).await.is_err());
    }
}
