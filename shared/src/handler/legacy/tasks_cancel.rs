//! `tasks/cancel` (2025-11-25): the task is `cancelled` before the answer.

use serde_json::{Map, Value};

use super::legacy_task;
use crate::handler::McpService;
use crate::protocol::McpError;
use crate::task::TaskId;
use crate::task::TaskRef;
use crate::tenant::Tenant;

impl McpService {
    pub(super) async fn legacy_cancel(
        &self,
        id: TaskId,
        tenant: &Tenant,
    ) -> Result<Map<String, Value>, McpError> {
        // 2025-11-25: the task is `cancelled` before the answer (a running job stops at its
        // next check, within about half a second, and writes nothing more); a task that had
        // already ended — also in a race with this call — is -32602.
        Ok(legacy_task(
            &self
                .engine
                .cancel_at_once(TaskRef::new(tenant, &id))
                .await?,
        ))
    }
}
