//! `subscriptions/listen` with the tasks extension's `notifications.taskIds` filter, and the
//! per-tenant cap on open streams it shares with long synchronous calls.
//!
//! The answer is an SSE stream: `notifications/subscriptions/acknowledged` first (the task ids
//! agreed to: those of the caller's tenant that exist — any other id, another tenant's above
//! all, is simply not agreed, exactly as an unknown one), then each agreed task as it is now
//! and again on every change of its status or of its outstanding input requests, as
//! `notifications/tasks` (the `DetailedTask` `tasks/get` returns, without `resultType`). The
//! stream ends gracefully, with the listen result, once every agreed task has reached a
//! terminal status (or expired), or when the stream budget runs out; a client that closes it
//! ends it at once. When the caller's bearer token expires first, the stream ends then with a
//! JSON-RPC error (`-32600`, "The bearer token expired…") instead of the result: a client
//! subscribes again with a fresh token. The transport keeps a quiet stream alive
//! ([`crate::http::KEEP_ALIVE`]).
//!
//! Where the changes come from is the service's [`ChangeFeed`]: pushed by the store's writes
//! on the local server, read at a fixed interval on Lambda (see [`LISTEN_POLL`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};

use super::deadline::{Delivery, token_expired, until};
use super::{McpService, Reply, ReplyBody, finish};
use crate::engine::EngineError;
use crate::protocol::method;
use crate::protocol::request::ListenParams;
use crate::protocol::{McpError, RequestMeta, TASKS_EXTENSION, failure, success};
use crate::quota::RunSlots;
use crate::store::watch::ChangeFeed;
use crate::task::TaskRef;
use crate::task::{TaskRecord, TaskStatus};
use crate::tenant::Tenant;

pub use crate::protocol::request::MAX_SUBSCRIBED_TASKS;

/// How often a subscription reads its unfinished tasks where changes are not pushed (Lambda):
/// a change reaches the client within this plus one read. Each unfinished task costs one
/// consistent `GetItem` per interval — 60 reads a minute, at most
/// `60 × MAX_SUBSCRIBED_TASKS` for one subscription.
pub const LISTEN_POLL: Duration = Duration::from_secs(1);

/// The `_meta` key naming the subscription a message belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// How long past its budget a stream's place is kept if its holder vanished without giving it
/// back (a Lambda instance that died mid-stream).
const SLOT_GRACE: Duration = Duration::from_secs(60);

/// The per-tenant cap on open streams (long synchronous calls and subscriptions together):
/// each holds a connection and, on Lambda, a whole function instance for up to the stream
/// budget, so one tenant's streams must not use up what every tenant shares.
pub struct StreamSlots {
    slots: Arc<dyn RunSlots>,
    max: usize,
    /// Most streams of all tenants together (0: none), counted under [`ALL_STREAMS`].
    total: usize,
}

/// The key all tenants' streams are counted under for the cap across tenants: no tenant's
/// key (tenant names never hold control characters).
const ALL_STREAMS: &str = "\u{1f}all-streams";

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

    /// The tenant's key in `slots`: apart from its running-jobs record (tenant names never
    /// hold control characters).
    fn key(tenant: &Tenant) -> Tenant {
        Tenant::from(format!("{tenant}\u{1f}streams"))
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
        match self
            .slots
            .take(&Self::key(tenant), &owner, self.max, until)
            .await
        {
            Ok(true) => {
                let slot = StreamSlot {
                    slots: self.slots.clone(),
                    tenant: Self::key(tenant),
                    owner,
                    total: self.total > 0,
                };
                if self.total == 0 {
                    return Ok(slot);
                }
                let all = Tenant::from(ALL_STREAMS);
                match self.slots.take(&all, &slot.owner, self.total, until).await {
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
    tenant: Tenant,
    owner: String,
    /// Whether it also holds a place under [`ALL_STREAMS`].
    total: bool,
}

impl StreamSlot {
    /// Gives the place back (awaited, so that on Lambda it is written before the answer ends
    /// and the instance may be frozen; a place never given back lapses after its budget).
    pub(super) async fn release(self) {
        if let Err(e) = self.slots.release(&self.tenant, &self.owner).await {
            tracing::warn!(error = %e, "stream slot: release failed; it lapses on its own");
        }
        if self.total
            && let Err(e) = self
                .slots
                .release(&Tenant::from(ALL_STREAMS), &self.owner)
                .await
        {
            tracing::warn!(error = %e, "stream slot: release failed; it lapses on its own");
        }
    }
}

/// What a subscriber has been told of one task: its status and outstanding input keys.
#[derive(PartialEq)]
struct Seen(TaskStatus, Vec<String>);

fn seen(t: &TaskRecord) -> Seen {
    Seen(t.status, t.input_requests.keys().cloned().collect())
}

impl McpService {
    /// `subscriptions/listen` (see the module documentation).
    pub(super) async fn listen(
        self: &Arc<Self>,
        id: &Value,
        p: ListenParams,
        meta: &RequestMeta,
        tenant: &Tenant,
        delivery: Delivery,
    ) -> Result<Reply, McpError> {
        let requested = match p.notifications?.task_ids {
            None => None,
            // The filter belongs to the extension: gated before its value is read.
            Some(_) if !meta.declares_tasks() => {
                return Err(McpError::tasks_extension_required(format!(
                    "notifications.taskIds requires the {TASKS_EXTENSION} extension to be declared on the request"
                )));
            }
            Some(ids) => Some(ids?),
        };
        if !delivery.sse {
            return Err(McpError::invalid_request(
                "subscriptions/listen is answered with an SSE stream: accept text/event-stream",
            )
            .with_status(406));
        }
        // Only a host that streams can deliver anything after the acknowledgement; a buffered
        // one agrees to nothing and closes at once.
        let budget = self.stream_budget();
        let mut agreed = Vec::new();
        if let (Some(ids), Some(_)) = (&requested, budget) {
            for id in ids {
                match self.engine.get(TaskRef::new(tenant, id)).await {
                    Ok(_) => agreed.push(id.clone()),
                    Err(e @ EngineError::Internal) => return Err(e.into()),
                    // Unknown, expired, or another tenant's: not agreed, and nothing said.
                    Err(_) => {}
                }
            }
        }
        let budget = budget.unwrap_or_default();
        let slot = match agreed.is_empty() {
            true => None,
            false => Some(self.streams.take(tenant, budget).await?),
        };
        let mut ack = Map::new();
        if requested.is_some() {
            ack.insert("taskIds".into(), json!(agreed));
        }
        let sub_meta = json!({ SUBSCRIPTION_ID: id });
        let (tx, rx) = mpsc::channel::<Value>(64);
        let ack = json!({
            "jsonrpc": "2.0",
            "method": method::SUBSCRIPTIONS_ACKNOWLEDGED,
            "params": {"_meta": sub_meta, "notifications": ack},
        });
        let _ = tx.try_send(ack);
        let mut end = Map::new();
        end.insert("_meta".into(), sub_meta.clone());
        let end = success(id, finish(end, "complete", &self.meta));
        let expired = failure(Some(id), &token_expired().error);
        let watch = Subscription {
            service: self.clone(),
            tenant: tenant.to_owned(),
            sub_meta,
            pending: agreed.into_iter().map(|id| (id, None)).collect(),
            tx,
        };
        let token_expiry = delivery.token_expiry;
        tokio::spawn(async move {
            let ended = watch.run(budget, token_expiry).await;
            if let Some(slot) = slot {
                slot.release().await;
            }
            let (tx, last) = match ended {
                Ended::Done(tx) => (tx, end),
                Ended::TokenExpired(tx) => (tx, expired),
                Ended::Gone => return,
            };
            let _ = tx.send(last).await;
        });
        Ok(Reply {
            status: 200,
            headers: vec![("x-accel-buffering", "no".into())],
            body: ReplyBody::Sse(rx),
        })
    }
}

/// One open subscription.
struct Subscription {
    service: Arc<McpService>,
    tenant: Tenant,
    sub_meta: Value,
    /// Agreed tasks not yet seen terminal, with what was last sent of each.
    pending: Vec<(String, Option<Seen>)>,
    tx: mpsc::Sender<Value>,
}

/// How a subscription ended.
enum Ended {
    /// Nothing left to watch, or the budget spent: the result goes last.
    Done(mpsc::Sender<Value>),
    /// The caller's token expired: the error goes last.
    TokenExpired(mpsc::Sender<Value>),
    /// The client went away.
    Gone,
}

impl Subscription {
    /// Sends changes until nothing is left to watch, `budget` is spent, the caller's token
    /// expires (at `token_expiry`) or the client goes away.
    async fn run(mut self, budget: Duration, token_expiry: Option<tokio::time::Instant>) -> Ended {
        let deadline = tokio::time::Instant::now() + budget;
        let wake = Arc::new(Notify::new());
        // Registered before the first read: a change after it wakes the next wait.
        let ids: Vec<String> = self.pending.iter().map(|(id, _)| id.clone()).collect();
        let feed = self.service.config.change_feed.clone();
        let _watch = match &feed {
            ChangeFeed::Push(w) => Some(w.watch(&self.tenant, &ids, &wake)),
            ChangeFeed::Poll(_) => None,
        };
        let expired = until(token_expiry);
        tokio::pin!(expired);
        loop {
            // An expired token ends the stream before anything more is sent on it.
            if token_expiry.is_some_and(|at| tokio::time::Instant::now() >= at) {
                return Ended::TokenExpired(self.tx);
            }
            if !self.look().await {
                return Ended::Gone;
            }
            if self.pending.is_empty() {
                return Ended::Done(self.tx);
            }
            let next = async {
                match &feed {
                    ChangeFeed::Push(_) => wake.notified().await,
                    ChangeFeed::Poll(every) => tokio::time::sleep(*every).await,
                }
            };
            tokio::select! {
                () = next => {}
                () = &mut expired => return Ended::TokenExpired(self.tx),
                () = tokio::time::sleep_until(deadline) => return Ended::Done(self.tx),
                () = self.tx.closed() => return Ended::Gone,
            }
        }
    }

    /// Reads each pending task and sends what changed; `false` when the client is gone.
    async fn look(&mut self) -> bool {
        let mut i = 0;
        while i < self.pending.len() {
            let id = self.pending[i].0.clone();
            match self
                .service
                .engine
                .get(TaskRef::new(&self.tenant, &id))
                .await
            {
                Ok(task) => {
                    let now = seen(&task);
                    let done = task.status.is_terminal();
                    if self.pending[i].1.as_ref() != Some(&now) {
                        if self.tx.send(self.notification(&task)).await.is_err() {
                            return false;
                        }
                        self.pending[i].1 = Some(now);
                    }
                    if done {
                        self.pending.remove(i);
                        continue;
                    }
                }
                // A store hiccup: look again at the next wake.
                Err(EngineError::Internal) => {}
                // Expired (or purged): nothing more will happen to it.
                Err(_) => {
                    self.pending.remove(i);
                    continue;
                }
            }
            i += 1;
        }
        true
    }

    fn notification(&self, task: &TaskRecord) -> Value {
        let mut params = task.to_detailed();
        params.remove("resultType");
        params.insert("_meta".into(), self.sub_meta.clone());
        json!({"jsonrpc": "2.0", "method": method::TASKS_CHANGED, "params": params})
    }
}

#[cfg(test)]
mod tests;
