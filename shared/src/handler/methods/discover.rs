//! `server/discover`: what the server speaks and offers, the same for every caller (made once,
//! when the service is built).

use serde_json::{Map, Value, json};

use crate::handler::{ServiceConfig, finish};
use crate::protocol::{SUPPORTED_VERSIONS, TASKS_EXTENSION};

/// The `server/discover` result.
pub(in crate::handler) fn result(config: &ServiceConfig, meta: &Value) -> Map<String, Value> {
    let mut discover = Map::new();
    discover.insert("supportedVersions".into(), json!(SUPPORTED_VERSIONS));
    discover.insert(
        "capabilities".into(),
        json!({"tools": {}, "extensions": {TASKS_EXTENSION: {}}}),
    );
    discover.insert(
        "instructions".into(),
        json!(
            "Long-running tools return a durable task: poll tasks/get (honour pollIntervalMs), \
               answer input requests with tasks/update, stop with tasks/cancel."
        ),
    );
    discover.insert("ttlMs".into(), json!(config.list_ttl_ms));
    discover.insert("cacheScope".into(), json!("public"));
    finish(discover, "complete", meta)
}
