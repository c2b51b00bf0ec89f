//! Black-box test support: starts the real `mcp-tasks` binary on a free port and speaks
//! HTTP to it.

#![allow(dead_code)]

pub mod jwt;
pub mod providers;
pub mod schema;
pub mod sse;
pub mod targets;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A running `mcp-tasks serve` process.
pub struct Server {
    child: Child,
    pub url: String,
    /// Where the operator's metrics are served (`mcp-tasks metrics on …`), if anywhere.
    pub metrics_url: Option<String>,
    /// Everything the process wrote to stderr (its log).
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the binary with `--listen 127.0.0.1:0` on `data_dir` and waits for its URL.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Self::spawn(
            Command::new(env!("CARGO_BIN_EXE_mcp-tasks")),
            data_dir,
            extra,
        )
    }

    /// Starts `cmd` (an `mcp-tasks` binary, with whatever environment the caller set) as
    /// `serve` on a free loopback port and waits for its URL.
    pub fn spawn(mut cmd: Command, data_dir: &Path, extra: &[&str]) -> Server {
        let mut child = cmd
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcp-tasks");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // The metrics line, when there is one, comes before the listening line.
            let mut metrics = None;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("mcp-tasks metrics on ") {
                    metrics = Some(url.trim().to_owned());
                }
                if let Some(url) = line.strip_prefix("mcp-tasks listening on ") {
                    let _ = tx.send((url.trim().to_owned(), metrics.take()));
                }
            }
        });
        let (url, metrics_url) = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("server did not start; log:\n{}", log.lock().unwrap()));
        Server {
            child,
            url,
            metrics_url,
            log,
        }
    }

    /// The server's process id (for /proc readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited by itself (an injected abort).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// `kill -9`: no shutdown code runs.
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Let the reader thread drain the pipe.
        std::thread::sleep(Duration::from_millis(150));
        self.log.lock().unwrap().clone()
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh data directory.
pub fn data_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub text: String,
}

impl Answer {
    /// Sends a request and reads its whole answer.
    async fn read(rb: reqwest::RequestBuilder) -> Answer {
        let resp = rb.send().await.expect("request");
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await.unwrap_or_default();
        Answer {
            status,
            content_type,
            text,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    /// The JSON-RPC messages of an SSE body, in order.
    pub fn sse_messages(&self) -> Vec<Value> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect()
    }
}

/// A minimal 2026-07-28 client.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    pub url: String,
    /// Client capabilities sent on every request.
    pub caps: Value,
    /// Extra headers sent on every request (`Authorization`).
    pub extra_headers: Vec<(String, String)>,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Client {
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            caps: json!({}),
            extra_headers: Vec::new(),
        }
    }

    /// The same client sending `Authorization: Bearer <token>`.
    pub fn with_bearer(&self, token: &str) -> Self {
        let mut c = self.clone();
        c.extra_headers
            .push(("authorization".into(), format!("Bearer {token}")));
        c
    }

    /// The same client declaring the tasks extension (and elicitation).
    pub fn with_tasks(&self) -> Self {
        let mut c = self.clone();
        c.caps = json!({"elicitation": {}, "extensions": {TASKS: {}}});
        c
    }

    pub fn with_caps(&self, caps: Value) -> Self {
        let mut c = self.clone();
        c.caps = caps;
        c
    }

    /// The body of a request with the full `_meta` envelope.
    pub fn body(&self, method: &str, mut params: Value) -> Value {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": self.caps,
            "io.modelcontextprotocol/clientInfo": {"name": "blackbox", "version": "1"}
        });
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// The headers a conforming client sends for `body`.
    pub fn headers(body: &Value) -> Vec<(String, String)> {
        let method = body["method"].as_str().unwrap_or("").to_owned();
        let mut h = vec![
            ("content-type".into(), "application/json".into()),
            (
                "accept".into(),
                "application/json, text/event-stream".into(),
            ),
            ("mcp-protocol-version".into(), "2026-07-28".into()),
            ("mcp-method".into(), method.clone()),
        ];
        let name = match method.as_str() {
            "tools/call" => body["params"]["name"].as_str(),
            m if m.starts_with("tasks/") => body["params"]["taskId"].as_str(),
            _ => None,
        };
        if let Some(n) = name {
            h.push(("mcp-name".into(), n.to_owned()));
        }
        h
    }

    /// POSTs `body` with the given headers.
    pub async fn post_raw(&self, body: &[u8], headers: &[(String, String)]) -> Answer {
        let mut rb = self.http.post(&self.url).body(body.to_vec());
        for (k, v) in headers.iter().chain(&self.extra_headers) {
            rb = rb.header(k, v);
        }
        let answer = Answer::read(rb).await;
        // Every JSON-RPC message the server sends must match the official schema.
        schema::check_answer(body, answer.status, &answer.content_type, &answer.text);
        answer
    }

    /// POSTs a legacy (2025-06-18 / 2025-11-25) request: no `_meta` envelope, no `Mcp-*`
    /// headers, `MCP-Protocol-Version` only when `version` is given. The answer is NOT checked
    /// against the 2026-07-28 schema (it is a 2025 answer); tests/legacy.rs checks the 2025-11-25
    /// shapes by hand.
    pub async fn legacy_send(&self, version: Option<&str>, method: &str, params: Value) -> Answer {
        self.legacy_send_accepting(
            version,
            method,
            params,
            "application/json, text/event-stream",
        )
        .await
    }

    /// [`Client::legacy_send`] with the given `Accept` header.
    pub async fn legacy_send_accepting(
        &self,
        version: Option<&str>,
        method: &str,
        params: Value,
        accept: &str,
    ) -> Answer {
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(serde_json::to_vec(&body).unwrap());
        if let Some(v) = version {
            rb = rb.header("mcp-protocol-version", v);
        }
        Answer::read(rb).await
    }

    /// Sends a well-formed request and returns the raw answer.
    pub async fn send(&self, method: &str, params: Value) -> Answer {
        let body = self.body(method, params);
        self.post_raw(&serde_json::to_vec(&body).unwrap(), &Self::headers(&body))
            .await
    }

    /// Sends a request that must succeed; returns its `result`.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        let a = self.send(method, params).await;
        let v = a.json();
        assert_eq!(a.status, 200, "{method}: {v}");
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    /// `tools/call` returning the result.
    pub async fn tool(&self, name: &str, args: Value) -> Value {
        self.call("tools/call", json!({"name": name, "arguments": args}))
            .await
    }

    /// `tasks/get` returning the result.
    pub async fn get_task(&self, id: &str) -> Value {
        self.call("tasks/get", json!({"taskId": id})).await
    }

    /// Polls `tasks/get` until `pred` holds (panics after `within`).
    pub async fn wait_task(
        &self,
        id: &str,
        within: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let t = self.get_task(id).await;
            if pred(&t) {
                return t;
            }
            assert!(
                start.elapsed() < within,
                "task {id} did not get there in {within:?}: {t}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for a terminal status.
    pub async fn wait_terminal(&self, id: &str, within: Duration) -> Value {
        self.wait_task(id, within, |t| {
            matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            )
        })
        .await
    }
}

/// `sha256` applied `rounds` times to `seed`, as `hash_chain` computes it.
pub fn expected_hash_chain(seed: &str, rounds: u64) -> String {
    use sha2::{Digest, Sha256};
    let mut cur: [u8; 32] = Sha256::digest(seed.as_bytes()).into();
    for _ in 1..rounds {
        cur = Sha256::digest(cur).into();
    }
    cur.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a crash leaves: `n` working `wait` tasks of the local tenant, each under the lease of
/// a dead run.
pub async fn seed_in_flight(dir: &std::path::Path, n: usize) {
    use mcp_tasks_core::store::TaskStore as _;
    use mcp_tasks_core::store::embedded::EmbeddedStore;
    use mcp_tasks_core::task::{Lease, TaskRecord, new_task_id};
    let store = std::sync::Arc::new(EmbeddedStore::open(&dir.join("tasks.redb")).unwrap());
    let mut writes = tokio::task::JoinSet::new();
    for _ in 0..n {
        let store = store.clone();
        writes.spawn(async move {
            let mut t = TaskRecord::new(
                "local".into(),
                new_task_id(),
                "wait",
                Some(86_400_000),
                1000,
                json!({}),
            );
            store.create(&t, &json!({"seconds": 3600})).await.unwrap();
            t.lease = Some(Lease {
                owner: "dead-process".into(),
                expires_at_ms: u64::MAX / 2,
            });
            store.update(&t).await.unwrap();
        });
        while writes.len() >= 256 {
            writes.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = writes.join_next().await {
        r.unwrap();
    }
}
