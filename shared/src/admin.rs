//! Operator commands over the ports, behind `mcp-tasks tasks …` (issue 11): list a store's
//! unfinished tasks, show one task's record, cancel one through the engine.
//!
//! The binary parses and prints; everything that decides lives here, over [`TaskStore`] and
//! [`Engine`], so the same code serves the embedded store and DynamoDB. What the commands
//! promise:
//!
//! - **Listing** reads the store's index of unfinished tasks (finished ones are not indexed;
//!   `show` reaches them). With a tenant it is one tenant-keyed listing in task-id order
//!   (creation order); without, the store's own listing order over every tenant, each key
//!   re-read with `get` (the listing may lag on DynamoDB). Pages carry an opaque cursor that
//!   only the same kind of listing accepts.
//! - **Show** returns the whole record as stored, results included, but never the task's
//!   arguments unless asked: they are the client's data, and a support session should not
//!   copy them into a ticket by default.
//! - **Cancel** goes through the engine, so the status machine and the conditional writes hold
//!   exactly as for `tasks/cancel`; a finished task is refused, never rewritten.
//!
//! Inputs come from a terminal or a script and are checked before the store is touched:
//! tenants and task ids with control characters, limits outside `1..=`[`MAX_LIMIT`], statuses
//! that are not listed, cursors that are not ours — each refused with a one-line reason that
//! quotes the input escaped and shortened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::clock::{iso8601, now_ms};
use crate::engine::Engine;
use crate::queue::{LocalQueue, WorkQueue};
use crate::store::embedded::{self, EmbeddedStore};
use crate::store::{StoreError, TaskRef, TaskStore};
use crate::task::{TaskId, TaskRecord, TaskStatus};

mod list;
pub use list::{ListQuery, TaskPage, TaskSummary, list};

/// Tasks listed per page unless told otherwise.
pub const DEFAULT_LIMIT: usize = 50;
/// Most tasks one page may list.
pub const MAX_LIMIT: usize = 1000;
/// Most records one listing call reads while looking for tasks of a status: past it the page
/// ends early (with a cursor), so a rare status never turns one call into a full scan.
pub const MAX_SCANNED: usize = 10 * MAX_LIMIT;
/// Longest tenant accepted (the authenticator's bound on a tenant claim).
pub const MAX_TENANT_LEN: usize = 256;
/// The embedded store's file inside a data directory (as `mcp-tasks serve` names it).
pub const STORE_FILE: &str = "tasks.redb";

/// Why an operator command did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The input is not acceptable (a usage error): the reason, for the operator.
    #[error("{0}")]
    Invalid(String),
    /// No such task of that tenant.
    #[error("no task {task_id} of tenant {tenant}")]
    NotFound {
        /// The tenant asked for (escaped for display).
        tenant: String,
        /// The task id asked for.
        task_id: String,
    },
    /// The task is past its `ttlMs`: clients read it as not found, and it is no longer changed.
    #[error("task {task_id} has expired (past its ttl): it can no longer be cancelled")]
    Expired {
        /// The task id.
        task_id: String,
    },
    /// The task has already finished; nothing was written.
    #[error("task {task_id} is already {}: nothing to cancel", .status.as_str())]
    Finished {
        /// The task id.
        task_id: String,
        /// Its terminal status.
        status: TaskStatus,
    },
    /// The store failed.
    #[error("the task store failed: {0}")]
    Store(#[from] StoreError),
    /// The engine refused or failed for a reason the checks above do not cover.
    #[error("the engine refused the cancel: {0}")]
    Engine(#[source] crate::engine::EngineError),
}

/// `s` for a message: control characters escaped, at most 64 characters.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(64).flat_map(char::escape_debug).collect();
    if s.chars().nth(64).is_some() {
        out.push('…');
    }
    format!("\"{out}\"")
}

/// A tenant as an operator may name one: what the authenticator accepts from a token (1 to
/// [`MAX_TENANT_LEN`] bytes, no control characters).
pub fn check_tenant(tenant: &str) -> Result<(), AdminError> {
    if tenant.is_empty() {
        return Err(AdminError::Invalid("the tenant is empty".into()));
    }
    if tenant.len() > MAX_TENANT_LEN {
        return Err(AdminError::Invalid(format!(
            "the tenant {} is too long ({} bytes; at most {MAX_TENANT_LEN})",
            shown(tenant),
            tenant.len()
        )));
    }
    if tenant.chars().any(char::is_control) {
        return Err(AdminError::Invalid(format!(
            "the tenant {} contains control characters",
            shown(tenant)
        )));
    }
    Ok(())
}

/// A task id as a client may send one (1 to 128 printable ASCII characters, no spaces).
pub fn check_task_id(task_id: &str) -> Result<TaskId, AdminError> {
    if let Some(id) = TaskId::parse(task_id) {
        return Ok(id);
    }
    Err(AdminError::Invalid(format!(
        "{} is not a task id (1 to 128 printable ASCII characters without spaces, like \
         tsk_01J…)",
        shown(task_id)
    )))
}

/// A page size within `1..=`[`MAX_LIMIT`].
pub fn check_limit(limit: usize) -> Result<(), AdminError> {
    if (1..=MAX_LIMIT).contains(&limit) {
        return Ok(());
    }
    Err(AdminError::Invalid(format!(
        "the limit must be from 1 to {MAX_LIMIT} (got {limit})"
    )))
}

/// The status filter of a listing: only the unfinished statuses are listed.
pub fn parse_status(s: &str) -> Result<TaskStatus, AdminError> {
    match s {
        "working" => Ok(TaskStatus::Working),
        "input_required" => Ok(TaskStatus::InputRequired),
        "completed" | "failed" | "cancelled" => Err(AdminError::Invalid(format!(
            "finished tasks ({s}) are not listed: the store indexes unfinished tasks only; \
             read one with `tasks show ID --tenant T`"
        ))),
        other => Err(AdminError::Invalid(format!(
            "unknown status {}: working or input_required",
            shown(other)
        ))),
    }
}

/// One task's whole record, for `tasks show`.
#[derive(Debug, Clone)]
pub struct TaskDetails {
    /// The record as stored, without arguments an earlier build kept inside it.
    pub record: TaskRecord,
    /// The task's arguments, only when asked for (`None` otherwise, or when the store has
    /// none).
    pub arguments: Option<Value>,
    /// Past its `ttlMs`.
    pub expired: bool,
}

impl TaskDetails {
    /// The summary line's fields.
    pub fn summary(&self) -> TaskSummary {
        let mut s = TaskSummary::of(&self.record, now_ms());
        s.expired = self.expired;
        s
    }

    /// The record as JSON (the stored field names), with its times also in ISO 8601
    /// (`created_at`, `last_updated_at`, `expires_at`), `expired`, and `arguments` only when
    /// they were asked for.
    pub fn to_json(&self) -> Value {
        let mut m = match serde_json::to_value(&self.record) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let r = &self.record;
        m.insert("created_at".into(), json!(iso8601(r.created_at_ms)));
        m.insert(
            "last_updated_at".into(),
            json!(iso8601(r.last_updated_at_ms)),
        );
        m.insert("expires_at".into(), json!(r.expires_at_ms().map(iso8601)));
        m.insert("expired".into(), json!(self.expired));
        match &self.arguments {
            Some(a) => m.insert("arguments".into(), a.clone()),
            None => m.remove("arguments"),
        };
        Value::Object(m)
    }
}

/// Reads one task of one tenant, finished or not (expired ones too, marked).
pub async fn show(
    store: &dyn TaskStore,
    id: TaskRef<'_>,
    with_arguments: bool,
) -> Result<TaskDetails, AdminError> {
    check_tenant(id.tenant)?;
    let mut record = read(store, id).await?;
    let inline = record.inline_arguments.take();
    let arguments = match with_arguments {
        true => store.arguments(id).await?.or(inline),
        false => None,
    };
    let expired = record.is_expired(now_ms());
    Ok(TaskDetails {
        record,
        arguments,
        expired,
    })
}

async fn read(store: &dyn TaskStore, id: TaskRef<'_>) -> Result<TaskRecord, AdminError> {
    store.get(id).await?.ok_or_else(|| AdminError::NotFound {
        tenant: shown(id.tenant),
        task_id: id.task_id.to_string(),
    })
}

/// How [`cancel`] cancels a task that a worker may be running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelMode {
    /// Cancelled at once, even under a worker's lease ([`Engine::cancel_at_once`]): right
    /// where no worker can be running, as on the embedded store that this process holds
    /// locked (a lease found there is a dead server's).
    AtOnce,
    /// As `tasks/cancel` (2026-07-28, [`Engine::cancel`]): a task nobody runs is cancelled at
    /// once; a running one gets the cancel flag and its worker stops it within about a
    /// second, then writes `cancelled`. For shared stores (DynamoDB), where workers run.
    Cooperative,
}

/// What [`cancel`] did.
#[derive(Debug, Clone)]
pub enum CancelOutcome {
    /// The task is now `cancelled` (the record as read after the write).
    Cancelled(TaskRecord),
    /// A worker holds the task: it carries the cancel flag, and the worker writes `cancelled`
    /// when it stops the job (about a second).
    Requested(TaskRecord),
}

/// Cancels one task through the engine (the status machine and conditional writes of
/// `tasks/cancel`); a finished or expired task is refused and left unchanged.
pub async fn cancel(
    engine: &Engine,
    store: &dyn TaskStore,
    id: TaskRef<'_>,
    mode: CancelMode,
) -> Result<CancelOutcome, AdminError> {
    check_tenant(id.tenant)?;
    let task_id = id.task_id;
    let before = read(store, id).await?;
    let finished = |t: &TaskRecord| AdminError::Finished {
        task_id: task_id.to_string(),
        status: t.status,
    };
    if before.status.is_terminal() {
        return Err(finished(&before));
    }
    if before.is_expired(now_ms()) {
        return Err(AdminError::Expired {
            task_id: task_id.to_string(),
        });
    }
    let outcome = match mode {
        CancelMode::AtOnce => engine.cancel_at_once(id).await.map(|_| ()),
        CancelMode::Cooperative => engine.cancel(id).await,
    };
    let after = read(store, id).await?;
    match outcome {
        Ok(()) if after.status == TaskStatus::Cancelled => Ok(CancelOutcome::Cancelled(after)),
        // It ended otherwise in a race with this call; the cancel wrote nothing.
        Ok(()) if after.status.is_terminal() => Err(finished(&after)),
        Ok(()) => Ok(CancelOutcome::Requested(after)),
        Err(_) if after.status.is_terminal() => Err(finished(&after)),
        Err(e) => Err(AdminError::Engine(e)),
    }
}

/// An engine for the operator commands. `cancel` sends no work, so without a queue the
/// engine gets one whose worker is gone: a send would fail (and be logged), never be lost
/// silently into a live worker of another process.
pub fn engine(store: Arc<dyn TaskStore>, queue: Option<Arc<dyn WorkQueue>>) -> Engine {
    let queue = queue.unwrap_or_else(|| Arc::new(LocalQueue::new().0));
    let ports = crate::app::Ports {
        store,
        queue,
        run_slots: None,
    };
    crate::app::Server::new(
        ports,
        crate::app::Settings::default(),
        crate::app::no_tools(),
    )
    .engine()
}

/// Why the embedded store of a data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory does not exist (it is not created: a typo must not read as an empty
    /// store).
    #[error("there is no data directory {0} (give the --data-dir that `mcp-tasks serve` uses)")]
    Missing(PathBuf),
    /// The directory holds no store file.
    #[error(
        "{0} holds no task store (no {STORE_FILE}): is it the --data-dir of `mcp-tasks serve`?"
    )]
    NoStore(PathBuf),
    /// Another process has the store open: redb locks its file for one process at a time.
    #[error("the data directory {0} is in use by a running `mcp-tasks serve`; stop it first")]
    InUse(PathBuf),
    /// The store file could not be opened: damaged (refused, never read), or unreadable.
    #[error(transparent)]
    Store(embedded::OpenError),
}

/// Opens the embedded store of an existing data directory, never creating anything.
///
/// redb holds an exclusive lock on its file for as long as a process has it open, so while
/// `mcp-tasks serve` runs on `dir` this fails with [`OpenError::InUse`]. A damaged file is
/// refused ([`embedded::OpenError::Damaged`]), never listed as empty.
pub fn open_embedded(dir: &Path) -> Result<EmbeddedStore, OpenError> {
    if !dir.is_dir() {
        return Err(OpenError::Missing(dir.to_owned()));
    }
    let file = dir.join(STORE_FILE);
    if !file.is_file() {
        return Err(OpenError::NoStore(dir.to_owned()));
    }
    EmbeddedStore::open_existing(&file).map_err(|e| match e {
        embedded::OpenError::InUse(_) => OpenError::InUse(dir.to_owned()),
        other => OpenError::Store(other),
    })
}

#[cfg(test)]
mod tests;
