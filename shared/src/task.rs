//! The task: its status machine, its stored record, and its wire shape.
//!
//! A [`TaskRecord`] is everything the store keeps about one task. Every change to it goes
//! through a method here that checks the status machine first, so a handler or the worker can
//! never write an illegal transition; the store then applies the change only if the record's
//! `version` is still the one that was read (optimistic concurrency), which is what makes a
//! terminal status final even when a cancel races a completion.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::clock::now_ms;
use crate::protocol::ErrorObject;
use crate::tenant::Tenant;

/// The five statuses of SEP-2663.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The job is queued or running.
    Working,
    /// The job waits for answers to `inputRequests`.
    InputRequired,
    /// Finished with a `CallToolResult` (which may carry `isError: true`).
    Completed,
    /// Finished with a JSON-RPC error (protocol-level failure).
    Failed,
    /// Cancelled through `tasks/cancel`.
    Cancelled,
}

impl TaskStatus {
    /// All statuses, for exhaustive tests.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// Terminal statuses never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The legal transitions of the lifecycle (a status "moving" to itself is not a
    /// transition; updates that keep the status, such as progress, are checked separately).
    pub fn can_become(self, next: TaskStatus) -> bool {
        use TaskStatus::*;
        match self {
            Working => matches!(next, InputRequired | Completed | Failed | Cancelled),
            InputRequired => matches!(next, Working | Completed | Failed | Cancelled),
            Completed | Failed | Cancelled => false,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A change that the status machine refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal task transition {from:?} -> {to:?}")]
pub struct IllegalTransition {
    /// Status the task had.
    pub from: TaskStatus,
    /// Status that was asked for.
    pub to: TaskStatus,
}

/// A worker's claim on a task while it runs the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Identifies one worker instance (random per process or invocation).
    pub owner: String,
    /// Epoch milliseconds after which another worker may take over.
    pub expires_at_ms: u64,
}

/// Everything stored about one task. Field names are ours (see DESIGN.md "The task item").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Owner of the task; part of every key.
    pub tenant: Tenant,
    /// Unguessable id, `tsk_…`.
    pub task_id: TaskId,
    /// Current status.
    pub status: TaskStatus,
    /// Human/model readable progress or reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Epoch milliseconds.
    pub created_at_ms: u64,
    /// Epoch milliseconds; moves on every change.
    pub last_updated_at_ms: u64,
    /// Lifetime from `created_at_ms`; `None` means unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested poll gap.
    pub poll_interval_ms: u64,
    /// Tool that runs the job.
    pub tool: String,
    /// Arguments stored inside the record, as earlier builds did. New records never
    /// carry them: the store keeps a task's arguments apart, written once at creation
    /// ([`TaskStore::create`](crate::store::TaskStore::create)), so a checkpoint never rewrites
    /// them. Read only so that a task in flight across an upgrade still runs.
    #[serde(default, rename = "arguments", skip_serializing_if = "Option::is_none")]
    pub inline_arguments: Option<Value>,
    /// The `CallToolResult` once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The JSON-RPC error once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
    /// Outstanding input requests (key → request).
    #[serde(default)]
    pub input_requests: BTreeMap<String, Value>,
    /// Answers received so far (key → response), kept for the job.
    #[serde(default)]
    pub input_responses: BTreeMap<String, Value>,
    /// Every input key ever issued: keys are never reused.
    #[serde(default)]
    pub issued_input_keys: Vec<String>,
    /// Set by `tasks/cancel`; the worker stops at its next check.
    #[serde(default)]
    pub cancel_requested: bool,
    /// Optimistic concurrency: bumped by every successful write.
    pub version: u64,
    /// The worker currently running the job, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// The job's checkpoint: where a resumed job starts again.
    #[serde(default)]
    pub checkpoint: Value,
    /// How many times a worker took the job (start, resume, continuation, recovery).
    #[serde(default)]
    pub attempts: u32,
    /// How many runs in a row died without saving progress (crash, panic, lost store).
    #[serde(default)]
    pub interruptions: u32,
    /// How many runs died in all, progress saved or not (never reset): bounds a job that
    /// kills its process after every checkpoint.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub deaths: u32,
    /// The client capabilities of the creating request (they gate which input kinds a job may ask).
    #[serde(default)]
    pub client_capabilities: Value,
    /// CPU time the job has used on the CPU pool so far, in milliseconds (saved with each
    /// checkpoint; checked against the per-task CPU quota).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_ms: u64,
    /// Time the job has run under a lease so far, in milliseconds (saved with each checkpoint;
    /// checked against the per-task wall-time quota).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub run_ms: u64,
    /// While the job sleeps ([`crate::jobs::Step::Sleep`]): when it wakes (epoch ms). A message
    /// that brings the task back earlier is given back to the queue until then; the sweep
    /// leaves it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at_ms: Option<u64>,
    /// The wake sequence: bumped (conditionally) by every park and every hop of a long sleep;
    /// only a [`crate::queue::WorkKind::Wake`] message of the current number continues the
    /// chain.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub wake_seq: u32,
    /// How many times the orphan sweep re-sent this task's work since a run last took it
    /// (a run taking the lease resets it): each re-send makes the sweep wait twice as long
    /// before the next one ([`TaskRecord::sweep_after_ms`]).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub sweeps: u32,
    /// After a re-send by the sweep: the sweep leaves the task alone until it has been quiet
    /// for its window counted from this time (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_after_ms: Option<u64>,
    /// While the job waits for one of its tenant's running places: until when its waiting
    /// message vouches for it (epoch ms). That message, re-sent at every deferral, renews
    /// this before then; the sweep leaves the task alone until it has been quiet for its
    /// window past it. A run taking the task clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until_ms: Option<u64>,
    /// The waiting sequence: bumped (conditionally) by every renewal of
    /// [`waiting_until_ms`](Self::waiting_until_ms); only a
    /// [`crate::queue::WorkKind::Waiting`] message of the current number renews it, so a
    /// duplicate never forks the wait.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub waiting_seq: u32,
}

/// The grain of [`TaskRecord::quiet_mark_ms`]: a running job's frequent writes move its
/// mark (and with it an index entry on DynamoDB) at most once per grain.
pub const QUIET_GRAIN_MS: u64 = 60_000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl TaskRecord {
    /// A fresh `working` task (its arguments are stored beside it, see
    /// [`TaskStore::create`](crate::store::TaskStore::create)).
    pub fn new(
        tenant: Tenant,
        task_id: TaskId,
        tool: &str,
        ttl_ms: Option<u64>,
        poll_interval_ms: u64,
        client_capabilities: Value,
    ) -> Self {
        let now = now_ms();
        Self {
            tenant,
            task_id,
            status: TaskStatus::Working,
            status_message: None,
            created_at_ms: now,
            last_updated_at_ms: now,
            ttl_ms,
            poll_interval_ms,
            tool: tool.to_owned(),
            inline_arguments: None,
            result: None,
            error: None,
            input_requests: BTreeMap::new(),
            input_responses: BTreeMap::new(),
            issued_input_keys: Vec::new(),
            cancel_requested: false,
            version: 0,
            lease: None,
            checkpoint: Value::Null,
            attempts: 0,
            interruptions: 0,
            deaths: 0,
            client_capabilities,
            cpu_ms: 0,
            run_ms: 0,
            wake_at_ms: None,
            wake_seq: 0,
            sweeps: 0,
            sweep_after_ms: None,
            waiting_until_ms: None,
            waiting_seq: 0,
        }
    }

    /// The task's identity, as the store's calls take it.
    pub fn key(&self) -> TaskRef<'_> {
        TaskRef {
            tenant: &self.tenant,
            task_id: &self.task_id,
        }
    }

    /// What the orphan sweep orders its candidates by: `None` unless the task is `working`
    /// (a task waiting for input or finished is never the sweep's), else the latest of its
    /// last update (rounded down to [`QUIET_GRAIN_MS`]), its wake time and
    /// [`sweep_after_ms`](Self::sweep_after_ms) (and, while it waits for a running place,
    /// [`waiting_until_ms`](Self::waiting_until_ms)). A task quiet for a window `w` at time `now`
    /// (see `Engine::sweep`) always has a mark at or before `now - w`; the converse need not
    /// hold (the rounding, a live lease), so the sweep checks each candidate it reads.
    pub fn quiet_mark_ms(&self) -> Option<u64> {
        (self.status == TaskStatus::Working).then(|| {
            let updated = self.last_updated_at_ms - self.last_updated_at_ms % QUIET_GRAIN_MS;
            updated
                .max(self.wake_at_ms.unwrap_or(0))
                .max(self.sweep_after_ms.unwrap_or(0))
                .max(self.waiting_until_ms.unwrap_or(0))
        })
    }

    /// Epoch milliseconds after which the task reads as not found.
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.ttl_ms
            .map(|ttl| self.created_at_ms.saturating_add(ttl))
    }

    /// True once the task is past its `ttlMs`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms().is_some_and(|at| now_ms >= at)
    }

    /// Moves to `next`, clearing what the new status does not carry.
    pub fn transition(&mut self, next: TaskStatus) -> Result<(), IllegalTransition> {
        if !self.status.can_become(next) {
            return Err(IllegalTransition {
                from: self.status,
                to: next,
            });
        }
        self.status = next;
        if next != TaskStatus::InputRequired {
            self.input_requests.clear();
        }
        if next != TaskStatus::Working {
            // Nobody runs a job that waits for input or has finished.
            self.lease = None;
        }
        self.touch();
        Ok(())
    }

    /// Completes with a `CallToolResult` (tool errors included).
    pub fn complete(&mut self, result: Value) -> Result<(), IllegalTransition> {
        self.transition(TaskStatus::Completed)?;
        self.result = Some(result);
        Ok(())
    }

    /// Fails with a JSON-RPC error.
    pub fn fail(&mut self, error: ErrorObject) -> Result<(), IllegalTransition> {
        self.transition(TaskStatus::Failed)?;
        self.status_message = Some(error.message.clone());
        self.error = Some(error);
        Ok(())
    }

    /// Cancels (the caller has checked that cancellation applies now).
    pub fn cancel(&mut self) -> Result<(), IllegalTransition> {
        self.transition(TaskStatus::Cancelled)?;
        self.status_message = Some("Cancelled by request".into());
        Ok(())
    }

    /// Parks the task on new input requests. Reused keys are a job bug and are refused.
    pub fn require_input(
        &mut self,
        requests: BTreeMap<String, Value>,
    ) -> Result<(), InputRequestError> {
        if requests.is_empty() {
            return Err(InputRequestError::Empty);
        }
        if let Some(k) = requests
            .keys()
            .find(|k| self.issued_input_keys.iter().any(|i| i == *k))
        {
            return Err(InputRequestError::ReusedKey(k.clone()));
        }
        self.transition(TaskStatus::InputRequired)
            .map_err(InputRequestError::Illegal)?;
        self.issued_input_keys.extend(requests.keys().cloned());
        self.input_requests = requests;
        Ok(())
    }

    /// Records answers for outstanding keys only; unknown or already answered keys are
    /// ignored, so a retried `tasks/update` has no second effect. Returns whether anything
    /// changed. When nothing is outstanding any more the task is `working` again.
    pub fn answer(&mut self, responses: &Map<String, Value>) -> bool {
        if self.status != TaskStatus::InputRequired {
            return false;
        }
        let mut changed = false;
        for (key, value) in responses {
            if self.input_requests.remove(key).is_some() {
                self.input_responses.insert(key.clone(), value.clone());
                changed = true;
            }
        }
        if changed {
            if self.input_requests.is_empty() {
                // InputRequired -> Working is always legal.
                let _ = self.transition(TaskStatus::Working);
            } else {
                self.touch();
            }
        }
        changed
    }

    /// Checks the shape of answers to outstanding requests (unknown keys are ignored, not
    /// checked): an elicitation answer needs a known `action` and, when accepted, object
    /// `content`; sampling and roots answers must be objects. A malformed answer is refused
    /// before anything is stored, instead of failing the job later.
    pub fn check_answers(&self, responses: &Map<String, Value>) -> Result<(), String> {
        for (key, answer) in responses {
            let Some(request) = self.input_requests.get(key) else {
                continue;
            };
            let Some(answer) = answer.as_object() else {
                return Err(format!("inputResponses[{key:?}] must be an object"));
            };
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            if let Some(method) = crate::protocol::method::InputMethod::from_name(method) {
                method.check_answer(key, answer)?;
            }
        }
        Ok(())
    }

    /// Moves `lastUpdatedAt` on.
    pub fn touch(&mut self) {
        self.last_updated_at_ms = now_ms().max(self.last_updated_at_ms);
    }

    /// The `Task` fields shared by `CreateTaskResult`, `tasks/get` and notifications.
    /// The flat `CreateTaskResult` body (without `_meta`).
    pub fn to_create_result(&self) -> Map<String, Value> {
        wire::to_map(&self.wire("task", false, None))
    }

    /// The `tasks/get` result body: a `DetailedTask` with `resultType: "complete"`.
    pub fn to_detailed(&self) -> Map<String, Value> {
        wire::to_map(&self.wire("complete", true, None))
    }
}

pub use wire::GetAnswer;

/// Why a job's input requests were refused.
#[derive(Debug, thiserror::Error)]
pub enum InputRequestError {
    /// A job asked for input with an empty map.
    #[error("a job asked for input without any request")]
    Empty,
    /// Keys are unique for a task's whole life.
    #[error("input key {0:?} was already used by this task")]
    ReusedKey(String),
    /// The status machine refused.
    #[error(transparent)]
    Illegal(IllegalTransition),
}

pub use id::is_valid as is_valid_task_id;

/// A new unguessable task id ([`TaskId::generate`]).
pub fn new_task_id() -> TaskId {
    TaskId::generate()
}

mod id;
mod key;
#[cfg(test)]
mod tests;
mod wire;

pub use id::TaskId;
pub use key::{TaskKey, TaskRef};
