use http::HeaderValue;
use serde_json::json;

use super::*;

fn params(v: Value) -> Params {
    v.as_object().unwrap().clone()
}

fn refusal<T: std::fmt::Debug>(r: Field<T>) -> String {
    let e = McpError::from(r.unwrap_err());
    assert_eq!((e.status, e.error.code), (200, -32602));
    e.error.message
}

fn call(v: Value) -> CallToolParams {
    match McpRequest::decode("tools/call", params(v)).unwrap().0 {
        McpRequest::ToolsCall(p) => p,
        other => panic!("{other:?}"),
    }
}

fn legacy_call(v: Value) -> LegacyCallParams {
    match LegacyRequest::decode("tools/call", params(v)).unwrap() {
        LegacyRequest::ToolsCall(p) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_parameter_is_accepted_or_refused_in_one_way() {
    let p = call(json!({"name": "wait", "requestState": null}));
    assert_eq!(p.name.unwrap(), "wait");
    assert_eq!(p.arguments.unwrap(), Map::new());
    assert_eq!(p.input_responses.unwrap(), None);
    assert_eq!(p.request_state.unwrap(), None);
    let bad = call(json!({"name": 1, "arguments": "a", "inputResponses": [], "requestState": 2}));
    assert_eq!(refusal(bad.name), "params.name must be a string");
    assert_eq!(refusal(bad.arguments), "params.arguments must be an object");
    assert_eq!(
        refusal(bad.input_responses),
        "params.inputResponses must be an object"
    );
    assert_eq!(
        refusal(bad.request_state),
        "params.requestState must be a string"
    );
    let many: Map<String, Value> = (0..=MAX_INPUT_RESPONSES)
        .map(|i| (format!("k{i}"), json!({})))
        .collect();
    let p = call(json!({ "inputResponses": many }));
    assert!(refusal(p.input_responses).starts_with("At most 64"));
    let McpRequest::TasksUpdate(u) =
        McpRequest::decode("tasks/update", params(json!({"taskId": ["x"]})))
            .unwrap()
            .0
    else {
        panic!("tasks/update");
    };
    assert_eq!(refusal(u.task_id), "params.taskId must be a string");
    assert_eq!(
        refusal(u.input_responses),
        "params.inputResponses must be an object"
    );
}

#[test]
fn the_legacy_call_reads_its_own_parameters() {
    let p = legacy_call(json!({"name": "wait", "task": {}, "_meta": {"progressToken": 3}}));
    assert!(p.task.unwrap());
    assert_eq!(p.progress_token.unwrap(), Some(json!(3)));
    let p = legacy_call(json!({"task": 5, "_meta": {"progressToken": 1.5}}));
    assert_eq!(refusal(p.task), "params.task must be an object");
    assert_eq!(
        refusal(p.progress_token),
        "_meta.progressToken must be a string or an integer"
    );
    assert_eq!(
        legacy_call(json!({"_meta": 5})).progress_token.unwrap(),
        None
    );
}

#[test]
fn each_lane_serves_its_own_methods() {
    for (m, current, legacy) in [
        ("server/discover", true, false),
        ("subscriptions/listen", true, false),
        ("tasks/update", true, false),
        ("initialize", false, true),
        ("tasks/result", false, true),
        ("tasks/get", true, true),
        ("nope", false, false),
    ] {
        let e = McpRequest::decode(m, Map::new()).err();
        assert_eq!(e.is_none(), current, "{m}");
        let e = LegacyRequest::decode(m, Map::new()).err();
        assert_eq!(e.is_none(), legacy, "{m}");
        if let Some(e) = e {
            assert_eq!(e.error.message, format!("Method not found: {m}"));
        }
    }
}

#[test]
fn task_ids_are_checked_and_deduplicated() {
    let listen = |n: Value| match McpRequest::decode(
        "subscriptions/listen",
        params(json!({"notifications": n})),
    )
    .unwrap()
    .0
    {
        McpRequest::SubscriptionsListen(p) => p.notifications,
        other => panic!("{other:?}"),
    };
    let ids = listen(json!({"taskIds": ["a", "b", "a"]}))
        .unwrap()
        .task_ids;
    assert_eq!(ids.unwrap().unwrap(), ["a", "b"]);
    assert!(listen(json!({})).unwrap().task_ids.is_none());
    assert_eq!(
        refusal(listen(json!({"toolsListChanged": 1, "taskIds": 5}))),
        "params.notifications.toolsListChanged must be a boolean"
    );
    let too_many: Vec<String> = (0..=MAX_SUBSCRIBED_TASKS).map(|i| i.to_string()).collect();
    let ids = listen(json!({"taskIds": too_many}))
        .unwrap()
        .task_ids
        .unwrap();
    assert!(refusal(ids).starts_with("At most 16"));
}

#[test]
fn the_lane_is_chosen_by_meta_and_header() {
    let mut h = HeaderMap::new();
    let none = Map::new();
    let v2026 = params(json!({"_meta": {meta::PROTOCOL_VERSION: "2026-07-28"}}));
    assert!(is_legacy("tools/list", &none, &h));
    assert!(!is_legacy("server/discover", &none, &h));
    assert!(!is_legacy("tools/list", &v2026, &h));
    h.insert(
        "mcp-protocol-version",
        HeaderValue::from_static(" 2025-06-18 "),
    );
    assert!(is_legacy("tools/list", &none, &h));
    h.append(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-06-18"),
    );
    assert!(!is_legacy("tools/list", &none, &h));
}
