//! `tasks/cancel`: asks the caller's task to stop.

use serde_json::{Map, Value};

use crate::handler::{McpService, Reply, finish};
use crate::protocol::McpError;
use crate::task::{TaskId, TaskRef};
use crate::tenant::Tenant;

impl McpService {
    pub(super) async fn tasks_cancel(
        &self,
        id: &Value,
        tenant: &Tenant,
        task_id: &TaskId,
    ) -> Result<Reply, McpError> {
        self.engine.cancel(TaskRef::new(tenant, task_id)).await?;
        Ok(self.reply(id, finish(Map::new(), "complete", &self.meta)))
    }
}
