//! Requests as types: each lane's methods with their parameters, decoded from the envelope's
//! `params` once.
//!
//! A parameter the client got wrong is kept as the refusal it earns (a [`Field`]) and raised
//! where the handler first needs it: the order of the checks, and so the answer to a request
//! with several faults, stays the handler's (the tasks-extension gate before a task id, the
//! `Mcp-Name` header before the arguments, ...). Refusals are `-32602`, the same words in both
//! lanes.

use std::borrow::Cow;

use http::HeaderMap;
use serde_json::{Map, Value};

use super::envelope::{progress_token, read_meta};
use super::{McpError, Method, RequestMeta, meta};

/// Most answers one `inputResponses` may carry.
pub const MAX_INPUT_RESPONSES: usize = 64;
/// Most task ids one subscription may name.
pub const MAX_SUBSCRIBED_TASKS: usize = 16;
/// The versions the legacy lane speaks, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];

/// `params`, as the envelope hands them over.
pub type Params = Map<String, Value>;

/// A parameter as sent, or the refusal it earns once the handler reads it.
pub type Field<T> = Result<T, Refusal>;

/// A refused parameter: `-32602` (HTTP 200) with this message.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal(Cow<'static, str>);

impl From<Refusal> for McpError {
    fn from(r: Refusal) -> Self {
        McpError::invalid_params(r.0)
    }
}

fn refuse(message: impl Into<Cow<'static, str>>) -> Refusal {
    Refusal(message.into())
}

/// A request of the 2026-07-28 lane.
#[derive(Debug)]
pub enum McpRequest {
    /// `server/discover`.
    ServerDiscover,
    /// `tools/list`.
    ToolsList(ListToolsParams),
    /// `tools/call`.
    ToolsCall(CallToolParams),
    /// `tasks/get`.
    TasksGet(TaskIdParams),
    /// `tasks/update`.
    TasksUpdate(UpdateTaskParams),
    /// `tasks/cancel`.
    TasksCancel(TaskIdParams),
    /// `subscriptions/listen`.
    SubscriptionsListen(ListenParams),
}

/// A request of the legacy (2025-06-18, 2025-11-25) lane.
#[derive(Debug)]
pub enum LegacyRequest {
    /// `initialize`.
    Initialize(InitializeParams),
    /// `ping`.
    Ping,
    /// `tools/list`.
    ToolsList(ListToolsParams),
    /// `tools/call`.
    ToolsCall(LegacyCallParams),
    /// `tasks/get`.
    TasksGet(TaskIdParams),
    /// `tasks/cancel`.
    TasksCancel(TaskIdParams),
    /// `tasks/result`.
    TasksResult(TaskIdParams),
    /// `tasks/list`.
    TasksList(TasksListParams),
}

/// `tools/list`, both lanes.
#[derive(Debug)]
pub struct ListToolsParams {
    /// A (non-null) `cursor` was sent: never ours, as the list is one page.
    pub has_cursor: bool,
}

/// `tools/call` (2026-07-28).
#[derive(Debug)]
pub struct CallToolParams {
    /// `name`: required, a string.
    pub name: Field<String>,
    /// `arguments`: an object; absent or `null` is the empty object.
    pub arguments: Field<Map<String, Value>>,
    /// `inputResponses`: absent, or an object of at most [`MAX_INPUT_RESPONSES`] answers.
    pub input_responses: Field<Option<Map<String, Value>>>,
    /// `requestState`: absent or `null`, or a string.
    pub request_state: Field<Option<String>>,
}

/// `tools/call` (legacy).
#[derive(Debug)]
pub struct LegacyCallParams {
    /// `name`: required, a string.
    pub name: Field<String>,
    /// `arguments`: an object; absent or `null` is the empty object.
    pub arguments: Field<Map<String, Value>>,
    /// Whether `task` asks for a task: an object; absent or `null` does not.
    pub task: Field<bool>,
    /// `_meta.progressToken`: none, a string or an integer.
    pub progress_token: Field<Option<Value>>,
}

/// `tasks/get`, `tasks/cancel` (both lanes), `tasks/result`.
#[derive(Debug)]
pub struct TaskIdParams {
    /// `taskId`: required, a string.
    pub task_id: Field<String>,
}

/// `tasks/update`.
#[derive(Debug)]
pub struct UpdateTaskParams {
    /// `taskId`: required, a string.
    pub task_id: Field<String>,
    /// `inputResponses`: required, an object of at most [`MAX_INPUT_RESPONSES`] answers.
    pub input_responses: Field<Map<String, Value>>,
}

/// `subscriptions/listen`.
#[derive(Debug)]
pub struct ListenParams {
    /// `notifications`: required, an object whose flags are booleans and whose
    /// `resourceSubscriptions` are strings.
    pub notifications: Field<Notifications>,
}

/// The `notifications` filter of `subscriptions/listen`.
#[derive(Debug)]
pub struct Notifications {
    /// `taskIds` (tasks extension), when sent: at most [`MAX_SUBSCRIBED_TASKS`] strings,
    /// without duplicates. Read only once the extension is known to be declared.
    pub task_ids: Option<Field<Vec<String>>>,
}

/// `initialize`.
#[derive(Debug)]
pub struct InitializeParams {
    /// `protocolVersion`, when it is a string.
    pub protocol_version: Option<String>,
}

/// `tasks/list` (legacy).
#[derive(Debug)]
pub struct TasksListParams {
    /// `cursor`: absent or `null`, or a string.
    pub cursor: Field<Option<String>>,
}

impl McpRequest {
    /// Decodes a 2026-07-28 request, with its `_meta` (raised after the `Mcp-Method` check).
    /// `Err` (`-32601`) only for a method this lane does not serve.
    pub fn decode(
        method: &str,
        mut params: Params,
    ) -> Result<(Self, Result<RequestMeta, McpError>), McpError> {
        let method: Method = method.parse()?;
        let meta = read_meta(&params);
        let p = &mut params;
        let request = match method {
            Method::ServerDiscover => Self::ServerDiscover,
            Method::ToolsList => Self::ToolsList(list_tools(p)),
            Method::ToolsCall => Self::ToolsCall(CallToolParams {
                name: string(p, "name", "params.name must be a string"),
                arguments: arguments(p),
                input_responses: input_responses(p),
                request_state: optional_string(p, "requestState"),
            }),
            Method::TasksGet => Self::TasksGet(task_id(p)),
            Method::TasksUpdate => Self::TasksUpdate(UpdateTaskParams {
                task_id: task_id(p).task_id,
                input_responses: input_responses(p).and_then(|r| {
                    r.ok_or_else(|| refuse("params.inputResponses must be an object"))
                }),
            }),
            Method::TasksCancel => Self::TasksCancel(task_id(p)),
            Method::SubscriptionsListen => Self::SubscriptionsListen(ListenParams {
                notifications: notifications(p),
            }),
            Method::Initialize | Method::Ping | Method::TasksResult | Method::TasksList => {
                return Err(McpError::method_not_found(method.as_str()));
            }
        };
        Ok((request, meta))
    }

    /// The method.
    pub fn method(&self) -> Method {
        match self {
            Self::ServerDiscover => Method::ServerDiscover,
            Self::ToolsList(_) => Method::ToolsList,
            Self::ToolsCall(_) => Method::ToolsCall,
            Self::TasksGet(_) => Method::TasksGet,
            Self::TasksUpdate(_) => Method::TasksUpdate,
            Self::TasksCancel(_) => Method::TasksCancel,
            Self::SubscriptionsListen(_) => Method::SubscriptionsListen,
        }
    }
}

impl LegacyRequest {
    /// Decodes a legacy request. `Err` (`-32601`) only for a method this lane does not serve.
    pub fn decode(method: &str, mut params: Params) -> Result<Self, McpError> {
        let method: Method = method.parse()?;
        let p = &mut params;
        Ok(match method {
            Method::Initialize => Self::Initialize(InitializeParams {
                protocol_version: match p.remove("protocolVersion") {
                    Some(Value::String(v)) => Some(v),
                    _ => None,
                },
            }),
            Method::Ping => Self::Ping,
            Method::ToolsList => Self::ToolsList(list_tools(p)),
            Method::ToolsCall => Self::ToolsCall(LegacyCallParams {
                name: string(p, "name", "params.name must be a string"),
                arguments: arguments(p),
                task: match p.get("task") {
                    None | Some(Value::Null) => Ok(false),
                    Some(Value::Object(_)) => Ok(true),
                    Some(_) => Err(refuse("params.task must be an object")),
                },
                progress_token: progress_token(p.get("_meta").and_then(|m| m.get("progressToken")))
                    .map_err(refuse),
            }),
            Method::TasksGet => Self::TasksGet(task_id(p)),
            Method::TasksCancel => Self::TasksCancel(task_id(p)),
            Method::TasksResult => Self::TasksResult(task_id(p)),
            Method::TasksList => Self::TasksList(TasksListParams {
                cursor: optional_string(p, "cursor"),
            }),
            Method::ServerDiscover | Method::TasksUpdate | Method::SubscriptionsListen => {
                return Err(McpError::method_not_found(method.as_str()));
            }
        })
    }

    /// The method.
    pub fn method(&self) -> Method {
        match self {
            Self::Initialize(_) => Method::Initialize,
            Self::Ping => Method::Ping,
            Self::ToolsList(_) => Method::ToolsList,
            Self::ToolsCall(_) => Method::ToolsCall,
            Self::TasksGet(_) => Method::TasksGet,
            Self::TasksCancel(_) => Method::TasksCancel,
            Self::TasksResult(_) => Method::TasksResult,
            Self::TasksList(_) => Method::TasksList,
        }
    }
}

/// Whether a request does not speak 2026-07-28 and belongs to the legacy lane: no 2026 `_meta`
/// envelope, and an `MCP-Protocol-Version` header absent or one of [`LEGACY_VERSIONS`];
/// `server/discover` never.
pub fn is_legacy(method: &str, params: &Params, headers: &HeaderMap) -> bool {
    if method == Method::ServerDiscover.as_str() {
        return false;
    }
    let has_2026_meta = params
        .get("_meta")
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .is_some();
    if has_2026_meta {
        return false;
    }
    let mut versions = headers.get_all(super::headers::MCP_PROTOCOL_VERSION).iter();
    match (versions.next(), versions.next()) {
        (None, _) => true,
        (Some(v), None) => v
            .to_str()
            .ok()
            .map(str::trim)
            .is_some_and(|v| LEGACY_VERSIONS.contains(&v)),
        _ => false,
    }
}

fn list_tools(p: &Params) -> ListToolsParams {
    ListToolsParams {
        has_cursor: p.get("cursor").is_some_and(|c| !c.is_null()),
    }
}

fn task_id(p: &mut Params) -> TaskIdParams {
    TaskIdParams {
        task_id: string(p, "taskId", "params.taskId must be a string"),
    }
}

/// A required string.
fn string(p: &mut Params, key: &str, refusal: &'static str) -> Field<String> {
    match p.remove(key) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(refuse(refusal)),
    }
}

/// A string that may be absent or `null`.
fn optional_string(p: &mut Params, key: &str) -> Field<Option<String>> {
    match p.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(refuse(format!("params.{key} must be a string"))),
    }
}

fn arguments(p: &mut Params) -> Field<Map<String, Value>> {
    match p.remove("arguments") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(a)) => Ok(a),
        Some(_) => Err(refuse("params.arguments must be an object")),
    }
}

fn input_responses(p: &mut Params) -> Field<Option<Map<String, Value>>> {
    match p.remove("inputResponses") {
        None => Ok(None),
        Some(Value::Object(r)) if r.len() <= MAX_INPUT_RESPONSES => Ok(Some(r)),
        Some(Value::Object(_)) => Err(refuse(format!(
            "At most {MAX_INPUT_RESPONSES} input responses per request"
        ))),
        Some(_) => Err(refuse("params.inputResponses must be an object")),
    }
}

fn notifications(p: &mut Params) -> Field<Notifications> {
    let Some(Value::Object(n)) = p.remove("notifications") else {
        return Err(refuse("params.notifications must be an object"));
    };
    for key in [
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
    ] {
        if n.get(key).is_some_and(|v| !v.is_boolean()) {
            return Err(refuse(format!(
                "params.notifications.{key} must be a boolean"
            )));
        }
    }
    if let Some(v) = n.get("resourceSubscriptions")
        && !v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err(refuse(
            "params.notifications.resourceSubscriptions must be an array of strings",
        ));
    }
    Ok(Notifications {
        task_ids: n.get("taskIds").map(task_ids),
    })
}

fn task_ids(ids: &Value) -> Field<Vec<String>> {
    let not_strings = || refuse("params.notifications.taskIds must be an array of strings");
    let ids = ids.as_array().ok_or_else(not_strings)?;
    if ids.len() > MAX_SUBSCRIBED_TASKS {
        return Err(refuse(format!(
            "At most {MAX_SUBSCRIBED_TASKS} task ids per subscription"
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        let id = id.as_str().ok_or_else(not_strings)?;
        if !out.iter().any(|o| o == id) {
            out.push(id.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
