//! One connection's socket under watch: a write the client does not take in time fails, and
//! the answers waiting for the client are capped (see [`super`] for the bounds and why).

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// Most bytes of answers the kernel holds for one connection without having sent them
/// (`TCP_NOTSENT_LOWAT`): past it a write waits, so a client that stops reading leaves at
/// most this much (and the one answer the connection is writing) queued for it, and its
/// further pipelined requests are not read. Bytes already sent and not yet acknowledged are
/// bounded by the client's own receive window.
pub(super) const MAX_UNSENT: u32 = 64 * 1024;

/// Set once a write of the connection waited longer than the write timeout: the client
/// stopped taking its answers. Shared by the socket and the connection's driver.
pub(super) type WriteTimedOut = Arc<AtomicBool>;

/// Caps the bytes the kernel keeps unsent for this connection at [`MAX_UNSENT`] (Linux and
/// Android; elsewhere the socket's send buffer is the bound).
pub(super) fn cap_unsent(tcp: &TcpStream) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_notsent_lowat(MAX_UNSENT) {
        tracing::debug!(error = %e, "TCP_NOTSENT_LOWAT not set");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = tcp;
}

/// A connection's socket: reads pass through; a write that stays blocked (the client takes
/// no bytes) for `write_timeout` fails with `TimedOut`, which ends the connection.
pub(super) struct Watched {
    tcp: TcpStream,
    write_timeout: Duration,
    /// Armed at the first blocked write after progress; reused for the connection's life.
    stall: Option<Pin<Box<Sleep>>>,
    stalled: bool,
    timed_out: WriteTimedOut,
}

impl Watched {
    pub(super) fn new(tcp: TcpStream, write_timeout: Duration, timed_out: WriteTimedOut) -> Self {
        Self {
            tcp,
            write_timeout,
            stall: None,
            stalled: false,
            timed_out,
        }
    }

    pub(super) fn into_inner(self) -> TcpStream {
        self.tcp
    }

    /// Watches the outcome of a write: progress disarms the stall timer, a blocked write arms
    /// it (once) and fails when it expires.
    fn watch(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.stalled = false;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let at = Instant::now() + self.write_timeout;
                let stall = match (&mut self.stall, self.stalled) {
                    (Some(s), true) => s,
                    (Some(s), false) => {
                        s.as_mut().reset(at);
                        s
                    }
                    (None, _) => self.stall.insert(Box::pin(tokio::time::sleep_until(at))),
                };
                self.stalled = true;
                ready!(stall.as_mut().poll(cx));
                self.timed_out.store(true, Ordering::Relaxed);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client took none of the answer in time",
                )))
            }
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
