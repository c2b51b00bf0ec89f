//! `initialize` (2025): answered without a session (see the lane's documentation).

use serde_json::{Map, Value, json};

use crate::handler::McpService;
use crate::protocol::request::{InitializeParams, LEGACY_VERSIONS};

impl McpService {
    pub(super) fn legacy_initialize(&self, p: InitializeParams) -> Map<String, Value> {
        let requested = p.protocol_version.as_deref().unwrap_or("");
        let version = LEGACY_VERSIONS
            .iter()
            .find(|v| **v == requested)
            .copied()
            .unwrap_or(LEGACY_VERSIONS[0]);
        let mut m = Map::new();
        m.insert("protocolVersion".into(), json!(version));
        let mut caps = json!({"tools": {"listChanged": false}});
        if version == "2025-11-25" {
            caps["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        m.insert("capabilities".into(), caps);
        m.insert(
            "serverInfo".into(),
            json!({"name": self.config.server_name, "version": self.config.server_version}),
        );
        m.insert(
            "instructions".into(),
            json!(
                "Long-running tools can run as tasks (params.task): poll tasks/get, read the \
                 result with tasks/result, stop with tasks/cancel. This server keeps no \
                 session: every request stands alone."
            ),
        );
        m
    }
}
