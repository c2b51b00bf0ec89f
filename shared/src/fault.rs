//! Fault injection for the durability tests (feature `fault-injection`, off by default; a
//! release build contains none of this).
//!
//! The local binary reads a spec from `MCP_TASKS_FAULTS` (only when built with the feature),
//! a comma-separated list of:
//! - `duplicate-delivery` — every work message is delivered twice (see
//!   [`crate::queue::DuplicatingQueue`]);
//! - `duplicate-delay-ms=N` — the second copy arrives N ms after the first (default 0), so it
//!   also arrives out of order with respect to later messages;
//! - `crash-after-checkpoints=N` — the process aborts (no shutdown code runs, like `kill -9`)
//!   right after its Nth successful mid-job checkpoint write: a deterministic kill point
//!   inside a job;
//! - `max-interruptions=N` — overrides the worker's give-up limits for jobs whose runs keep
//!   dying (`max_interruptions`, default 5 in a row, and `max_deaths`, default 10 in all), so
//!   a soak with very frequent kills tests resumption rather than the poison-job guard.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The environment variable the local binary reads the spec from.
pub const ENV: &str = "MCP_TASKS_FAULTS";

/// Which faults to inject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Deliver every work message twice.
    pub duplicate_delivery: bool,
    /// Delay of the second copy.
    pub duplicate_delay: Duration,
    /// Abort the process after this many checkpoint writes.
    pub crash_after_checkpoints: Option<u64>,
    /// Replaces `WorkerSettings::max_interruptions` and `WorkerSettings::max_deaths`.
    pub max_interruptions: Option<u32>,
}

impl Faults {
    /// Parses a spec such as `duplicate-delivery,crash-after-checkpoints=3`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut f = Faults::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            let num = || -> Result<u64, String> {
                value
                    .ok_or_else(|| format!("fault `{key}` needs a value"))?
                    .parse()
                    .map_err(|e| format!("fault `{key}`: {e}"))
            };
            match key {
                "duplicate-delivery" => f.duplicate_delivery = true,
                "duplicate-delay-ms" => f.duplicate_delay = Duration::from_millis(num()?),
                "crash-after-checkpoints" => f.crash_after_checkpoints = Some(num()?.max(1)),
                "max-interruptions" => {
                    f.max_interruptions = Some(u32::try_from(num()?).map_err(|e| e.to_string())?)
                }
                other => return Err(format!("unknown fault `{other}`")),
            }
        }
        Ok(f)
    }

    /// Whether anything is injected.
    pub fn any(&self) -> bool {
        *self != Faults::default()
    }
}

static CRASH_AFTER: OnceLock<u64> = OnceLock::new();
static CHECKPOINTS: AtomicU64 = AtomicU64::new(0);

/// Arms the process-wide crash point (the first call wins).
pub fn install(faults: &Faults) {
    if let Some(n) = faults.crash_after_checkpoints {
        let _ = CRASH_AFTER.set(n);
    }
}

/// Called by the worker after each successful mid-job checkpoint write.
pub fn checkpoint_written(task_id: &str) {
    let Some(&limit) = CRASH_AFTER.get() else {
        return;
    };
    let n = CHECKPOINTS.fetch_add(1, Ordering::SeqCst) + 1;
    if n >= limit {
        // Straight to stderr: the log writer may not flush before the abort.
        eprintln!("fault-injection: aborting after checkpoint {n} (task_id={task_id})");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(Faults::parse("").unwrap(), Faults::default());
        let f =
            Faults::parse("duplicate-delivery, duplicate-delay-ms=250,crash-after-checkpoints=3")
                .unwrap();
        assert!(f.duplicate_delivery && f.any());
        assert_eq!(f.duplicate_delay, Duration::from_millis(250));
        assert_eq!(f.crash_after_checkpoints, Some(3));
        assert_eq!(
            Faults::parse("max-interruptions=50")
                .unwrap()
                .max_interruptions,
            Some(50)
        );
        assert!(Faults::parse("explode").is_err());
        assert!(Faults::parse("crash-after-checkpoints").is_err());
        assert!(Faults::parse("crash-after-checkpoints=x").is_err());
    }
}
