//! Checks every JSON-RPC message the server sends against the official 2026-07-28 JSON
//! schemas (core + tasks extension), by the definition that fits the request that was sent.
//!
//! The schemas are the repository's copies in `tests/spec/` (origin, version, licence and
//! checksums in `tests/spec/README.md`). If they are missing the tests fail: they never skip the
//! check.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::LazyLock;

use jsonschema::Validator;
use serde_json::Value;

/// Which schema file a definition lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Doc {
    /// The core protocol schema.
    Core,
    /// The tasks extension schema (self-contained).
    Tasks,
}

impl Doc {
    fn file(self) -> &'static str {
        match self {
            Doc::Core => "mcp-2026-07-28-schema.json",
            Doc::Tasks => "ext-tasks-2026-07-28-schema.json",
        }
    }
}

/// A definition in one of the schema files.
pub type Def = (Doc, &'static str);

const RESULT_RESPONSE: Def = (Doc::Core, "JSONRPCResultResponse");
const ERROR_RESPONSE: Def = (Doc::Core, "JSONRPCErrorResponse");
const NOTIFICATION: Def = (Doc::Core, "JSONRPCNotification");
const PROGRESS_NOTIFICATION: Def = (Doc::Core, "ProgressNotification");

/// The definition of a successful result, by request method (`tools/call` is chosen by
/// `resultType`, see [`result_def`]).
const RESULTS: &[(&str, Def)] = &[
    ("server/discover", (Doc::Core, "DiscoverResult")),
    ("tools/list", (Doc::Core, "ListToolsResult")),
    ("tasks/get", (Doc::Tasks, "GetTaskResult")),
    ("tasks/update", (Doc::Tasks, "UpdateTaskResult")),
    ("tasks/cancel", (Doc::Tasks, "CancelTaskResult")),
    (
        "subscriptions/listen",
        (Doc::Core, "SubscriptionsListenResult"),
    ),
];

/// Notifications with a definition of their own, by method.
const NOTIFICATIONS: &[(&str, Def)] = &[
    ("notifications/progress", PROGRESS_NOTIFICATION),
    (
        "notifications/subscriptions/acknowledged",
        (Doc::Core, "SubscriptionsAcknowledgedNotification"),
    ),
    (
        "notifications/tasks",
        (Doc::Tasks, "TaskStatusNotification"),
    ),
];

/// `tools/call` results by `resultType`.
const TOOL_CALL_RESULTS: &[(&str, Def)] = &[
    ("complete", (Doc::Core, "CallToolResult")),
    ("input_required", (Doc::Core, "InputRequiredResult")),
    ("task", (Doc::Tasks, "CreateTaskResult")),
];

/// Error codes with a definition of their own: the whole response for the MCP-specific
/// codes, the `error` member for the JSON-RPC ones.
const WHOLE_ERRORS: &[(i64, Def)] = &[
    (-32020, (Doc::Core, "HeaderMismatchError")),
    (-32021, (Doc::Core, "MissingRequiredClientCapabilityError")),
    (-32022, (Doc::Core, "UnsupportedProtocolVersionError")),
];
const ERROR_OBJECTS: &[(i64, Def)] = &[
    (-32700, (Doc::Core, "ParseError")),
    (-32600, (Doc::Core, "InvalidRequestError")),
    (-32601, (Doc::Core, "MethodNotFoundError")),
    (-32602, (Doc::Core, "InvalidParamsError")),
    (-32603, (Doc::Core, "InternalError")),
];

/// `<workspace root>/tests/spec`, from this package's manifest dir (`functions/local`).
pub fn spec_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/spec")
}

struct Schemas {
    validators: HashMap<Def, Validator>,
}

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(Schemas::load);

impl Schemas {
    fn load() -> Schemas {
        let dir = spec_dir();
        let read = |doc: Doc| -> Value {
            let path = dir.join(doc.file());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "cannot read the official MCP schema {} ({e}). The black-box tests \
                     validate every server response against the copies in tests/spec/ \
                     (see tests/spec/README.md); they do not run without them.",
                    path.display()
                )
            });
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
        };
        let docs: HashMap<Doc, Value> = [Doc::Core, Doc::Tasks]
            .into_iter()
            .map(|d| (d, read(d)))
            .collect();
        let mut defs = vec![
            RESULT_RESPONSE,
            ERROR_RESPONSE,
            NOTIFICATION,
            PROGRESS_NOTIFICATION,
        ];
        for table in [RESULTS, TOOL_CALL_RESULTS, NOTIFICATIONS] {
            defs.extend(table.iter().map(|(_, d)| *d));
        }
        for table in [WHOLE_ERRORS, ERROR_OBJECTS] {
            defs.extend(table.iter().map(|(_, d)| *d));
        }
        let validators = defs
            .into_iter()
            .map(|def @ (doc, name)| {
                let root = &docs[&doc];
                assert!(
                    root["$defs"].get(name).is_some(),
                    "{} has no $defs/{name}",
                    doc.file()
                );
                // The whole document (so every local `#/$defs/...` resolves, against its
                // own `$id` where it has one) with the definition as its root.
                let mut schema = root.clone();
                schema["$ref"] = Value::String(format!("#/$defs/{name}"));
                let v = jsonschema::draft202012::options()
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("{}#/$defs/{name}: {e}", doc.file()));
                // Self-check: every definition used here requires some member.
                assert!(
                    !v.is_valid(&Value::Object(Default::default())),
                    "{}#/$defs/{name} accepts {{}}: the validator checks nothing",
                    doc.file()
                );
                (def, v)
            })
            .collect();
        Schemas { validators }
    }
}

/// Builds the validators now rather than at the first check (a debug build takes ~0.1 s):
/// for a measurement whose first timed request must not pay for the harness's own work.
pub fn build_validators() {
    LazyLock::force(&SCHEMAS);
}

/// Panics unless `instance` is valid against `def`; `what` says where it came from.
pub fn check(def: Def, instance: &Value, what: &str) {
    let (doc, name) = def;
    let v = &SCHEMAS.validators[&def];
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("  at {:?}: {e}", e.instance_path().as_str()))
        .collect();
    if !errors.is_empty() {
        panic!(
            "schema violation: {what} is not a valid {name} ({}#/$defs/{name})\n\
             errors:\n{}\ninstance:\n{}",
            doc.file(),
            errors.join("\n"),
            serde_json::to_string_pretty(instance).unwrap()
        );
    }
}

/// The definition for a successful result of `method`.
fn result_def(method: &str, result: &Value) -> Def {
    if method == "tools/call" {
        let rt = result["resultType"]
            .as_str()
            .unwrap_or_else(|| panic!("tools/call result without a string resultType: {result}"));
        return TOOL_CALL_RESULTS
            .iter()
            .find(|(t, _)| *t == rt)
            .map(|(_, d)| *d)
            .unwrap_or_else(|| panic!("tools/call result with unknown resultType {rt:?}"));
    }
    RESULTS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, d)| *d)
        .unwrap_or_else(|| {
            panic!(
                "no schema definition is mapped for {method} results: add it to RESULTS in \
                 tests/support/schema.rs"
            )
        })
}

/// Checks one JSON-RPC message from the server. `method` is the request's method when the
/// request body was a JSON object with one.
pub fn check_message(method: Option<&str>, msg: &Value, status: u16) {
    let what = |kind: &str| format!("{kind} (HTTP {status}) to {}", method.unwrap_or("?"));
    if let Some(m) = msg.get("method") {
        assert!(
            msg.get("id").is_none(),
            "the server sent a request ({}): servers must not send requests in 2026-07-28: {msg}",
            what("message")
        );
        let what = what("notification");
        check(NOTIFICATION, msg, &what);
        if let Some((_, def)) = NOTIFICATIONS.iter().find(|(n, _)| m == n) {
            check(*def, msg, &what);
        }
    } else if let Some(err) = msg.get("error") {
        let what = what("error response");
        check(ERROR_RESPONSE, msg, &what);
        let code = err["code"].as_i64();
        if let Some((_, def)) = WHOLE_ERRORS.iter().find(|(c, _)| Some(*c) == code) {
            check(*def, msg, &what);
        }
        if let Some((_, def)) = ERROR_OBJECTS.iter().find(|(c, _)| Some(*c) == code) {
            check(*def, err, &format!("the error of an {what}"));
        }
    } else if let Some(result) = msg.get("result") {
        let what = what("result response");
        check(RESULT_RESPONSE, msg, &what);
        // Without a request method (the body was not JSON) only the envelope is checked.
        if let Some(method) = method {
            check(
                result_def(method, result),
                result,
                &format!("the result of a {what}"),
            );
        }
    } else {
        panic!(
            "{} is not a JSON-RPC response or notification: {msg}",
            what("message")
        );
    }
}

/// Checks a whole HTTP answer (a JSON body or an SSE stream) to the request `body`.
/// Answers of other content types carry no JSON-RPC and are left alone.
pub fn check_answer(body: &[u8], status: u16, content_type: &str, text: &str) {
    let request: Option<Value> = serde_json::from_slice(body).ok();
    let method = request
        .as_ref()
        .and_then(|r| r.get("method"))
        .and_then(Value::as_str);
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/json" => {
            let msg: Value = serde_json::from_str(text).unwrap_or_else(|e| {
                panic!("HTTP {status} answer is labelled application/json but is not JSON ({e}): {text:?}")
            });
            check_message(method, &msg, status);
        }
        "text/event-stream" => {
            for data in sse_data(text) {
                let msg: Value = serde_json::from_str(&data).unwrap_or_else(|e| {
                    panic!("SSE event data is not JSON ({e}): {data:?} in {text:?}")
                });
                check_message(method, &msg, status);
            }
        }
        _ => {}
    }
}

/// The data of each event in an SSE body (multi-line data joined with `\n`).
fn sse_data(text: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        if line.is_empty() {
            events.extend(cur.take());
        } else if let Some(d) = line.strip_prefix("data:") {
            let d = d.strip_prefix(' ').unwrap_or(d);
            match &mut cur {
                Some(c) => {
                    c.push('\n');
                    c.push_str(d);
                }
                None => cur = Some(d.to_owned()),
            }
        }
    }
    events.extend(cur);
    events
}
