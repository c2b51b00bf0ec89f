//! `tasks/get` (2025-11-25): the caller's task as a 2025-11-25 `Task`.

use serde_json::{Map, Value};

use super::legacy_task;
use crate::handler::McpService;
use crate::protocol::McpError;
use crate::task::TaskId;
use crate::task::TaskRef;
use crate::tenant::Tenant;

impl McpService {
    pub(super) async fn legacy_get(
        &self,
        id: TaskId,
        tenant: &Tenant,
    ) -> Result<Map<String, Value>, McpError> {
        Ok(legacy_task(
            &self.engine.get(TaskRef::new(tenant, &id)).await?,
        ))
    }
}
