//! `subscriptions/listen` with the tasks extension's `notifications.taskIds` filter (its
//! per-tenant cap on open streams, shared with long synchronous calls, is `handler::streams`).
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

use crate::engine::EngineError;
use crate::handler::deadline::{Delivery, token_expired, until};
use crate::handler::{McpService, Reply, ReplyBody, finish};
use crate::protocol::method;
use crate::protocol::request::ListenParams;
use crate::protocol::{McpError, RequestMeta, TASKS_EXTENSION, failure, success};
use crate::store::watch::ChangeFeed;
use crate::task::{TaskId, TaskRef};
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
                // A string no task could have is an unknown task: not agreed.
                let Some(id) = TaskId::parse(id.as_str()) else {
                    continue;
                };
                match self.engine.get(TaskRef::new(tenant, &id)).await {
                    Ok(_) => agreed.push(id),
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
    pending: Vec<(TaskId, Option<Seen>)>,
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
        let ids: Vec<TaskId> = self.pending.iter().map(|(id, _)| id.clone()).collect();
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
