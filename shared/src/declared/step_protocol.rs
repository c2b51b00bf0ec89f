//! The wire of `mcp-tasks-step/1` (docs/step-protocol.md): the request the server sends for one
//! step, and the answer it reads back, checked to the letter. Nothing here talks to a target.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::protocol::method::InputMethod;

/// The protocol's name and version, as every request carries it.
pub const PROTOCOL: &str = "mcp-tasks-step/1";

/// The longest `sleep` a target may ask for (a day; a job that waits longer sleeps again).
pub const MAX_SLEEP: Duration = Duration::from_secs(86_400);

/// The longest `remainingSeconds` a target may announce (a year).
const MAX_REMAINING_SECONDS: f64 = 31_536_000.0;

/// Most input requests one answer may make.
pub const MAX_INPUT_REQUESTS: usize = 16;

/// The largest answer a target may give, and so the largest result (`done`): what a finished
/// task's record always has room for in every store (a manifest's `max_answer_bytes` is at
/// most this).
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The largest checkpoint (its JSON) a target may answer with: the room the worker has in a
/// record a client filled to its own bound, so a checkpoint that passes here is always saved,
/// on the task lane as in a synchronous call's `requestState`.
pub const MAX_CHECKPOINT_BYTES: usize =
    crate::store::MAX_RECORD_BYTES - crate::store::MAX_CLIENT_RECORD_BYTES;

/// The members of a `done` that are the tool's result; any other (`resultType`, `_meta`, …)
/// would be the answer's envelope, which is the server's, and is dropped.
const RESULT_MEMBERS: [&str; 3] = ["content", "structuredContent", "isError"];

/// One step's request (docs/step-protocol.md, "One step").
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRequest<'a> {
    /// Always [`PROTOCOL`].
    pub protocol: &'static str,
    /// The tool's name.
    pub tool: &'a str,
    /// The client's (checked) arguments.
    pub arguments: &'a Value,
    /// `null` on the first step, then the previous answer's checkpoint.
    pub checkpoint: &'a Value,
    /// The answers received so far, by key.
    pub input: &'a Map<String, Value>,
    /// 1 the first time this step is asked.
    pub attempt: u32,
    /// Epoch ms by which the answer must arrive.
    pub deadline_ms: u64,
    /// Which task this is.
    pub task: StepTask<'a>,
}

/// The step request's `task`: what the target is told of the task it works for (its
/// identity below the edge is [`crate::task::TaskRef`]).
#[derive(Debug, Serialize)]
pub struct StepTask<'a> {
    /// The task's id; `null` for a synchronous call.
    pub id: Option<&'a str>,
    /// The tenant, only where the manifest entry passes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<&'a str>,
}

/// A `continue`'s progress report.
#[derive(Debug, Clone, PartialEq)]
pub struct StepProgress {
    /// Work done.
    pub progress: f64,
    /// Work in all, when known.
    pub total: Option<f64>,
    /// What to show (the task's status message).
    pub message: Option<String>,
    /// How long the job expects still to need: clients are asked to poll less often.
    pub remaining: Option<Duration>,
}

/// What a target answered, once checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Finished with this `CallToolResult`.
    Done(Value),
    /// More to do from this checkpoint.
    Continue(Value, Option<StepProgress>),
    /// Park for this long, then go on from this checkpoint.
    Sleep(Value, Duration),
    /// Ask the user; go on from this checkpoint once every key is answered.
    Input(Value, BTreeMap<String, Value>),
    /// A tool error the model reads.
    Error(String),
    /// The job cannot go on.
    Failed(String),
}

impl Answer {
    /// The checkpoint the answer carries, if its kind has one.
    pub fn checkpoint(&self) -> Option<&Value> {
        match self {
            Self::Continue(cp, _) | Self::Sleep(cp, _) | Self::Input(cp, _) => Some(cp),
            Self::Done(_) | Self::Error(_) | Self::Failed(_) => None,
        }
    }
}

/// Why an answer is not an `mcp-tasks-step/1` answer. The reason is for the log; the client
/// only ever learns that the answer was bad (the target's text never reaches it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadAnswer(pub &'static str);

/// Reads an answer: exactly one of the six kinds, every field of its type.
pub fn parse_answer(bytes: &[u8]) -> Result<Answer, BadAnswer> {
    let value: Value = serde_json::from_slice(bytes).map_err(|_| BadAnswer("not JSON"))?;
    let Value::Object(map) = value else {
        return Err(BadAnswer("not an object"));
    };
    let mut entries = map.into_iter();
    let (Some((kind, body)), None) = (entries.next(), entries.next()) else {
        return Err(BadAnswer("not exactly one key"));
    };
    match kind.as_str() {
        "done" => done(body).map(Answer::Done),
        "continue" => {
            let mut o = object(body, "continue is not an object")?;
            only(&o, &["checkpoint", "progress"])?;
            let cp = o
                .remove("checkpoint")
                .ok_or(BadAnswer("continue without a checkpoint"))?;
            let progress = match o.remove("progress") {
                None | Some(Value::Null) => None,
                Some(p) => Some(progress(p)?),
            };
            Ok(Answer::Continue(cp, progress))
        }
        "sleep" => {
            let mut o = object(body, "sleep is not an object")?;
            only(&o, &["seconds", "checkpoint"])?;
            let cp = o
                .remove("checkpoint")
                .ok_or(BadAnswer("sleep without a checkpoint"))?;
            let secs = o
                .get("seconds")
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_SLEEP.as_secs_f64())
                .ok_or(BadAnswer("sleep seconds not a number in (0, 86400]"))?;
            Ok(Answer::Sleep(cp, Duration::from_secs_f64(secs)))
        }
        "input" => {
            let mut o = object(body, "input is not an object")?;
            only(&o, &["requests", "checkpoint"])?;
            let cp = o
                .remove("checkpoint")
                .ok_or(BadAnswer("input without a checkpoint"))?;
            let requests = object(
                o.remove("requests").unwrap_or(Value::Null),
                "input requests are not an object",
            )?;
            if requests.is_empty() || requests.len() > MAX_INPUT_REQUESTS {
                return Err(BadAnswer("input asks for no request, or more than 16"));
            }
            let mut out = BTreeMap::new();
            for (key, request) in requests {
                if key.is_empty() || key.len() > 64 {
                    return Err(BadAnswer("an input key is empty or over 64 bytes"));
                }
                input_request(&request)?;
                out.insert(key, request);
            }
            Ok(Answer::Input(cp, out))
        }
        "error" => text(body).map(Answer::Error),
        "failed" => text(body).map(Answer::Failed),
        _ => Err(BadAnswer("an unknown kind of answer")),
    }
}

fn input_request(request: &Value) -> Result<(), BadAnswer> {
    let o = request
        .as_object()
        .ok_or(BadAnswer("an input request is not an object"))?;
    only(o, &["method", "params"])?;
    let method = o.get("method").and_then(Value::as_str).unwrap_or("");
    if InputMethod::from_name(method).is_none() {
        return Err(BadAnswer(
            "an input request's method is not an MCP input request",
        ));
    }
    match o.get("params") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(BadAnswer("an input request's params are not an object")),
    }
}

fn done(body: Value) -> Result<Value, BadAnswer> {
    let Value::Object(mut o) = body else {
        return Err(BadAnswer("done is not a CallToolResult object"));
    };
    o.retain(|k, _| RESULT_MEMBERS.contains(&k.as_str()));
    match o.get("content") {
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => {}
        _ => return Err(BadAnswer("done has no content array of objects")),
    }
    if o.get("isError").is_some_and(|e| !e.is_boolean()) {
        return Err(BadAnswer("done's isError is not a boolean"));
    }
    if o.get("structuredContent").is_some_and(|s| !s.is_object()) {
        return Err(BadAnswer("done's structuredContent is not an object"));
    }
    Ok(Value::Object(o))
}

fn progress(p: Value) -> Result<StepProgress, BadAnswer> {
    let o = object(p, "progress is not an object")?;
    only(&o, &["progress", "total", "message", "remainingSeconds"])?;
    let number = |k: &str| -> Result<Option<f64>, BadAnswer> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|n| n.is_finite())
                .map(Some)
                .ok_or(BadAnswer("a progress number is not a number")),
        }
    };
    let progress = number("progress")?.ok_or(BadAnswer("progress without progress"))?;
    let message = match o.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(crate::protocol::truncate(m, 1000)),
        Some(_) => return Err(BadAnswer("a progress message is not a string")),
    };
    let remaining = match number("remainingSeconds")? {
        None => None,
        Some(s) if (0.0..=MAX_REMAINING_SECONDS).contains(&s) => Some(Duration::from_secs_f64(s)),
        Some(_) => return Err(BadAnswer("remainingSeconds not a number in [0, 31536000]")),
    };
    Ok(StepProgress {
        progress,
        total: number("total")?,
        message,
        remaining,
    })
}

fn text(body: Value) -> Result<String, BadAnswer> {
    match body {
        Value::String(s) => Ok(crate::protocol::truncate(&s, 4000)),
        _ => Err(BadAnswer("error or failed is not a string")),
    }
}

fn object(v: Value, why: &'static str) -> Result<Map<String, Value>, BadAnswer> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(BadAnswer(why)),
    }
}

/// Refuses keys the protocol does not define (a typo is a bug to show, not to ignore).
fn only(o: &Map<String, Value>, known: &[&str]) -> Result<(), BadAnswer> {
    match o.keys().all(|k| known.contains(&k.as_str())) {
        true => Ok(()),
        false => Err(BadAnswer("an answer field the protocol does not define")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Answer, BadAnswer> {
        parse_answer(&serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn each_kind_of_answer_is_read() {
        let result = json!({"content": [{"type": "text", "text": "ok"}]});
        assert_eq!(
            parse(json!({"done": result})),
            Ok(Answer::Done(result.clone()))
        );
        assert_eq!(
            parse(json!({"continue": {"checkpoint": {"i": 1},
                "progress": {"progress": 1, "total": 3, "message": "1/3", "remainingSeconds": 90}}})),
            Ok(Answer::Continue(
                json!({"i": 1}),
                Some(StepProgress {
                    progress: 1.0,
                    total: Some(3.0),
                    message: Some("1/3".into()),
                    remaining: Some(Duration::from_secs(90)),
                })
            ))
        );
        assert_eq!(
            parse(json!({"continue": {"checkpoint": null}})),
            Ok(Answer::Continue(Value::Null, None))
        );
        assert_eq!(
            parse(json!({"sleep": {"seconds": 2.5, "checkpoint": 7}})),
            Ok(Answer::Sleep(json!(7), Duration::from_millis(2500)))
        );
        let ask = json!({"method": "elicitation/create", "params": {"message": "Sure?"}});
        assert_eq!(
            parse(json!({"input": {"requests": {"ok": ask}, "checkpoint": "c"}})),
            Ok(Answer::Input(
                json!("c"),
                BTreeMap::from([("ok".to_owned(), ask)])
            ))
        );
        assert_eq!(
            parse(json!({"error": "no such month"})),
            Ok(Answer::Error("no such month".into()))
        );
        assert_eq!(
            parse(json!({"failed": "upstream gone"})),
            Ok(Answer::Failed("upstream gone".into()))
        );
    }

    #[test]
    fn anything_else_is_a_bad_answer() {
        let bad = [
            json!(null),
            json!([]),
            json!("done"),
            json!({}),
            json!({"done": {"content": []}, "error": "x"}),
            json!({"finished": {}}),
            json!({"done": {"text": "no content"}}),
            json!({"done": {"content": "text"}}),
            json!({"done": {"content": [], "isError": "yes"}}),
            json!({"done": {"content": [], "structuredContent": 5}}),
            json!({"continue": {}}),
            json!({"continue": {"checkpoint": 1, "progres": {"progress": 1}}}),
            json!({"continue": {"checkpoint": 1, "progress": {"total": 2}}}),
            json!({"continue": {"checkpoint": 1, "progress": {"progress": "1"}}}),
            json!({"continue": {"checkpoint": 1, "progress": {"progress": 1, "message": 5}}}),
            json!({"continue": {"checkpoint": 1, "progress": {"progress": 1, "remainingSeconds": -1}}}),
            json!({"continue": {"checkpoint": 1, "progress": {"progress": 1, "remainingSeconds": "9"}}}),
            json!({"sleep": {"seconds": 0, "checkpoint": 1}}),
            json!({"sleep": {"seconds": 86401, "checkpoint": 1}}),
            json!({"sleep": {"seconds": "5", "checkpoint": 1}}),
            json!({"sleep": {"seconds": 5}}),
            json!({"input": {"requests": {}, "checkpoint": 1}}),
            json!({"input": {"requests": {"k": {"method": "tools/call"}}, "checkpoint": 1}}),
            json!({"input": {"requests": {"k": {"method": "roots/list", "params": 1}}, "checkpoint": 1}}),
            json!({"input": {"requests": {"": {"method": "roots/list"}}, "checkpoint": 1}}),
            json!({"input": {"requests": {"k": {"method": "roots/list"}}}}),
            json!({"error": {"message": "x"}}),
            json!({"failed": 3}),
        ];
        for b in bad {
            assert!(parse(b.clone()).is_err(), "{b}");
        }
        assert_eq!(parse_answer(b"{\"done\""), Err(BadAnswer("not JSON")));
        let many: Map<String, Value> = (0..17)
            .map(|i| (format!("k{i}"), json!({"method": "roots/list"})))
            .collect();
        assert!(parse(json!({"input": {"requests": many, "checkpoint": 1}})).is_err());
    }

    #[test]
    fn the_request_is_the_documented_shape() {
        let args = json!({"month": "2026-11"});
        let input = Map::new();
        let req = StepRequest {
            protocol: PROTOCOL,
            tool: "monthly_report",
            arguments: &args,
            checkpoint: &Value::Null,
            input: &input,
            attempt: 1,
            deadline_ms: 1_796_212_800_000,
            task: StepTask {
                id: Some("tsk_1"),
                tenant: None,
            },
        };
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"protocol": "mcp-tasks-step/1", "tool": "monthly_report",
                   "arguments": {"month": "2026-11"}, "checkpoint": null, "input": {},
                   "attempt": 1, "deadlineMs": 1_796_212_800_000u64, "task": {"id": "tsk_1"}})
        );
    }
}
