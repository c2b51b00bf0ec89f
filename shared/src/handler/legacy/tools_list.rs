//! `tools/list` (2025): the registry's tools, each with its `execution.taskSupport`.

use serde_json::{Map, Value, json};

use crate::handler::McpService;
use crate::protocol::McpError;
use crate::protocol::request::ListToolsParams;
use crate::tools::Policy;

/// `execution.taskSupport` for a policy.
fn task_support(policy: Policy) -> &'static str {
    match policy {
        Policy::Sync => "forbidden",
        Policy::Optional => "optional",
        Policy::TaskOnly => "required",
    }
}

impl McpService {
    pub(super) fn legacy_tools_list(
        &self,
        p: ListToolsParams,
    ) -> Result<Map<String, Value>, McpError> {
        if p.has_cursor {
            return Err(McpError::invalid_params("Unknown cursor"));
        }
        let names = self.tools.names();
        let tools: Vec<Value> = self
            .tools
            .list()
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or(&[])
            .iter()
            .zip(names)
            .map(|(entry, name)| {
                let mut e = entry.clone();
                if let Some(t) = self.tools.get(name) {
                    e["execution"] = json!({"taskSupport": task_support(t.def().policy)});
                }
                e
            })
            .collect();
        let mut m = Map::new();
        m.insert("tools".into(), Value::Array(tools));
        Ok(m)
    }
}
