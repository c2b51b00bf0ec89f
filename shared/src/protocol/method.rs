//! Method names: the one place the wire spells them. [`Method`] is every request method a
//! client may send (either lane); the constants name them, and the notifications and requests
//! this server sends, for clients and tests.

use std::str::FromStr;

use serde_json::{Map, Value};

use super::McpError;

/// A request method this server knows, in either lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `initialize` (legacy lane).
    Initialize,
    /// `ping` (legacy lane).
    Ping,
    /// `server/discover`.
    ServerDiscover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall,
    /// `tasks/get`.
    TasksGet,
    /// `tasks/update` (2026-07-28 lane).
    TasksUpdate,
    /// `tasks/cancel`.
    TasksCancel,
    /// `tasks/result` (legacy lane).
    TasksResult,
    /// `tasks/list` (legacy lane).
    TasksList,
    /// `subscriptions/listen` (2026-07-28 lane).
    SubscriptionsListen,
}

impl Method {
    /// Every method.
    pub const ALL: [Method; 11] = [
        Method::Initialize,
        Method::Ping,
        Method::ServerDiscover,
        Method::ToolsList,
        Method::ToolsCall,
        Method::TasksGet,
        Method::TasksUpdate,
        Method::TasksCancel,
        Method::TasksResult,
        Method::TasksList,
        Method::SubscriptionsListen,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Initialize => "initialize",
            Method::Ping => "ping",
            Method::ServerDiscover => "server/discover",
            Method::ToolsList => "tools/list",
            Method::ToolsCall => "tools/call",
            Method::TasksGet => "tasks/get",
            Method::TasksUpdate => "tasks/update",
            Method::TasksCancel => "tasks/cancel",
            Method::TasksResult => "tasks/result",
            Method::TasksList => "tasks/list",
            Method::SubscriptionsListen => "subscriptions/listen",
        }
    }

    /// A `tasks/*` method: all a tasks-only endpoint serves.
    pub fn is_tasks(self) -> bool {
        matches!(
            self,
            Method::TasksGet
                | Method::TasksUpdate
                | Method::TasksCancel
                | Method::TasksResult
                | Method::TasksList
        )
    }
}

impl FromStr for Method {
    /// `-32601`, echoing the name.
    type Err = McpError;

    fn from_str(name: &str) -> Result<Self, McpError> {
        Method::ALL
            .into_iter()
            .find(|m| m.as_str() == name)
            .ok_or_else(|| McpError::method_not_found(name))
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The tools a server offers.
pub const TOOLS_LIST: &str = Method::ToolsList.as_str();
/// Call one tool.
pub const TOOLS_CALL: &str = Method::ToolsCall.as_str();
/// Read a task (tasks extension).
pub const TASKS_GET: &str = Method::TasksGet.as_str();
/// Answer a task's input requests (tasks extension).
pub const TASKS_UPDATE: &str = Method::TasksUpdate.as_str();
/// Cancel a task (tasks extension).
pub const TASKS_CANCEL: &str = Method::TasksCancel.as_str();
/// Progress of a request that carries a `progressToken` (a notification).
pub const PROGRESS: &str = "notifications/progress";
/// A question for the user: the input request a form-mode client answers.
pub const ELICITATION_CREATE: &str = InputMethod::Elicitation.as_str();

/// The requests a server may send a client for a task's input (`input_required`), each
/// answered in `tasks/update`'s `inputResponses` (or a retried `tools/call`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputMethod {
    /// `elicitation/create`: a question for the user.
    Elicitation,
    /// `sampling/createMessage`: a completion from the client's model.
    Sampling,
    /// `roots/list`: the client's roots.
    Roots,
}

impl InputMethod {
    /// Every input method.
    pub const ALL: [InputMethod; 3] = [Self::Elicitation, Self::Sampling, Self::Roots];

    /// Its wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation/create",
            Self::Sampling => "sampling/createMessage",
            Self::Roots => "roots/list",
        }
    }

    /// The method a wire name names, if it is an input method.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// The client capability a client must declare to be asked it.
    pub const fn capability(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }

    /// Checks the shape of `answer`, the answer under `key` to a request of this method: an
    /// elicitation answer needs a known `action` and, when accepted, object `content`; a
    /// roots answer needs a `roots` array. The message names the key, never the answer.
    pub fn check_answer(self, key: &str, answer: &Map<String, Value>) -> Result<(), String> {
        match self {
            Self::Elicitation => match answer.get("action").and_then(Value::as_str) {
                Some("accept") if answer.get("content").is_some_and(|c| !c.is_object()) => {
                    Err(format!("inputResponses[{key:?}].content must be an object"))
                }
                Some("accept" | "decline" | "cancel") => Ok(()),
                _ => Err(format!(
                    "inputResponses[{key:?}].action must be accept, decline or cancel"
                )),
            },
            Self::Roots if !answer.get("roots").is_some_and(Value::is_array) => {
                Err(format!("inputResponses[{key:?}].roots must be an array"))
            }
            Self::Sampling | Self::Roots => Ok(()),
        }
    }
}
/// The first message of a `subscriptions/listen` stream.
pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// A subscribed task as it is now.
pub const TASKS_CHANGED: &str = "notifications/tasks";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_32601() {
        for m in Method::ALL {
            assert_eq!(m.as_str().parse::<Method>(), Ok(m));
        }
        let e = "Tools/List".parse::<Method>().unwrap_err();
        assert_eq!((e.status, e.error.code), (404, -32601));
        assert_eq!(e.error.message, "Method not found: Tools/List");
        let tasks: Vec<_> = Method::ALL.into_iter().filter(|m| m.is_tasks()).collect();
        assert!(tasks.iter().all(|m| m.as_str().starts_with("tasks/")));
        assert_eq!(tasks.len(), 5);
    }
}
