//! The run's clock: when a hand-over must end, and a call or a sleep bounded by it. Both the
//! run (its checks and saves) and its ending (the hand-over's save) use these, so they live
//! apart from both and the run and its ending import in one direction only.

use super::*;

/// What a hand-over leaves of the invocation for its answer (the batch response).
pub(super) const ANSWER_SLACK: Duration = Duration::from_millis(250);

/// When a hand-over must have ended to leave the invocation [`ANSWER_SLACK`] for its answer;
/// `None` (no bound) when that leaves less than [`MIN_HANDOVER`]: a bound tighter than a
/// healthy store and queue call would fail healthy hand-overs, and only a short invocation
/// (the normal margin is 5 s) gets there, where Lambda's own deadline is the bound.
pub(super) fn answer_by(deadline: Option<Instant>) -> Option<Instant> {
    let now = Instant::now();
    deadline
        .map(|d| d - ANSWER_SLACK.min(d.saturating_duration_since(now)))
        .filter(|by| by.saturating_duration_since(now) >= MIN_HANDOVER)
}

/// See [`answer_by`].
pub(super) const MIN_HANDOVER: Duration = Duration::from_secs(1);

/// A lease check's or a save's verdict, or [`Interrupt::Deadline`] when `by` passes first: a
/// hung store call then ends in a hand-over instead of holding the run.
pub(super) async fn in_time(
    by: Option<Instant>,
    f: impl std::future::Future<Output = Result<Option<Interrupt>, WorkerError>>,
) -> Result<Option<Interrupt>, WorkerError> {
    before(by, f).await.unwrap_or(Ok(Some(Interrupt::Deadline)))
}

/// `f`, unless `by` passes first (`None`: then the call is abandoned). Without `by`, `f`.
pub(super) async fn before<T>(
    by: Option<Instant>,
    f: impl std::future::Future<Output = T>,
) -> Option<T> {
    match by {
        Some(at) => tokio::time::timeout_at(at, f).await.ok(),
        None => Some(f.await),
    }
}
