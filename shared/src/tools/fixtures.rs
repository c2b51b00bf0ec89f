//! The fixture tools the official MCP conformance suite expects (`--fixtures conformance`),
//! as described in `docs/upstream/FIXTURES.md`. Each is an ordinary step-wise job, so the
//! suite exercises the same engine, worker and MRTR code paths as the built-in tools.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Policy, Preflight, Tool, ToolDef, object_schema};
use crate::jobs::{
    JobContext, JobError, Step, accepted, elicitation, text_result, tool_error_result,
};
use crate::protocol::{ErrorObject, INTERNAL_ERROR, McpError};

/// A 1x1 transparent PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A tiny valid WAV (44-byte header, two silent 8-bit samples).
const WAV_TINY: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQIAAACAgA==";

type StepFn = fn(&JobContext) -> Result<Step, JobError>;
type PreflightFn = fn(&JobContext) -> Result<Preflight, JobError>;

/// A tool whose every step is a plain function (enough for most fixtures).
struct FnTool {
    def: ToolDef,
    step: StepFn,
    preflight: Option<PreflightFn>,
}

#[async_trait]
impl Tool for FnTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        match self.preflight {
            Some(f) => f(ctx),
            None => Ok(Preflight::Proceed(Value::Null)),
        }
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        (self.step)(ctx)
    }
}

fn tool(
    name: &'static str,
    description: &'static str,
    input_schema: Value,
    policy: Policy,
    step: StepFn,
) -> Arc<dyn Tool> {
    Arc::new(FnTool {
        def: ToolDef {
            name,
            description,
            input_schema,
            policy,
        },
        step,
        preflight: None,
    })
}

fn empty() -> Value {
    json!({"type": "object", "properties": {}})
}

fn done(v: Value) -> Result<Step, JobError> {
    Ok(Step::Done(v))
}

fn ask(pairs: Vec<(&str, Value)>) -> Result<Step, JobError> {
    Ok(Step::NeedInput(
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    ))
}

fn name_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
}

/// A step that waits `ms` once (its checkpoint records that it did), then runs `then`.
/// Sleeping inside a step is fine: cancellation drops the step's future.
struct Delayed {
    def: ToolDef,
    wait_ms: fn(&JobContext) -> Result<u64, JobError>,
    then: StepFn,
}

#[async_trait]
impl Tool for Delayed {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        (self.wait_ms)(ctx)?;
        Ok(Preflight::Proceed(Value::Null))
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        #[derive(Deserialize, Default)]
        struct Cp {
            waited_ms: u64,
        }
        let total = (self.wait_ms)(ctx)?;
        let cp: Cp = ctx.checkpoint();
        if cp.waited_ms < total {
            // Wait in slices of at most a second so a crash loses little.
            let slice = (total - cp.waited_ms).min(1000);
            tokio::time::sleep(Duration::from_millis(slice)).await;
            let waited = cp.waited_ms + slice;
            ctx.progress(
                waited as f64,
                Some(total as f64),
                format!("Waited {waited} of {total} ms"),
            );
            return Ok(Step::Continue(json!({"waited_ms": waited})));
        }
        (self.then)(ctx)
    }
}

#[derive(Deserialize)]
struct SlowArgs {
    seconds: f64,
    #[serde(default)]
    label: String,
}

fn slow_wait(ctx: &JobContext) -> Result<u64, JobError> {
    let a: SlowArgs = ctx.args()?;
    if !(0.0..=86_400.0).contains(&a.seconds) {
        return Err(JobError::InvalidParams(
            "seconds must be within 0..=86400".into(),
        ));
    }
    Ok((a.seconds * 1000.0) as u64)
}

fn one_second(_: &JobContext) -> Result<u64, JobError> {
    Ok(1000)
}

fn no_wait(_: &JobContext) -> Result<u64, JobError> {
    Ok(0)
}

fn delayed(
    name: &'static str,
    description: &'static str,
    input_schema: Value,
    policy: Policy,
    wait_ms: fn(&JobContext) -> Result<u64, JobError>,
    then: StepFn,
) -> Arc<dyn Tool> {
    Arc::new(Delayed {
        def: ToolDef {
            name,
            description,
            input_schema,
            policy,
        },
        wait_ms,
        then,
    })
}

/// The conformance fixture set, in the order the suite needs (`test_simple_text` first).
pub fn conformance_tools() -> Vec<Arc<dyn Tool>> {
    let mut tools = vec![
        tool(
            "test_simple_text",
            "Returns a fixed text.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| done(text_result("This is a simple text response for testing.")),
        ),
        tool(
            "test_image_content",
            "Returns a 1x1 PNG.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| {
                done(
                    json!({"content": [{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]}),
                )
            },
        ),
        tool(
            "test_audio_content",
            "Returns a tiny WAV.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| {
                done(
                    json!({"content": [{"type": "audio", "data": WAV_TINY, "mimeType": "audio/wav"}]}),
                )
            },
        ),
        tool(
            "test_embedded_resource",
            "Returns an embedded resource.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| {
                done(json!({"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain",
                "text": "This is an embedded resource content."}}]}))
            },
        ),
        tool(
            "test_multiple_content_types",
            "Returns text, image and resource.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| {
                done(json!({"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                    "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}]}))
            },
        ),
        tool(
            "test_error_handling",
            "Always returns a tool error.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| {
                done(tool_error_result(
                    "This tool intentionally returns an error for testing",
                ))
            },
        ),
        Arc::new(ProgressFixture::def()),
        tool(
            "json_schema_2020_12_tool",
            "Advertises a JSON Schema 2020-12 input schema.",
            json!({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
                "$defs":{"address":{"$anchor":"addressDef","type":"object",
                  "properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
                "properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},
                  "contactMethod":{"type":"string","enum":["phone","email"]},
                  "phone":{"type":"string"},"email":{"type":"string"}},
                "allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],
                "if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},
                "then":{"required":["phone"]},"else":{"required":["email"]},
                "additionalProperties":false}),
            Policy::Sync,
            |_| done(text_result("ok")),
        ),
        tool(
            "test_custom_header",
            "Echoes a region mirrored in the Mcp-Param-Region header.",
            object_schema(
                json!({"region": {"type": "string", "x-mcp-header": "Region"}}),
                &[],
            ),
            Policy::Sync,
            |ctx| {
                let region = ctx
                    .arguments()
                    .get("region")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                done(text_result(format!("region={region}")))
            },
        ),
        tool(
            "test_missing_capability",
            "Needs the sampling capability.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| {
                if !ctx.client_declares("sampling") {
                    let e = McpError::missing_capability(
                        "This tool needs the sampling capability",
                        json!({"sampling": {}}),
                    );
                    return Err(JobError::Protocol(e.error));
                }
                done(text_result("Success"))
            },
        ),
        tool(
            "test_streaming_elicitation",
            "Completes with text.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| done(text_result("Streaming elicitation fixture done")),
        ),
        tool(
            "test_logging_tool",
            "Would log only when a log level is requested.",
            json!({"type": "object"}),
            Policy::Sync,
            |_| done(text_result("Logging fixture done")),
        ),
    ];
    tools.extend(mrtr_fixtures());
    tools.extend(task_fixtures());
    tools
}

/// SEP-2322 input-required fixtures (synchronous, multi-round).
fn mrtr_fixtures() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(
            "test_input_required_result_elicitation",
            "Asks for a name.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| match ctx.input("user_name") {
                None => ask(vec![(
                    "user_name",
                    elicitation("What is your name?", name_schema()),
                )]),
                Some(a) => match accepted(a)? {
                    Some(c) => match c.get("name").and_then(Value::as_str) {
                        Some(n) => done(text_result(format!("Hello, {n}!"))),
                        None => Err(JobError::InvalidParams(
                            "user_name.content.name must be a string".into(),
                        )),
                    },
                    None => done(text_result("No name given.")),
                },
            },
        ),
        tool(
            "test_input_required_result_sampling",
            "Asks the client's model a question.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| match ctx.input("capital_question") {
                None => ask(vec![(
                    "capital_question",
                    json!({"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}],
                    "maxTokens": 100}}),
                )]),
                Some(a) => {
                    let text = a
                        .get("content")
                        .and_then(|c| c.get("text"))
                        .and_then(Value::as_str)
                        .unwrap_or("(no text)");
                    done(text_result(format!("The model answered: {text}")))
                }
            },
        ),
        tool(
            "test_input_required_result_list_roots",
            "Asks for the client's roots.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| match ctx.input("client_roots") {
                None => ask(vec![(
                    "client_roots",
                    json!({"method": "roots/list", "params": {}}),
                )]),
                Some(a) => {
                    let n = a.get("roots").and_then(Value::as_array).map_or(0, Vec::len);
                    done(text_result(format!("The client has {n} root(s).")))
                }
            },
        ),
        tool(
            "test_input_required_result_request_state",
            "Asks for confirmation, keeping state.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| match ctx.input("confirm") {
                None => ask(vec![(
                    "confirm",
                    elicitation(
                        "Proceed?",
                        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
                    ),
                )]),
                Some(_) => done(text_result(
                    "state-ok: confirmed with the request state intact",
                )),
            },
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Asks three kinds of input at once.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| {
                let keys = ["user_info", "model_hint", "client_roots"];
                if keys.iter().all(|k| ctx.input(k).is_some()) {
                    return done(text_result("Received all three inputs."));
                }
                ask(vec![
                    ("user_info", elicitation("Who are you?", name_schema())),
                    (
                        "model_hint",
                        json!({"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello."}}], "maxTokens": 50}}),
                    ),
                    (
                        "client_roots",
                        json!({"method": "roots/list", "params": {}}),
                    ),
                ])
            },
        ),
        tool(
            "test_input_required_result_multi_round",
            "Asks twice, one round after the other.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| {
                if ctx.input("step1").is_none() {
                    return ask(vec![(
                        "step1",
                        elicitation("Step 1: your name?", name_schema()),
                    )]);
                }
                if ctx.input("step2").is_none() {
                    return ask(vec![(
                        "step2",
                        elicitation(
                            "Step 2: favourite colour?",
                            json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}),
                        ),
                    )]);
                }
                done(text_result("Both rounds answered."))
            },
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Refuses a modified request state.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| match ctx.input("confirm") {
                None => ask(vec![(
                    "confirm",
                    elicitation(
                        "Proceed?",
                        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
                    ),
                )]),
                Some(_) => done(text_result("state-ok")),
            },
        ),
        tool(
            "test_input_required_result_capabilities",
            "Asks only what the client declared.",
            json!({"type": "object"}),
            Policy::Sync,
            |ctx| {
                if !ctx.inputs().is_empty() {
                    return done(text_result("Received the declared inputs."));
                }
                let mut asks = Vec::new();
                if ctx.client_declares("elicitation") {
                    asks.push((
                        "user_name",
                        elicitation("What is your name?", name_schema()),
                    ));
                }
                if ctx.client_declares("sampling") {
                    asks.push(("model_hint", json!({"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello."}}], "maxTokens": 50}})));
                }
                if ctx.client_declares("roots") {
                    asks.push((
                        "client_roots",
                        json!({"method": "roots/list", "params": {}}),
                    ));
                }
                if asks.is_empty() {
                    return done(text_result("The client declared no input capability."));
                }
                ask(asks)
            },
        ),
    ]
}

/// The tasks fixtures (SEP-2663).
fn task_fixtures() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(
            "greet",
            "Greets by name.",
            object_schema(json!({"name": {"type": "string"}}), &["name"]),
            Policy::Sync,
            |ctx| {
                #[derive(Deserialize)]
                struct A {
                    name: String,
                }
                let a: A = ctx.args()?;
                done(text_result(format!("Hello, {}!", a.name)))
            },
        ),
        delayed(
            "slow_compute",
            "Waits `seconds`, then reports the label.",
            object_schema(
                json!({"seconds": {"type": "number"}, "label": {"type": "string"}}),
                &["seconds"],
            ),
            Policy::Optional,
            slow_wait,
            |ctx| {
                let a: SlowArgs = ctx.args()?;
                done(text_result(format!(
                    "Computed {} after {} s",
                    a.label, a.seconds
                )))
            },
        ),
        delayed(
            "failing_job",
            "Fails as a tool error after a second.",
            empty(),
            Policy::TaskOnly,
            one_second,
            |_| {
                Err(JobError::Tool(
                    "The job failed: the input data was rejected by the tool.".into(),
                ))
            },
        ),
        delayed(
            "protocol_error_job",
            "Fails with a JSON-RPC error.",
            empty(),
            Policy::TaskOnly,
            one_second,
            |_| {
                Err(JobError::Protocol(ErrorObject {
                    code: INTERNAL_ERROR,
                    message: "The job hit an internal error".into(),
                    data: None,
                }))
            },
        ),
        delayed(
            "confirm_delete",
            "Asks for confirmation, then deletes (pretend).",
            object_schema(json!({"filename": {"type": "string"}}), &[]),
            Policy::TaskOnly,
            no_wait,
            |ctx| {
                let file = ctx
                    .arguments()
                    .get("filename")
                    .and_then(Value::as_str)
                    .unwrap_or("file")
                    .to_owned();
                match ctx.input("confirm_delete") {
                    None => ask(vec![(
                        "confirm_delete",
                        elicitation(
                            &format!("Delete {file}?"),
                            json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
                        ),
                    )]),
                    Some(a) => match accepted(a)? {
                        Some(c) if c.get("confirm") == Some(&json!(true)) => {
                            done(text_result(format!("Deleted {file}")))
                        }
                        _ => done(text_result(format!("Kept {file}"))),
                    },
                }
            },
        ),
        delayed(
            "multi_input",
            "Asks two questions at once.",
            empty(),
            Policy::TaskOnly,
            no_wait,
            |ctx| {
                if ctx.input("first").is_some() && ctx.input("second").is_some() {
                    return done(text_result("Both inputs received."));
                }
                let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}}});
                let mut asks: BTreeMap<String, Value> = BTreeMap::new();
                asks.insert("first".into(), elicitation("First input", schema.clone()));
                asks.insert("second".into(), elicitation("Second input", schema));
                Ok(Step::NeedInput(asks))
            },
        ),
        Arc::new(FnTool {
            def: ToolDef {
                name: "test_tool_with_task",
                description: "Asks a name synchronously, then runs as a task.",
                input_schema: empty(),
                policy: Policy::TaskOnly,
            },
            preflight: Some(|ctx| match ctx.input("user_name") {
                None => Ok(Preflight::NeedInput(
                    [(
                        "user_name".to_owned(),
                        elicitation("What is your name?", name_schema()),
                    )]
                    .into(),
                )),
                Some(a) => {
                    let name = accepted(a)?
                        .and_then(|c| c.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("stranger")
                        .to_owned();
                    Ok(Preflight::Proceed(json!({"name": name})))
                }
            }),
            step: |ctx| {
                let name = ctx
                    .raw_checkpoint()
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("stranger");
                done(text_result(format!("Task finished for {name}")))
            },
        }),
    ]
}

/// `test_tool_with_progress`: three progress notifications 50 ms apart, then text.
struct ProgressFixture {
    def: ToolDef,
}

impl ProgressFixture {
    fn def() -> Self {
        Self {
            def: ToolDef {
                name: "test_tool_with_progress",
                description: "Reports progress 0, 50, 100 of 100.",
                input_schema: json!({"type": "object"}),
                policy: Policy::Sync,
            },
        }
    }
}

#[async_trait]
impl Tool for ProgressFixture {
    fn def(&self) -> &ToolDef {
        &self.def
    }
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ctx.progress(p, Some(100.0), format!("{p}%"));
        }
        done(text_result("Progress reported."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Registry;

    #[test]
    fn simple_text_is_first_and_names_are_unique() {
        let tools = conformance_tools();
        let n = tools.len();
        let r = Registry::new(tools);
        assert_eq!(r.names()[0], "test_simple_text");
        assert_eq!(r.names().len(), n, "no duplicate names");
        for name in [
            "greet",
            "slow_compute",
            "failing_job",
            "protocol_error_job",
            "confirm_delete",
            "multi_input",
            "test_tool_with_task",
            "test_missing_capability",
        ] {
            assert!(r.get(name).is_some(), "{name}");
        }
    }
}
