//! The SDK proxy that counts each function's DynamoDB/SQS calls, and what the template grants.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Calls by (who, service, operation): the functions' DynamoDB/SQS calls through the proxy
/// (`service` = `dynamodb`/`sqs`), and the HTTP requests the front routed (`service` =
/// `http`, operation = the `Mcp-Method`).
#[derive(Default)]
pub struct Counts(Mutex<BTreeMap<(String, String, String), u64>>);

impl Counts {
    pub(super) fn add(&self, who: &str, service: &str, op: &str) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((who.into(), service.into(), op.into()))
            .or_default() += 1;
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<(String, String, String), u64> {
        self.0.lock().unwrap().clone()
    }

    /// The sum over entries matching the filter (`None` matches anything).
    pub fn sum(&self, who: Option<&str>, service: Option<&str>, ops: Option<&[&str]>) -> u64 {
        self.snapshot()
            .iter()
            .filter(|((w, s, o), _)| {
                who.is_none_or(|x| x == w)
                    && service.is_none_or(|x| x == s)
                    && ops.is_none_or(|x| x.contains(&o.as_str()))
            })
            .map(|(_, n)| n)
            .sum()
    }
}

/// DynamoDB operations that read.
pub const DYNAMO_READS: &[&str] = &["GetItem", "BatchGetItem", "Query", "Scan"];
/// DynamoDB operations that write.
pub const DYNAMO_WRITES: &[&str] = &[
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
];

/// The IAM actions template.yaml grants each function (`Policies` of its resource), by the
/// function's name here. Read from the template's text: every `dynamodb:…`/`sqs:…` action named
/// in the resource's block (comments stripped). Resource scoping (table vs index ARN) is not
/// checked; the point is that a code path never needs an action its role lacks.
pub fn granted_actions() -> BTreeMap<&'static str, Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml");
    let mut out = BTreeMap::new();
    for (resource, who) in [
        ("McpFunction", "mcp"),
        ("TasksFunction", "tasks"),
        ("WorkerFunction", "worker"),
        ("SweepFunction", "sweep"),
    ] {
        let head = format!("\n  {resource}:\n");
        let start = text
            .find(&head)
            .unwrap_or_else(|| panic!("{resource} in template.yaml"));
        let block = &text[start + head.len()..];
        // The block ends at the next resource (a two-space-indented key).
        let end = block
            .match_indices('\n')
            .map(|(i, _)| i + 1)
            .find(|&i| {
                let line = &block[i..];
                line.len() > 2 && line.starts_with("  ") && !line[2..].starts_with([' ', '#'])
            })
            .unwrap_or(block.len());
        let actions = block[..end]
            .lines()
            .map(|l| l.split(" #").next().unwrap_or(""))
            .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == ':')))
            .filter(|w| w.starts_with("dynamodb:") || w.starts_with("sqs:"))
            .map(str::to_owned)
            .collect();
        out.insert(who, actions);
    }
    out
}

pub(super) struct Proxy {
    pub(super) who: &'static str,
    pub(super) dynamo: String,
    pub(super) sqs: String,
    pub(super) http: reqwest::Client,
    pub(super) counts: Arc<Counts>,
}

pub(super) const HOP_BY_HOP: [&str; 5] = [
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
];

/// Forwards one SDK request to the emulator, counting it by `X-Amz-Target`.
pub(super) async fn forward(State(p): State<Arc<Proxy>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let target = parts
        .headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (service, op, upstream) = if let Some(op) = target.strip_prefix("DynamoDB_20120810.") {
        ("dynamodb", op, &p.dynamo)
    } else if let Some(op) = target.strip_prefix("AmazonSQS.") {
        ("sqs", op, &p.sqs)
    } else {
        ("other", target, &p.sqs)
    };
    p.counts.add(p.who, service, op);
    let url = format!(
        "{}{}",
        upstream.trim_end_matches('/'),
        parts.uri.path_and_query().map_or("/", |x| x.as_str())
    );
    let mut rb = p.http.request(parts.method.clone(), url).body(body);
    for (k, v) in &parts.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            rb = rb.header(k, v);
        }
    }
    let resp = match rb.send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let mut out = Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    let bytes = resp.bytes().await.unwrap_or_default();
    out.body(Body::from(bytes)).unwrap()
}
