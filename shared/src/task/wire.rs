//! A task on the wire, in one place: the `CreateTaskResult` and `tasks/get`'s `DetailedTask`
//! are one derived struct, [`TaskWire`], whose fields are declared in sorted order — the order
//! a `serde_json::Map` writes its keys — so that writing it straight from the record (what
//! `tasks/get`, the most repeated request, does through [`GetAnswer`]) and building it as a
//! JSON tree ([`super::TaskRecord::to_detailed`], the notifications of a subscription) give the
//! same bytes. `src/task/get_answers.golden` pins them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{TaskRecord, TaskStatus};
use crate::clock::iso8601_bytes;
use crate::protocol::ErrorObject;

/// A task as a client sees it.
#[derive(Serialize)]
pub(super) struct TaskWire<'a> {
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a Value>,
    #[serde(rename = "createdAt")]
    created_at: Stamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<SortedError<'a>>,
    #[serde(rename = "inputRequests", skip_serializing_if = "Option::is_none")]
    input_requests: Option<&'a BTreeMap<String, Value>>,
    #[serde(rename = "lastUpdatedAt")]
    last_updated_at: Stamp,
    #[serde(rename = "pollIntervalMs")]
    poll_interval_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<WithResultType<'a>>,
    #[serde(rename = "resultType")]
    result_type: &'static str,
    status: &'static str,
    #[serde(rename = "statusMessage", skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    #[serde(rename = "taskId")]
    task_id: &'a str,
    #[serde(rename = "ttlMs")]
    ttl_ms: Option<u64>,
}

impl TaskRecord {
    /// The task with `result_type`; `detailed` adds what `tasks/get` shows by status (the
    /// input requests, the result, the error); `meta` is the server's `_meta`, when written.
    pub(super) fn wire<'a>(
        &'a self,
        result_type: &'static str,
        detailed: bool,
        meta: Option<&'a Value>,
    ) -> TaskWire<'a> {
        let shows = |status| detailed && self.status == status;
        TaskWire {
            meta,
            created_at: Stamp(iso8601_bytes(self.created_at_ms)),
            error: shows(TaskStatus::Failed).then(|| {
                SortedError(match &self.error {
                    Some(e) => Cow::Borrowed(e),
                    None => Cow::Owned(ErrorObject::internal("Task failed")),
                })
            }),
            input_requests: shows(TaskStatus::InputRequired).then_some(&self.input_requests),
            last_updated_at: Stamp(iso8601_bytes(self.last_updated_at_ms)),
            poll_interval_ms: self.poll_interval_ms,
            result: shows(TaskStatus::Completed).then_some(WithResultType(self.result.as_ref())),
            result_type,
            status: self.status.as_str(),
            status_message: self.status_message.as_deref(),
            task_id: &self.task_id,
            ttl_ms: self.ttl_ms,
        }
    }
}

/// A time as the wire writes it ([`crate::clock::iso8601`]), kept on the stack.
struct Stamp([u8; 24]);

impl Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Always ASCII digits and separators.
        s.serialize_str(std::str::from_utf8(&self.0).unwrap_or("1970-01-01T00:00:00.000Z"))
    }
}

/// The wire shape as a JSON object.
pub(super) fn to_map(wire: &TaskWire<'_>) -> Map<String, Value> {
    match serde_json::to_value(wire) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// A `tasks/get` answer — `{"id","jsonrpc","result": DetailedTask + _meta}` — written straight
/// from the record, without building the tree or copying the result.
pub struct GetAnswer<'a> {
    /// The JSON-RPC id of the request.
    pub id: &'a Value,
    /// The task.
    pub task: &'a TaskRecord,
    /// The server's `_meta` (serverInfo).
    pub meta: &'a Value,
}

impl GetAnswer<'_> {
    /// The answer's bytes: what serializing `self` writes, with the server's `_meta` copied in
    /// as `meta_json` (`self.meta` written by `serde_json` once, when the server starts) rather
    /// than written again on every request.
    pub fn to_vec_with(&self, meta_json: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::with_capacity(384 + meta_json.len());
        out.extend_from_slice(b"{\"id\":");
        serde_json::to_writer(&mut out, self.id)?;
        out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":{\"_meta\":");
        out.extend_from_slice(meta_json);
        write_detailed_fields(&mut out, self.task)?;
        out.extend_from_slice(b"}}");
        Ok(out)
    }
}

/// The fields of [`TaskRecord::wire`]`("complete", true, _)` after `_meta`, each preceded by
/// its comma, written by hand in [`TaskWire`]'s order: the names and the fixed values need no
/// escaping, only the strings and JSON values the record holds go through `serde_json`.
/// `get_answers.golden` holds both ways to the same bytes.
fn write_detailed_fields(out: &mut Vec<u8>, t: &TaskRecord) -> Result<(), serde_json::Error> {
    let shows = |status| t.status == status;
    out.extend_from_slice(b",\"createdAt\":\"");
    out.extend_from_slice(&iso8601_bytes(t.created_at_ms));
    out.push(b'"');
    if shows(TaskStatus::Failed) {
        out.extend_from_slice(b",\"error\":");
        let error = match &t.error {
            Some(e) => Cow::Borrowed(e),
            None => Cow::Owned(ErrorObject::internal("Task failed")),
        };
        serde_json::to_writer(&mut *out, &SortedError(error))?;
    }
    if shows(TaskStatus::InputRequired) {
        out.extend_from_slice(b",\"inputRequests\":");
        serde_json::to_writer(&mut *out, &t.input_requests)?;
    }
    out.extend_from_slice(b",\"lastUpdatedAt\":\"");
    out.extend_from_slice(&iso8601_bytes(t.last_updated_at_ms));
    out.extend_from_slice(b"\",\"pollIntervalMs\":");
    serde_json::to_writer(&mut *out, &t.poll_interval_ms)?;
    if shows(TaskStatus::Completed) {
        out.extend_from_slice(b",\"result\":");
        serde_json::to_writer(&mut *out, &WithResultType(t.result.as_ref()))?;
    }
    out.extend_from_slice(b",\"resultType\":\"complete\",\"status\":\"");
    out.extend_from_slice(t.status.as_str().as_bytes());
    out.push(b'"');
    if let Some(m) = &t.status_message {
        out.extend_from_slice(b",\"statusMessage\":");
        serde_json::to_writer(&mut *out, m)?;
    }
    out.extend_from_slice(b",\"taskId\":");
    serde_json::to_writer(&mut *out, &t.task_id)?;
    out.extend_from_slice(b",\"ttlMs\":");
    serde_json::to_writer(&mut *out, &t.ttl_ms)?;
    Ok(())
}

impl Serialize for GetAnswer<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Answer<'a> {
            id: &'a Value,
            jsonrpc: &'static str,
            result: TaskWire<'a>,
        }
        Answer {
            id: self.id,
            jsonrpc: "2.0",
            result: self.task.wire("complete", true, Some(self.meta)),
        }
        .serialize(s)
    }
}

/// An [`ErrorObject`] with its keys in sorted order (`code`, `data`, `message`), as a JSON tree
/// writes it.
struct SortedError<'a>(Cow<'a, ErrorObject>);

impl Serialize for SortedError<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Sorted<'a> {
            code: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<&'a Value>,
            message: &'a str,
        }
        Sorted {
            code: self.0.code,
            data: self.0.data.as_ref(),
            message: &self.0.message,
        }
        .serialize(s)
    }
}

/// The inlined `CallToolResult` of a completed task (`{"content": []}` when none was kept),
/// with `resultType: "complete"` added in its sorted place unless the result has one (the
/// inlined result is a result too, digest §12.12).
struct WithResultType<'a>(Option<&'a Value>);

impl Serialize for WithResultType<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let empty = Map::new();
        let fields = match self.0 {
            Some(Value::Object(o)) => o,
            // Not an object (never written so): as it is.
            Some(other) => return other.serialize(s),
            None => &empty,
        };
        let mut m = s.serialize_map(None)?;
        let mut placed = fields.contains_key("resultType");
        if self.0.is_none() {
            m.serialize_entry("content", &[] as &[Value])?;
        }
        for (k, v) in fields {
            if !placed && k.as_str() > "resultType" {
                m.serialize_entry("resultType", "complete")?;
                placed = true;
            }
            m.serialize_entry(k, v)?;
        }
        if !placed {
            m.serialize_entry("resultType", "complete")?;
        }
        m.end()
    }
}
