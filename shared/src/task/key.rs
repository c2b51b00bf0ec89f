//! A task's identity: its tenant and its id, owned ([`TaskKey`]) or borrowed ([`TaskRef`]).
//! It lives with the task (a [`TaskRecord`](super::TaskRecord) and a
//! [`WorkMessage`](crate::queue::WorkMessage) both name one); the store's calls take it.

use super::TaskId;
use crate::tenant::Tenant;

/// A task's key, as listed for recovery and sweeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskKey {
    /// Owner tenant.
    pub tenant: Tenant,
    /// Task id.
    pub task_id: TaskId,
}

impl TaskKey {
    /// The key of `tenant`'s task `task_id`.
    pub fn new(tenant: Tenant, task_id: TaskId) -> Self {
        Self { tenant, task_id }
    }

    /// The key borrowed, as the store's calls take it.
    pub fn borrowed(&self) -> TaskRef<'_> {
        TaskRef {
            tenant: &self.tenant,
            task_id: &self.task_id,
        }
    }
}

/// A task's identity borrowed from wherever it is held (a request, a
/// [`TaskRecord`](super::TaskRecord), a [`WorkMessage`](crate::queue::WorkMessage), a
/// [`TaskKey`]): what the store's calls on one task take, so reading a task allocates no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskRef<'a> {
    /// Owner tenant.
    pub tenant: &'a Tenant,
    /// Task id.
    pub task_id: &'a TaskId,
}

impl<'a> TaskRef<'a> {
    /// `tenant`'s task `task_id`.
    pub fn new(tenant: &'a Tenant, task_id: &'a TaskId) -> Self {
        Self { tenant, task_id }
    }

    /// The identity as an owned [`TaskKey`].
    pub fn to_key(self) -> TaskKey {
        TaskKey {
            tenant: self.tenant.clone(),
            task_id: self.task_id.clone(),
        }
    }
}
