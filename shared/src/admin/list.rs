//! Listing unfinished tasks page by page: the query, the summary of each task, the cursor a
//! page continues from (opaque, accepted only by the same kind of listing).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use super::{
    AdminError, DEFAULT_LIMIT, MAX_SCANNED, check_limit, check_task_id, check_tenant, parse_status,
    shown,
};
use crate::clock::{iso8601, now_ms};
use crate::store::{TaskKey, TaskStore};
use crate::task::{TaskRecord, TaskStatus};
use crate::tenant::Tenant;

/// Where a listing continues: the last task of a page, and which kind of listing it was.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    /// A listing of one tenant (task-id order) or of every tenant (the store's key order).
    one_tenant: bool,
    key: TaskKey,
}

impl Cursor {
    /// Opaque text: base64url of the kind, the tenant and the task id.
    fn encode(&self) -> String {
        let kind = if self.one_tenant { 't' } else { 'a' };
        URL_SAFE_NO_PAD.encode(format!(
            "{kind}{}\u{1f}{}",
            self.key.tenant, self.key.task_id
        ))
    }

    fn decode(text: &str) -> Result<Self, AdminError> {
        let bad = || {
            AdminError::Invalid(format!(
                "{} is not a cursor of `tasks list` (pass the `next` value a listing printed)",
                shown(text)
            ))
        };
        if text.len() > 1024 {
            return Err(bad());
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
        let s = String::from_utf8(bytes).map_err(|_| bad())?;
        let one_tenant = match s.chars().next() {
            Some('t') => true,
            Some('a') => false,
            _ => return Err(bad()),
        };
        let (tenant, task_id) = s[1..].split_once('\u{1f}').ok_or_else(bad)?;
        check_tenant(tenant).map_err(|_| bad())?;
        let task_id = check_task_id(task_id).map_err(|_| bad())?;
        Ok(Cursor {
            one_tenant,
            key: TaskKey {
                tenant: Tenant::new(tenant),
                task_id,
            },
        })
    }
}

/// What to list.
#[derive(Debug, Clone)]
pub struct ListQuery {
    /// One tenant's tasks (task-id order), or every tenant's (`None`; the store's order).
    pub tenant: Option<Tenant>,
    /// Only tasks of this status (`working` or `input_required`).
    pub status: Option<TaskStatus>,
    /// Most tasks in the page, within `1..=`[`MAX_LIMIT`](super::MAX_LIMIT).
    pub limit: usize,
    /// The cursor a previous page returned ([`TaskPage::next`]).
    pub after: Option<String>,
}

impl Default for ListQuery {
    fn default() -> Self {
        Self {
            tenant: None,
            status: None,
            limit: DEFAULT_LIMIT,
            after: None,
        }
    }
}

/// One listed task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSummary {
    /// The task id.
    pub task_id: String,
    /// Its tenant.
    pub tenant: Tenant,
    /// Its status.
    pub status: TaskStatus,
    /// The tool that runs its job.
    pub tool: String,
    /// Creation time, ISO 8601 UTC.
    pub created_at: String,
    /// Last change, ISO 8601 UTC.
    pub last_updated_at: String,
    /// Its status message, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Past its `ttlMs` (clients read it as not found; the purge removes it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
}

impl TaskSummary {
    /// The summary of a record, with expiry judged at `now_ms`.
    pub fn of(task: &TaskRecord, now_ms: u64) -> Self {
        Self {
            task_id: task.task_id.to_string(),
            tenant: task.tenant.clone(),
            status: task.status,
            tool: task.tool.clone(),
            created_at: iso8601(task.created_at_ms),
            last_updated_at: iso8601(task.last_updated_at_ms),
            status_message: task.status_message.clone(),
            expired: task.is_expired(now_ms),
        }
    }
}

/// One page of [`list`].
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// The tasks, in the listing's order.
    pub tasks: Vec<TaskSummary>,
    /// The cursor of the next page, when more tasks may follow (a page that ends exactly at
    /// the last task may still carry one; the next page is then empty). A page filtered by
    /// status may hold fewer than the limit and still carry one, when it stopped after
    /// reading [`MAX_SCANNED`] records.
    pub next: Option<String>,
}

/// Lists unfinished tasks (see the module doc for the two orders).
pub async fn list(store: &dyn TaskStore, query: &ListQuery) -> Result<TaskPage, AdminError> {
    check_limit(query.limit)?;
    if let Some(tenant) = &query.tenant {
        check_tenant(tenant)?;
    }
    if let Some(status) = query.status {
        parse_status(status.as_str())?;
    }
    let after = query.after.as_deref().map(Cursor::decode).transpose()?;
    match (&query.tenant, &after) {
        (Some(tenant), Some(c)) if !c.one_tenant || &c.key.tenant != tenant => {
            return Err(AdminError::Invalid(
                "this cursor belongs to another listing (another tenant, or one without \
                 --tenant)"
                    .into(),
            ));
        }
        (None, Some(c)) if c.one_tenant => {
            return Err(AdminError::Invalid(
                "this cursor belongs to a listing of one tenant: give the same --tenant".into(),
            ));
        }
        _ => {}
    }
    let wanted =
        |t: &TaskRecord| !t.status.is_terminal() && query.status.is_none_or(|s| s == t.status);
    let mut page = Pager::new(query.limit, query.tenant.is_some());
    match &query.tenant {
        Some(tenant) => {
            let mut after = after.map(|c| c.key.task_id);
            loop {
                let records = store
                    .list_tenant_active(tenant, after.as_deref(), query.limit)
                    .await?;
                let full = records.len() >= query.limit;
                after = records.last().map(|t| t.task_id.clone()).or(after);
                let keys: Vec<TaskKey> = records
                    .iter()
                    .map(|t| TaskKey {
                        tenant: t.tenant.clone(),
                        task_id: t.task_id.clone(),
                    })
                    .collect();
                let records = records.into_iter().map(Some).collect();
                if let Some(done) = page.take(records, &keys, full, &wanted) {
                    return Ok(done);
                }
            }
        }
        None => {
            let mut after = after.map(|c| c.key);
            loop {
                let keys = store.list_active(after.as_ref(), query.limit).await?;
                let full = keys.len() >= query.limit;
                after = keys.last().cloned().or(after);
                // Re-read each key: the listing may lag the writes (DynamoDB's indexes).
                let mut records = Vec::with_capacity(keys.len());
                for k in &keys {
                    records.push(store.get(k.borrowed()).await?);
                }
                if let Some(done) = page.take(records, &keys, full, &wanted) {
                    return Ok(done);
                }
            }
        }
    }
}

/// Fills a page from successive store pages.
struct Pager {
    limit: usize,
    one_tenant: bool,
    now: u64,
    scanned: usize,
    out: Vec<TaskSummary>,
}

impl Pager {
    fn new(limit: usize, one_tenant: bool) -> Self {
        Self {
            limit,
            one_tenant,
            now: now_ms(),
            scanned: 0,
            out: Vec::new(),
        }
    }

    fn cursor(&self, key: TaskKey) -> String {
        Cursor {
            one_tenant: self.one_tenant,
            key,
        }
        .encode()
    }

    /// One store page: `records[i]` is the record of `keys[i]`, `None` when it is gone.
    /// Returns the finished page, or `None` to read the next store page.
    fn take(
        &mut self,
        records: Vec<Option<TaskRecord>>,
        keys: &[TaskKey],
        full: bool,
        wanted: &impl Fn(&TaskRecord) -> bool,
    ) -> Option<TaskPage> {
        let n = records.len();
        for (i, record) in records.into_iter().enumerate() {
            self.scanned += 1;
            let Some(task) = record.filter(|t| wanted(t)) else {
                continue;
            };
            self.out.push(TaskSummary::of(&task, self.now));
            if self.out.len() >= self.limit {
                let more = full || i + 1 < n;
                let next = more.then(|| self.cursor(keys[i].clone()));
                return Some(self.finish(next));
            }
        }
        if !full {
            return Some(self.finish(None));
        }
        if self.scanned >= MAX_SCANNED {
            let next = keys.last().map(|k| self.cursor(k.clone()));
            return Some(self.finish(next));
        }
        None
    }

    fn finish(&mut self, next: Option<String>) -> TaskPage {
        TaskPage {
            tasks: std::mem::take(&mut self.out),
            next,
        }
    }
}
