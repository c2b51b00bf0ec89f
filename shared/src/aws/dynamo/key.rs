//! Keys: the table key of a task and of the items beside it, the index shard, and where a
//! listing of the `quiet` index stopped.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::{ATTR_PK, ATTR_QUIET, ATTR_SHARD, SHARDS};
use crate::quota::SlotKey;
use crate::task::{TaskId, TaskKey, TaskRef};
use crate::tenant::Tenant;

/// The table key of a task: `{tenant}#{taskId}`, with `%` and `#` escaped in the tenant so the
/// first `#` always ends it.
pub fn pk(id: TaskRef<'_>) -> String {
    pk_of(id.tenant, id.task_id)
}

/// [`pk`] of a task id that need not be one (where a listing starts after).
pub(super) fn pk_of(tenant: &Tenant, task_id: &str) -> String {
    let mut k = tenant_prefix(tenant);
    k.push_str(task_id);
    k
}

/// The `tenant_active` partition key of a tenant: the start of its tasks' [`pk`]s, the escaped
/// tenant and `#` (so it is never empty, and two tenants never share it).
pub fn tenant_prefix(tenant: &Tenant) -> String {
    prefix_of(tenant)
}

/// [`tenant_prefix`] of a name: escaped, then `#`.
fn prefix_of(name: &str) -> String {
    let mut k = String::with_capacity(name.len() + 47);
    for c in name.chars() {
        match c {
            '%' => k.push_str("%25"),
            '#' => k.push_str("%23"),
            c => k.push(c),
        }
    }
    k.push('#');
    k
}

/// Inverse of [`pk`].
pub(super) fn split_pk(k: &str) -> Option<TaskKey> {
    let (tenant, task_id) = k.split_once('#')?;
    Some(TaskKey::new(
        Tenant::from(tenant.replace("%23", "#").replace("%25", "%")),
        TaskId::parse(task_id)?,
    ))
}

/// The index shard of a key: FNV-1a, stable across processes and releases.
pub(super) fn shard_of(pk: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pk.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(SHARDS)) as u32
}

/// The key of a [`SlotKey`]'s item (a tenant's running jobs, its open streams, all streams):
/// `#runs` after the key's escaped prefix, where a task key has its task id (task ids never
/// start with `#`); for a tenant's running jobs, the tenant's key prefix.
pub(super) fn runs_key(slot: &SlotKey) -> String {
    let mut k = prefix_of(slot.as_str());
    k.push_str("#runs");
    k
}

/// The key of a tenant's places item (its active tasks, counted): `#places` after the
/// tenant's key prefix, like [`runs_key`].
pub(super) fn places_key(tenant: &Tenant) -> String {
    let mut k = tenant_prefix(tenant);
    k.push_str("#places");
    k
}

/// The key of a task's arguments item: the tenant's key prefix, `#args#`, the task id. Task
/// ids never start with `#`, so no task key (nor the running-jobs key) is ever one of these.
pub fn arguments_key(id: TaskRef<'_>) -> String {
    let mut k = tenant_prefix(id.tenant);
    k.push_str("#args#");
    k.push_str(id.task_id);
    k
}

/// Where a listing of the `quiet` index stopped: the last key it listed.
pub(super) struct QuietCursor {
    pub(super) shard: u32,
    pub(super) mark: u64,
    pub(super) pk: String,
}

impl QuietCursor {
    pub(super) fn encode(&self) -> String {
        format!("{}:{}:{}", self.shard, self.mark, self.pk)
    }

    /// `None` for anything [`QuietCursor::encode`] did not write (the listing starts over).
    pub(super) fn parse(s: &str) -> Option<Self> {
        let mut parts = s.splitn(3, ':');
        let shard = parts.next()?.parse().ok().filter(|s| *s < SHARDS)?;
        let mark = parts.next()?.parse().ok()?;
        let pk = parts.next().filter(|p| !p.is_empty())?.to_owned();
        Some(Self { shard, mark, pk })
    }

    /// The index's `ExclusiveStartKey` for continuing after this key.
    pub(super) fn start_key(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                ATTR_SHARD.to_owned(),
                AttributeValue::N(self.shard.to_string()),
            ),
            (
                ATTR_QUIET.to_owned(),
                AttributeValue::N(self.mark.to_string()),
            ),
            (ATTR_PK.to_owned(), AttributeValue::S(self.pk.clone())),
        ])
    }
}
