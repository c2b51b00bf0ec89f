//! `tasks/list` (2025-11-25): the caller's active tasks, a page at a time.

use serde_json::{Map, Value, json};

use super::legacy_task;
use crate::handler::McpService;
use crate::protocol::McpError;
use crate::tenant::Tenant;

/// Largest `tasks/list` page.
const LIST_PAGE: usize = 100;

impl McpService {
    /// `tasks/list`: the caller's active tasks, oldest first, in pages of [`LIST_PAGE`]. The
    /// cursor is opaque to the client (see [`list_cursor`]); one that is not ours is `-32602`.
    /// A cursor stays good when its task finishes meanwhile: the listing continues after it.
    pub(super) async fn legacy_list(
        &self,
        cursor: Option<String>,
        tenant: &Tenant,
    ) -> Result<Map<String, Value>, McpError> {
        let after = match cursor {
            None => None,
            Some(c) => Some(
                cursor_position(&c).ok_or_else(|| McpError::invalid_params("Invalid cursor"))?,
            ),
        };
        let page = self
            .engine
            .list_active_of(tenant, after.as_deref(), LIST_PAGE)
            .await?;
        let mut m = Map::new();
        m.insert(
            "tasks".into(),
            page.tasks
                .iter()
                .map(|t| Value::Object(legacy_task(t)))
                .collect(),
        );
        if let Some(next) = &page.next {
            m.insert("nextCursor".into(), json!(list_cursor(next)));
        }
        Ok(m)
    }
}

/// Marks a `tasks/list` cursor (and versions its format).
const CURSOR_TAG: &str = "tasks/list:v1:";

/// The `tasks/list` cursor that continues after task `after`: base64url of a tag and the task
/// id. Opaque to clients; it names only a position in the caller's own listing, so a forged
/// one can show nothing a fresh listing would not.
fn list_cursor(after: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{CURSOR_TAG}{after}"))
}

/// The task id a `tasks/list` cursor continues after, or `None` when it is not one of ours.
fn cursor_position(cursor: &str) -> Option<String> {
    use base64::Engine as _;
    if cursor.len() > 256 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let id = std::str::from_utf8(&bytes).ok()?.strip_prefix(CURSOR_TAG)?;
    crate::task::is_valid_task_id(id).then(|| id.to_owned())
}
