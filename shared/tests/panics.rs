//! A panicking tool means the same on both lanes, over real HTTP: a synchronous call answers
//! `-32603` (an internal error whose text says nothing of the panic's) and the keep-alive
//! connection it came on serves the next request; as a task, the same tool fails its task. A
//! panicking preflight answers `-32603` on either lane, the connection kept too.
//!
//! The local server runs in this process with a test tool of its own (the binary's tools never
//! panic on purpose), on a free loopback port, and is spoken to with hand-written HTTP/1.1 so
//! that "the same connection" is what the test holds, not what a client's pool chose.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mcp_tasks_core::app::ToolSources;
use mcp_tasks_core::jobs::{JobContext, JobError, Step, text_result};
use mcp_tasks_core::local::{LocalOptions, LocalServer, start};
use mcp_tasks_core::tools::{Policy, Preflight, Tool, ToolDef};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the panic says: it must never reach a client.
const PANIC_TEXT: &str = "secret-panic-text-4f1c";

/// Panics in its step when its arguments say `"panic": true`, in its preflight when they say
/// `"panic": "preflight"`; otherwise answers at once.
struct Panicky {
    def: ToolDef,
}

#[async_trait]
impl Tool for Panicky {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        if ctx.arguments()["panic"] == "preflight" {
            panic!("{PANIC_TEXT}");
        }
        Ok(Preflight::Proceed(Value::Null))
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        if ctx.arguments()["panic"] == true {
            panic!("{PANIC_TEXT}");
        }
        Ok(Step::Done(text_result("fine")))
    }
}

async fn server(dir: &tempfile::TempDir) -> LocalServer {
    let mut opts = LocalOptions::new("127.0.0.1:0".parse().unwrap(), dir.path().to_owned());
    opts.tools = ToolSources::rust(vec![Arc::new(Panicky {
        def: ToolDef {
            name: "panicky",
            description: "panics when asked to",
            input_schema: json!({"type": "object"}),
            policy: Policy::Optional,
        },
    })]);
    start(opts).await.expect("the local server starts")
}

/// A JSON-RPC request with the `_meta` envelope; `tasks` declares the tasks extension.
fn request(id: u64, method: &str, mut params: Value, tasks: bool) -> Value {
    let caps = match tasks {
        true => json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        false => json!({}),
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "panics", "version": "1"}
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// One keep-alive HTTP/1.1 connection to the endpoint.
struct Conn {
    stream: TcpStream,
    host: String,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(s: &LocalServer) -> Conn {
        let stream = TcpStream::connect(s.addr).await.expect("connect");
        Conn {
            stream,
            host: s.addr.to_string(),
            buf: Vec::new(),
        }
    }

    /// POSTs `body` and reads its whole answer: the status, the head and the JSON body. Panics
    /// when the server closes the connection instead.
    async fn post(&mut self, body: &Value) -> (u16, String, Value) {
        let bytes = serde_json::to_vec(body).unwrap();
        let method = body["method"].as_str().unwrap();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n\
             mcp-method: {method}\r\ncontent-length: {}\r\n",
            self.host,
            bytes.len()
        );
        if let Some(name) = body["params"]["name"].as_str() {
            head.push_str(&format!("mcp-name: {name}\r\n"));
        }
        if let Some(id) = body["params"]["taskId"].as_str() {
            head.push_str(&format!("mcp-name: {id}\r\n"));
        }
        head.push_str("\r\n");
        self.stream.write_all(head.as_bytes()).await.unwrap();
        self.stream.write_all(&bytes).await.unwrap();
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("an answer with a length: {head}"));
        while self.buf.len() < end + len {
            self.fill().await;
        }
        let body: Vec<u8> = self.buf.drain(..end + len).skip(end).collect();
        let text = String::from_utf8_lossy(&body).into_owned();
        let json = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {text}"));
        (status, head, json)
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 8192];
        let n = tokio::time::timeout(Duration::from_secs(30), self.stream.read(&mut chunk))
            .await
            .expect("an answer within 30 s")
            .expect("a readable connection");
        assert!(n > 0, "the server closed the connection");
        self.buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn a_panicking_tool_answers_32603_inline_keeps_the_connection_and_fails_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(&dir).await;
    let mut conn = Conn::open(&s).await;

    // The synchronous lane: -32603, nothing of the panic's text, and the connection kept.
    let call = |id, panic: Value, tasks| {
        let args = json!({"name": "panicky", "arguments": {"panic": panic}});
        request(id, "tools/call", args, tasks)
    };
    let (status, head, answer) = conn.post(&call(1, json!(true), false)).await;
    assert_eq!(status, 200, "{head}{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["message"], "The job failed unexpectedly");
    assert!(!answer.to_string().contains(PANIC_TEXT), "{answer}");
    assert!(
        !head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    let (status, _, answer) = conn.post(&call(2, json!(false), false)).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["result"]["content"][0]["text"], "fine",
        "the same connection serves the next call: {answer}"
    );

    // The task lane: the same tool fails its task with the same error.
    let (_, _, created) = conn.post(&call(3, json!(true), true)).await;
    let id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let started = Instant::now();
    let task = loop {
        let get = request(4, "tasks/get", json!({"taskId": id}), true);
        let (_, _, got) = conn.post(&get).await;
        let task = got["result"].clone();
        if task["status"] != "working" {
            break task;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{task}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], -32603, "{task}");
    assert_eq!(task["error"]["message"], "The job failed unexpectedly");
    assert!(!task.to_string().contains(PANIC_TEXT), "{task}");

    // A preflight that panics means the same, on either lane: -32603, the connection kept.
    for (id, tasks) in [(5, true), (6, false)] {
        let (status, _, answer) = conn.post(&call(id, json!("preflight"), tasks)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["error"]["code"], -32603, "tasks: {tasks}: {answer}");
        assert!(!answer.to_string().contains(PANIC_TEXT), "{answer}");
    }
    let (_, _, answer) = conn.post(&call(7, json!(false), false)).await;
    assert_eq!(answer["result"]["content"][0]["text"], "fine", "{answer}");
}
