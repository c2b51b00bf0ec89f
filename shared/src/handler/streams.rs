//! The per-tenant cap on open streams (long synchronous calls and subscriptions together),
//! which `tools/call` and `subscriptions/listen` share.

use std::sync::Arc;
use std::time::Duration;

use crate::protocol::McpError;
use crate::quota::{RunSlots, SlotKey};
use crate::tenant::Tenant;

/// How long past its budget a stream's place is kept if its holder vanished without giving it
/// back (a Lambda instance that died mid-stream).
const SLOT_GRACE: Duration = Duration::from_secs(60);

/// The per-tenant cap on open streams (long synchronous calls and subscriptions together):
/// each holds a connection and, on Lambda, a whole function instance for up to the stream
/// budget, so one tenant's streams must not use up what every tenant shares.
pub struct StreamSlots {
    slots: Arc<dyn RunSlots>,
    max: usize,
    /// Most streams of all tenants together (0: none), counted under
    /// [`SlotKey::all_streams`].
    total: usize,
}

impl StreamSlots {
    /// At most `max` open streams per tenant, recorded in `slots` (in memory for one process;
    /// the task table on Lambda, where every instance must see the same count).
    pub fn new(slots: Arc<dyn RunSlots>, max: usize) -> Self {
        Self {
            slots,
            max: max.max(1),
            total: 0,
        }
    }

    /// Also at most `total` open streams of all tenants together (0: no such cap).
    pub fn with_total(mut self, total: usize) -> Self {
        self.total = total;
        self
    }

    /// Takes a place for a stream of `tenant` that lasts at most `budget`; `Err` when the
    /// tenant already has its maximum open, or the record could not be written.
    pub(super) async fn take(
        &self,
        tenant: &Tenant,
        budget: Duration,
    ) -> Result<StreamSlot, McpError> {
        let mut owner = [0u8; 12];
        crate::clock::random_bytes(&mut owner);
        let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
        let until = crate::clock::now_ms() + (budget + SLOT_GRACE).as_millis() as u64;
        let key = SlotKey::streams_of(tenant);
        match self.slots.take(&key, &owner, self.max, until).await {
            Ok(true) => {
                let slot = StreamSlot {
                    slots: self.slots.clone(),
                    key,
                    owner,
                    total: self.total > 0,
                };
                if self.total == 0 {
                    return Ok(slot);
                }
                match self
                    .slots
                    .take(&SlotKey::all_streams(), &slot.owner, self.total, until)
                    .await
                {
                    Ok(true) => Ok(slot),
                    refused => {
                        // Only the tenant's place was taken: give that one back.
                        let slot = StreamSlot {
                            total: false,
                            ..slot
                        };
                        slot.release().await;
                        if let Err(e) = refused {
                            tracing::warn!(error = %e, "stream slot: the record could not be written");
                            return Err(McpError::internal());
                        }
                        Err(McpError::invalid_request(format!(
                            "Too many open streams on this server (at most {} long calls and \
                             subscriptions at once, all clients together); retry when one has \
                             ended",
                            self.total
                        ))
                        .with_status(429))
                    }
                }
            }
            Ok(false) => Err(McpError::invalid_request(format!(
                "Too many open streams of this client (at most {} long calls and \
                 subscriptions at once); retry when one has ended",
                self.max
            ))
            .with_status(429)),
            Err(e) => {
                tracing::warn!(error = %e, "stream slot: the record could not be written");
                Err(McpError::internal())
            }
        }
    }
}

/// One open stream's place ([`StreamSlots::take`]).
pub(super) struct StreamSlot {
    slots: Arc<dyn RunSlots>,
    key: SlotKey,
    owner: String,
    /// Whether it also holds a place under [`SlotKey::all_streams`].
    total: bool,
}

impl StreamSlot {
    /// Gives the place back (awaited, so that on Lambda it is written before the answer ends
    /// and the instance may be frozen; a place never given back lapses after its budget).
    pub(super) async fn release(self) {
        if let Err(e) = self.slots.release(&self.key, &self.owner).await {
            tracing::warn!(error = %e, "stream slot: release failed; it lapses on its own");
        }
        if self.total
            && let Err(e) = self
                .slots
                .release(&SlotKey::all_streams(), &self.owner)
                .await
        {
            tracing::warn!(error = %e, "stream slot: release failed; it lapses on its own");
        }
    }
}
