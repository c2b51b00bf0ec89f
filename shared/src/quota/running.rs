//! The running places a synchronous call takes to run a tool inline: the same places a task's
//! job takes ([`Quotas::max_running_jobs`](super::Quotas::max_running_jobs)), so a tenant's
//! inline runs and jobs together never pass its limit.

use std::sync::Arc;
use std::time::Duration;

use super::{FairGate, GatePermit, RunSlots, SlotKey};
use crate::store::StoreError;
use crate::tenant::Tenant;

/// Where a host's running places are counted.
#[derive(Clone, Default)]
pub enum RunningPlaces {
    /// Nowhere: inline runs are not limited (a host that runs no jobs beside its calls).
    #[default]
    Unlimited,
    /// One process owns every place: the local worker pool's fair gate.
    Gate(Arc<FairGate>),
    /// Shared by every instance (Lambda): the tenant's record of live runs, at most `max`.
    Slots {
        /// The record (the worker's: jobs and inline runs count together).
        slots: Arc<dyn RunSlots>,
        /// [`Quotas::max_running_jobs`](super::Quotas::max_running_jobs).
        max: usize,
    },
}

/// How long a recorded place outlives the run that should have given it back (a process that
/// died mid-call): the record lapses then by itself.
const SLOT_GRACE: Duration = Duration::from_secs(60);

/// First and longest pause between two looks at a full record ([`RunningPlaces::Slots`]).
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

impl RunningPlaces {
    /// Waits up to `within` for one of `tenant`'s running places, to be held no longer than
    /// `within` from now; `Ok(None)` when none came free in time.
    pub async fn take(
        &self,
        tenant: &Tenant,
        within: Duration,
    ) -> Result<Option<RunningPlace>, StoreError> {
        match self {
            RunningPlaces::Unlimited => Ok(Some(RunningPlace(Held::Nothing))),
            RunningPlaces::Gate(gate) => {
                match tokio::time::timeout(within, gate.acquire(tenant)).await {
                    Ok(permit) => Ok(Some(RunningPlace(Held::Gate { _permit: permit }))),
                    Err(_) => Ok(None),
                }
            }
            RunningPlaces::Slots { slots, max } => {
                let until = tokio::time::Instant::now() + within;
                let mut owner = [0u8; 12];
                crate::clock::random_bytes(&mut owner);
                let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
                let lapse = crate::clock::now_ms() + (within + SLOT_GRACE).as_millis() as u64;
                let mut pause = FIRST_PAUSE;
                let key = SlotKey::runs_of(tenant);
                loop {
                    if slots.take(&key, &owner, *max, lapse).await? {
                        return Ok(Some(RunningPlace(Held::Slot(Slot {
                            slots: slots.clone(),
                            key,
                            owner,
                        }))));
                    }
                    let now = tokio::time::Instant::now();
                    if now >= until {
                        return Ok(None);
                    }
                    // Jittered, so that waiters of one tenant do not look again together.
                    let wait = jittered(pause).min(until - now);
                    tokio::time::sleep(wait).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            }
        }
    }
}

/// `pause`, less up to half of it, at random.
fn jittered(pause: Duration) -> Duration {
    let mut b = [0u8; 2];
    crate::clock::random_bytes(&mut b);
    pause.mul_f64(1.0 - f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX) / 2.0)
}

/// One running place, held until [`RunningPlace::release`] or drop (a call whose client went
/// away, whose budget ran out, or whose tool panicked gives it back on drop).
pub struct RunningPlace(Held);

enum Held {
    Nothing,
    /// Held for its drop, which frees it.
    Gate {
        _permit: GatePermit,
    },
    Slot(Slot),
}

struct Slot {
    slots: Arc<dyn RunSlots>,
    key: SlotKey,
    owner: String,
}

impl RunningPlace {
    /// Gives the place back, awaited (on Lambda, written before the answer ends and the
    /// instance may be frozen).
    pub async fn release(mut self) {
        if let Held::Slot(slot) = std::mem::replace(&mut self.0, Held::Nothing) {
            slot.release().await;
        }
    }
}

impl Slot {
    async fn release(self) {
        if let Err(e) = self.slots.release(&self.key, &self.owner).await {
            tracing::warn!(error = %e, "running place: release failed; it lapses on its own");
        }
    }
}

impl Drop for RunningPlace {
    fn drop(&mut self) {
        // A gate permit frees itself; a recorded place is given back in the background (it
        // lapses by itself should that never run).
        if let Held::Slot(slot) = std::mem::replace(&mut self.0, Held::Nothing)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(slot.release());
        }
    }
}
