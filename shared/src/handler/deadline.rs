//! How long an answer may take, for both lanes: the plan of a synchronous call, the stream
//! budget, the deadline of the invocation serving the request (Lambda), and the expiry of the
//! caller's bearer token, which no answer streamed to that caller outlives.

use std::time::Duration;

use http::HeaderMap;
use tokio::time::Instant;

use super::McpService;
use crate::protocol::McpError;

/// How an answer may reach its caller: whether it takes SSE, and until when.
#[derive(Debug, Clone, Copy)]
pub(super) struct Delivery {
    /// The client accepts an SSE answer.
    pub(super) sse: bool,
    /// When the caller's bearer token expires (`None`: auth is off). A synchronous call's
    /// run and a subscription end then with [`token_expired`], whatever their budget: the
    /// token is what let the caller in, and a stream is not asked again.
    pub(super) token_expiry: Option<Instant>,
}

impl Delivery {
    /// The delivery of a request with these headers, from a caller whose token expires at
    /// `expires_at` (seconds since the Unix epoch).
    pub(super) fn of(headers: &HeaderMap, expires_at: Option<u64>) -> Self {
        let token_expiry = expires_at.map(|exp| {
            let left = exp
                .saturating_mul(1000)
                .saturating_sub(crate::clock::now_ms());
            // Capped far beyond any stream budget, so the addition cannot overflow.
            Instant::now() + Duration::from_millis(left.min(u64::from(u32::MAX)))
        });
        Self {
            sse: accepts_sse(headers),
            token_expiry,
        }
    }
}

/// The answer to a caller whose token expired while its answer was being made: `401` (with
/// the `invalid_token` challenge, added where replies leave the service) when nothing has been
/// sent yet, so that a client gets a fresh token and asks again; the last event of a stream
/// otherwise.
pub(super) fn token_expired() -> McpError {
    McpError::invalid_request(
        "The bearer token expired before the answer was complete; send the request again with a fresh token",
    )
    .with_status(401)
}

/// Completes at `expiry`; never without one.
pub(super) async fn until(expiry: Option<Instant>) {
    match expiry {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How one synchronous call is answered ([`McpService::inline_plan`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct InlinePlan {
    /// Answered as SSE once committed (else one JSON body).
    pub(super) stream: bool,
    /// How long the tool may run.
    pub(super) budget: Duration,
    /// Commit to SSE after this long even without a progress report (a long answer on a
    /// streaming host), so that keep-alives can flow.
    pub(super) commit_after: Option<Duration>,
    /// When the caller's token expires: the run ends then ([`token_expired`]).
    pub(super) token_expiry: Option<Instant>,
}

/// See [`InlinePlan::commit_after`]: well inside any client's or gateway's wait for the first
/// byte, long enough that nearly every synchronous answer is still one JSON body.
pub(super) const COMMIT_AFTER: Duration = Duration::from_secs(10);

/// What a synchronous call keeps of its invocation's time for the answer.
pub(super) const ANSWER_MARGIN: Duration = Duration::from_secs(2);

impl McpService {
    /// How a synchronous call is answered (both lanes). On a host that streams answers, a
    /// client that takes SSE may wait up to [`super::ServiceConfig::stream_budget`]: the
    /// answer turns into an SSE stream at the first progress report or after
    /// [`COMMIT_AFTER`], whichever comes first, and the transport keeps it alive
    /// ([`crate::http`]). Otherwise the call has the buffered budget, streamed only to carry
    /// the progress a client asked for. Either budget ends [`ANSWER_MARGIN`] before the
    /// invocation's own deadline, if it has one, and the run ends when the caller's token
    /// expires, if sooner.
    pub(super) fn inline_plan(&self, delivery: Delivery, progress_token: bool) -> InlinePlan {
        let long = self.stream_budget().filter(|_| delivery.sse);
        let budget = long.unwrap_or_else(|| within_invocation(self.config.sync_budget));
        InlinePlan {
            stream: long.is_some() || (progress_token && delivery.sse),
            budget,
            commit_after: long.map(|_| COMMIT_AFTER),
            token_expiry: delivery.token_expiry,
        }
    }

    /// How long a stream started now may last: the configured budget, ended in time to answer
    /// within the invocation's own deadline; `None` on a host that buffers answers.
    pub(super) fn stream_budget(&self) -> Option<Duration> {
        self.config.stream_budget.map(within_invocation)
    }
}

/// `budget`, ended [`ANSWER_MARGIN`] before the deadline of the invocation serving the
/// request, when it has one.
pub(super) fn within_invocation(budget: Duration) -> Duration {
    match crate::clock::invocation_deadline() {
        Some(d) => budget.min(
            d.saturating_duration_since(Instant::now())
                .saturating_sub(ANSWER_MARGIN),
        ),
        None => budget,
    }
}

/// Whether the client accepts an SSE response.
pub(super) fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}
