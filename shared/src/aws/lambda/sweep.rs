//! The `sweep` function: the orphan sweep and the purge, within the invocation.

use super::*;

/// What one sweep did: the function's response, and the fields of its `sweep done` log line
/// (a metric filter on `skipped` or `purge_failed` above zero is the alarm for items the sweep
/// cannot read or delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Working tasks re-enqueued (persisted but never enqueued, or whose run died).
    pub requeued: usize,
    /// Active tasks listed but not readable, skipped (see [`crate::engine::SweepStats`]).
    pub skipped: usize,
    /// Quiet tasks left alone while messages waited in the queue.
    pub queued: usize,
    /// Candidate records the sweep read.
    pub read: usize,
    /// Whether the sweep reached the end of its listing (else the next run resumes).
    pub complete: bool,
    /// Expired tasks deleted.
    pub purged: usize,
    /// Expired tasks whose delete failed (tried again next run).
    pub purge_failed: usize,
}

/// Why a sweep failed (the scheduler retries the invocation).
#[derive(Debug, thiserror::Error)]
#[error("sweep failed: {0}")]
pub struct SweepError(#[from] StoreError);

/// The sweep function: re-enqueue orphans, purge expired tasks.
pub struct Sweeper {
    engine: Engine,
    stale: Duration,
}

impl Sweeper {
    /// A sweeper over the ports.
    pub fn new(config: &Config, ports: &Ports) -> Self {
        Self {
            engine: server(config, ports, crate::app::no_tools()).engine(),
            stale: config.sweep_stale,
        }
    }

    /// One sweep. Both halves always run, neither depends on the other: an item either cannot
    /// read or delete is skipped and counted, and only a failed listing is an error — the
    /// first such error is returned after both halves ran.
    ///
    /// Within `deadline` (the invocation's; `None`: no limit): the orphan sweep stops once two
    /// thirds of the time left are used (between pages; the next run resumes there), leaving
    /// the rest to the purge.
    pub async fn run(&self, deadline: Option<Instant>) -> Result<SweepReport, SweepError> {
        let until = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            Instant::now() + left * 2 / 3
        });
        let swept = self.engine.sweep_until(self.stale, until).await;
        let purged = self.engine.purge().await;
        let s = swept.as_ref().copied().unwrap_or_default();
        let p = purged.as_ref().copied().unwrap_or_default();
        let report = SweepReport {
            requeued: s.requeued,
            skipped: s.skipped,
            queued: s.queued,
            read: s.read,
            complete: s.complete,
            purged: p.purged,
            purge_failed: p.failed,
        };
        tracing::info!(
            requeued = report.requeued,
            skipped = report.skipped,
            queued = report.queued,
            read = report.read,
            resumed = s.resumed,
            complete = report.complete,
            purged = report.purged,
            purge_failed = report.purge_failed,
            sweep_failed = swept.is_err(),
            purge_listing_failed = purged.is_err(),
            "sweep done"
        );
        swept?;
        purged?;
        Ok(report)
    }
}
