//! `tools/list`: the registry's tools, one page (made once, at the first `tools/list`).

use serde_json::{Map, Value, json};

use crate::handler::{McpService, Reply, ServiceConfig, finish};
use crate::protocol::McpError;
use crate::protocol::request::ListToolsParams;
use crate::tools::Registry;

/// The `tools/list` result.
pub(in crate::handler) fn result(
    config: &ServiceConfig,
    tools: &Registry,
    meta: &Value,
) -> Map<String, Value> {
    let mut list = Map::new();
    list.insert("tools".into(), tools.list().clone());
    list.insert("ttlMs".into(), json!(config.list_ttl_ms));
    list.insert("cacheScope".into(), json!("public"));
    finish(list, "complete", meta)
}

impl McpService {
    pub(super) fn tools_list(&self, id: &Value, p: ListToolsParams) -> Result<Reply, McpError> {
        // One page only: we never hand out a cursor, so any cursor is not ours.
        if p.has_cursor {
            return Err(McpError::invalid_params("Unknown cursor"));
        }
        let result = self
            .tools_list
            .get_or_init(|| result(&self.config, &self.tools, &self.meta));
        Ok(self.reply(id, result.clone()))
    }
}
