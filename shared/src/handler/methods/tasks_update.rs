//! `tasks/update`: answers to a task's input requests.

use serde_json::{Map, Value};

use crate::handler::{McpService, Reply, finish};
use crate::protocol::McpError;
use crate::protocol::request::Field;
use crate::task::{TaskId, TaskRef};
use crate::tenant::Tenant;

impl McpService {
    pub(super) async fn tasks_update(
        &self,
        id: &Value,
        tenant: &Tenant,
        task_id: &TaskId,
        responses: Field<Map<String, Value>>,
    ) -> Result<Reply, McpError> {
        let responses = responses?;
        self.engine
            .update(TaskRef::new(tenant, task_id), &responses)
            .await?;
        Ok(self.reply(id, finish(Map::new(), "complete", &self.meta)))
    }
}
