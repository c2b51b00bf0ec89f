//! The request parameters both lanes (2026-07-28 and the legacy 2025-11-25) read, typed once:
//! each accessor says what it accepts and how it refuses (`-32602`, the same words in both
//! lanes).

use serde_json::{Map, Value};

use super::McpError;

/// Most answers one `inputResponses` may carry.
pub const MAX_INPUT_RESPONSES: usize = 64;

/// `params`, as the envelope hands them over.
pub type Params = Map<String, Value>;

/// `params.name` of `tools/call`: required, a string.
pub fn tool_name(params: &Params) -> Result<&str, McpError> {
    match params.get("name") {
        Some(Value::String(n)) => Ok(n),
        _ => Err(McpError::invalid_params("params.name must be a string")),
    }
}

/// `params.taskId` of the task methods: required, a string.
pub fn task_id(params: &Params) -> Result<&str, McpError> {
    match params.get("taskId") {
        Some(Value::String(t)) => Ok(t),
        _ => Err(McpError::invalid_params("params.taskId must be a string")),
    }
}

/// `params.arguments` of `tools/call`: an object; absent or `null` is the empty object.
pub fn arguments(params: &Params) -> Result<Map<String, Value>, McpError> {
    match params.get("arguments") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(a)) => Ok(a.clone()),
        Some(_) => Err(McpError::invalid_params(
            "params.arguments must be an object",
        )),
    }
}

/// `params.inputResponses`: absent (`None`), or an object of at most
/// [`MAX_INPUT_RESPONSES`] answers.
pub fn input_responses(params: &Params) -> Result<Option<&Map<String, Value>>, McpError> {
    match params.get("inputResponses") {
        None => Ok(None),
        Some(Value::Object(r)) if r.len() <= MAX_INPUT_RESPONSES => Ok(Some(r)),
        Some(Value::Object(_)) => Err(McpError::invalid_params(format!(
            "At most {MAX_INPUT_RESPONSES} input responses per request"
        ))),
        Some(_) => Err(McpError::invalid_params(
            "params.inputResponses must be an object",
        )),
    }
}

/// `params.inputResponses` where it is required (`tasks/update`).
pub fn required_input_responses(params: &Params) -> Result<&Map<String, Value>, McpError> {
    input_responses(params)?
        .ok_or_else(|| McpError::invalid_params("params.inputResponses must be an object"))
}

/// `params.requestState`: absent or `null` (`None`), or a string.
pub fn request_state(params: &Params) -> Result<Option<&str>, McpError> {
    match params.get("requestState") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(McpError::invalid_params(
            "params.requestState must be a string",
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn params(v: Value) -> Params {
        v.as_object().unwrap().clone()
    }

    fn refusal<T: std::fmt::Debug>(r: Result<T, McpError>) -> String {
        let e = r.unwrap_err();
        assert_eq!(e.error.code, -32602);
        e.error.message
    }

    #[test]
    fn each_parameter_is_accepted_or_refused_in_one_way() {
        let p = params(json!({"name": "wait", "taskId": "tsk_1", "requestState": null}));
        assert_eq!(tool_name(&p).unwrap(), "wait");
        assert_eq!(task_id(&p).unwrap(), "tsk_1");
        assert_eq!(arguments(&p).unwrap(), Map::new());
        assert_eq!(input_responses(&p).unwrap(), None);
        assert_eq!(request_state(&p).unwrap(), None);
        let bad = params(json!({
            "name": 1, "taskId": ["x"], "arguments": "a", "inputResponses": [], "requestState": 2
        }));
        assert_eq!(refusal(tool_name(&bad)), "params.name must be a string");
        assert_eq!(refusal(task_id(&bad)), "params.taskId must be a string");
        assert_eq!(
            refusal(arguments(&bad)),
            "params.arguments must be an object"
        );
        assert_eq!(
            refusal(input_responses(&bad)),
            "params.inputResponses must be an object"
        );
        assert_eq!(
            refusal(required_input_responses(&p)),
            "params.inputResponses must be an object"
        );
        assert_eq!(
            refusal(request_state(&bad)),
            "params.requestState must be a string"
        );
        let many: Map<String, Value> = (0..=MAX_INPUT_RESPONSES)
            .map(|i| (format!("k{i}"), json!({})))
            .collect();
        let p = params(json!({ "inputResponses": many }));
        assert!(refusal(input_responses(&p)).starts_with("At most 64"));
    }
}
