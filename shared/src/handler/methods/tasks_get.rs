//! `tasks/get`: the caller's task as it is now.

use serde_json::Value;

use crate::handler::{McpService, Reply, ReplyBody};
use crate::protocol::McpError;
use crate::task::{TaskId, TaskRef};
use crate::tenant::Tenant;

impl McpService {
    pub(super) async fn tasks_get(
        &self,
        id: &Value,
        tenant: &Tenant,
        task_id: &TaskId,
    ) -> Result<Reply, McpError> {
        let task = self.engine.get(TaskRef::new(tenant, task_id)).await?;
        // Written straight from the record (the most repeated request).
        let answer = crate::task::GetAnswer {
            id,
            task: &task,
            meta: &self.meta,
        };
        let body = serde_json::to_vec(&answer).map_err(|_| McpError::internal())?;
        Ok(Reply {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Text("application/json", body),
        })
    }
}
