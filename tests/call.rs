//! `mcp-tasks call`, black-box: the real client binary against the real server binary (and
//! against a few broken fake servers): progress, questions answered on stdin, Ctrl-C,
//! failures, tokens, `--json`, and the bounds on what a server may answer.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Server, data_dir};

/// Longest one `mcp-tasks call` may take in these tests.
const WITHIN: Duration = Duration::from_secs(60);

/// What one run of `mcp-tasks call` left.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// Both streams, for assertion messages.
    fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// `mcp-tasks call ARGS…` with its stdio piped and `MCP_TASKS_TOKEN` unset unless in `env`.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.arg("call")
        .args(args)
        .env_remove("MCP_TASKS_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Reads a pipe to its end on a thread.
fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Waits for `child` (killing it and panicking after [`WITHIN`]).
fn wait(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > WITHIN {
            let _ = child.kill();
            panic!("mcp-tasks call did not finish within {WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `mcp-tasks call ARGS…` with `input` on stdin (then closed).
fn call_with(args: &[&str], input: &str, env: &[(&str, &str)]) -> Run {
    let mut child = command(args, env).spawn().expect("spawn mcp-tasks call");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input.as_bytes());
    drop(stdin);
    let status = wait(&mut child);
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn call(args: &[&str]) -> Run {
    call_with(args, "", &[])
}

fn start() -> (Server, tempfile::TempDir) {
    let dir = data_dir();
    (Server::start(dir.path(), &[]), dir)
}

/// The task id in a run's "task … created" line.
fn task_id_in(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| {
        let rest = l.strip_prefix("mcp-tasks: task ")?;
        let (id, tail) = rest.split_once(' ')?;
        tail.starts_with("created").then(|| id.to_owned())
    })
}

#[tokio::test]
async fn a_task_shows_its_progress_and_prints_its_result() {
    let (s, _d) = start();
    let r = call(&[
        &s.url,
        "hash_chain",
        r#"{"seed": "cli", "rounds": 1000000, "pace_ms": 800}"#,
    ]);
    assert_eq!(r.code(), 0, "{}", r.show());
    let digest = support::expected_hash_chain("cli", 1_000_000);
    assert_eq!(
        r.stdout,
        format!("sha256^1000000(\"cli\") = {digest}\n"),
        "{}",
        r.show()
    );
    // stderr is not a terminal here: plain progress lines, from the task's statusMessage.
    assert!(
        r.stderr.lines().any(|l| l.contains("working")
            && l.contains("%: Hashed ")
            && l.contains("of 1000000 rounds")),
        "no progress line: {}",
        r.show()
    );
    assert!(
        !r.stderr.contains('\x1b'),
        "terminal escapes off a terminal"
    );
    // It really was a task, and the server agrees it completed.
    let id = task_id_in(&r.stderr).unwrap_or_else(|| panic!("no task line: {}", r.show()));
    let t = s.client().with_tasks().get_task(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["structuredContent"]["digest"], digest.as_str());
}

#[tokio::test]
async fn input_required_questions_are_answered_from_stdin() {
    let (s, _d) = start();
    let args = [
        s.url.as_str(),
        "confirm_action",
        r#"{"action": "Delete", "target": "report.pdf"}"#,
    ];
    // A task (the extension is declared): input_required, answered with tasks/update.
    let yes = call_with(&args, "y\n", &[]);
    assert_eq!(yes.code(), 0, "{}", yes.show());
    assert_eq!(
        yes.stdout,
        "Confirmed: Delete report.pdf.\n",
        "{}",
        yes.show()
    );
    assert!(
        yes.stderr.contains("? Delete report.pdf?"),
        "{}",
        yes.show()
    );
    assert!(yes.stderr.contains("Confirm [y/n]"), "{}", yes.show());
    let id = task_id_in(&yes.stderr).unwrap_or_else(|| panic!("not a task: {}", yes.show()));
    let t = s.client().with_tasks().get_task(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    // The answer given is the answer sent: "no", a refusal, and stdin's end all say no.
    for input in ["n\n", "maybe\nno\n", "!decline\n", ""] {
        let no = call_with(&args, input, &[]);
        assert_eq!(no.code(), 0, "{input:?}: {}", no.show());
        assert_eq!(
            no.stdout,
            "Not confirmed: Delete report.pdf was not done.\n",
            "{input:?}: {}",
            no.show()
        );
    }
    // Synchronous (no tasks extension): SEP-2322 rounds, the call sent again with the answer.
    let mut sync_args = args.to_vec();
    sync_args.push("--no-tasks");
    let sync = call_with(&sync_args, "yes\n", &[]);
    assert_eq!(sync.code(), 0, "{}", sync.show());
    assert_eq!(
        sync.stdout,
        "Confirmed: Delete report.pdf.\n",
        "{}",
        sync.show()
    );
    assert!(task_id_in(&sync.stderr).is_none(), "{}", sync.show());
}

/// A form with no fields (examples/shell/countdown.sh's "Start the countdown?") is a yes/no
/// question: it is asked, and only a yes accepts.
#[tokio::test]
async fn a_form_without_fields_is_asked_as_yes_or_no() {
    let dir = data_dir();
    let script = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/shell/countdown.sh"
    ))
    .canonicalize()
    .expect("examples/shell/countdown.sh");
    let manifest = dir.path().join("tools.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[tool]]\nname = \"countdown\"\ndescription = \"Counts down.\"\n\
             input_schema = {{ type = \"object\", properties = {{ from = {{ type = \"integer\" }}, confirm = {{ type = \"boolean\" }} }} }}\n\
             target = {{ command = [\"{}\"] }}\n",
            script.display()
        ),
    )
    .unwrap();
    let s = Server::start(dir.path(), &["--tools", manifest.to_str().unwrap()]);
    let args = [
        s.url.as_str(),
        "countdown",
        r#"{"from": 1, "confirm": true}"#,
    ];
    for lane in [&[][..], &["--no-tasks"][..]] {
        let args: Vec<&str> = args.iter().chain(lane).copied().collect();
        let yes = call_with(&args, "maybe\ny\n", &[]);
        assert_eq!(yes.code(), 0, "{lane:?}: {}", yes.show());
        assert_eq!(
            yes.stdout,
            "Lift-off after 1 steps\n",
            "{lane:?}: {}",
            yes.show()
        );
        assert!(
            yes.stderr.contains("? Start the countdown?"),
            "{}",
            yes.show()
        );
        assert!(yes.stderr.contains("[y/n]"), "{}", yes.show());
        for input in ["n\n", "!decline\n", "!cancel\n", ""] {
            let no = call_with(&args, input, &[]);
            assert_eq!(no.code(), 0, "{lane:?} {input:?}: {}", no.show());
            assert_eq!(
                no.stdout,
                "Countdown not started.\n",
                "{lane:?} {input:?}: {}",
                no.show()
            );
        }
    }
}

#[tokio::test]
async fn ctrl_c_cancels_the_task_on_the_server() {
    let (s, _d) = start();
    let mut child = command(&[&s.url, "wait", r#"{"seconds": 120}"#], &[])
        .spawn()
        .expect("spawn mcp-tasks call");
    let out = drain(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = String::new();
    let id = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no task line; stderr so far:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if let Some(id) = task_id_in(&line) {
            break id;
        }
    };
    let c = s.client().with_tasks();
    assert_eq!(c.get_task(&id).await["status"], "working");
    // Let it poll at least once, then Ctrl-C.
    std::thread::sleep(Duration::from_millis(1500));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let status = wait(&mut child);
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
        seen.push_str(&line);
        seen.push('\n');
    }
    assert_eq!(status.code(), Some(130), "{status:?}\n{seen}");
    assert!(seen.contains(&format!("task {id} cancelled")), "{seen}");
    assert_eq!(out.join().unwrap(), "", "nothing on stdout");
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
}

#[tokio::test]
async fn tool_errors_and_failed_tasks_exit_1() {
    let (s, _d) = start();
    let failed = call(&[&s.url, "unreliable_upstream", r#"{"after_ms": 100}"#]);
    assert_eq!(failed.code(), 1, "{}", failed.show());
    assert_eq!(failed.stdout, "", "{}", failed.show());
    assert!(
        failed
            .stderr
            .contains("failed: Upstream service unavailable (simulated) (code -32603)"),
        "{}",
        failed.show()
    );
    let tool_error = call(&[&s.url, "lint_json", r#"{"text": "{"}"#]);
    assert_eq!(tool_error.code(), 1, "{}", tool_error.show());
    assert!(
        tool_error
            .stderr
            .contains("tool error: Invalid JSON at line 1"),
        "{}",
        tool_error.show()
    );
    // The same tool without an error exits 0.
    let fine = call(&[&s.url, "lint_json", r#"{"text": "[1]"}"#]);
    assert_eq!(fine.code(), 0, "{}", fine.show());
    assert_eq!(fine.stdout, "Valid JSON (an array).\n");
    // A JSON-RPC error (no such tool) is a usage error: 2.
    let unknown = call(&[&s.url, "no_such_tool"]);
    assert_eq!(unknown.code(), 2, "{}", unknown.show());
    assert!(
        unknown.stderr.contains("Unknown tool"),
        "{}",
        unknown.show()
    );
}

#[tokio::test]
async fn json_prints_the_final_json() {
    let (s, _d) = start();
    let done = call(&[
        &s.url,
        "hash_chain",
        r#"{"seed": "j", "rounds": 1000}"#,
        "--json",
    ]);
    assert_eq!(done.code(), 0, "{}", done.show());
    let v: Value =
        serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.show()));
    assert_eq!(v["isError"], false);
    assert_eq!(
        v["structuredContent"]["digest"],
        support::expected_hash_chain("j", 1000).as_str()
    );
    let failed = call(&[
        &s.url,
        "unreliable_upstream",
        r#"{"after_ms": 50}"#,
        "--json",
    ]);
    assert_eq!(failed.code(), 1, "{}", failed.show());
    let v: Value = serde_json::from_str(&failed.stdout).unwrap();
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["error"]["code"], -32603, "{v}");
    let tool_error = call(&[&s.url, "lint_json", r#"{"text": "{"}"#, "--json"]);
    assert_eq!(tool_error.code(), 1, "{}", tool_error.show());
    let v: Value = serde_json::from_str(&tool_error.stdout).unwrap();
    assert_eq!(v["isError"], true, "{v}");
    let unknown = call(&[&s.url, "no_such_tool", "{}", "--json"]);
    assert_eq!(unknown.code(), 2, "{}", unknown.show());
    let v: Value = serde_json::from_str(&unknown.stdout).unwrap();
    assert_eq!(v["error"]["code"], -32602, "{v}");
}

#[tokio::test]
async fn synchronous_answers_stream_progress_and_print_directly() {
    let (s, _d) = start();
    // Without the extension `wait` runs inline, streaming notifications/progress (SSE).
    let r = call(&[&s.url, "wait", r#"{"seconds": 2}"#, "--no-tasks"]);
    assert_eq!(r.code(), 0, "{}", r.show());
    assert_eq!(r.stdout, "Waited 2 s.\n", "{}", r.show());
    assert!(task_id_in(&r.stderr).is_none(), "{}", r.show());
    assert!(
        r.stderr.contains("running 50%: Waited 1.0 of 2.0 s"),
        "{}",
        r.show()
    );
    // A task-only tool refuses a caller without the extension.
    let refused = call(&[&s.url, "unreliable_upstream", "{}", "--no-tasks"]);
    assert_eq!(refused.code(), 2, "{}", refused.show());
    assert!(refused.stderr.contains("-32021"), "{}", refused.show());
}

#[tokio::test]
async fn mirrored_arguments_are_sent_as_headers() {
    let dir = data_dir();
    let s = Server::start(dir.path(), &["--fixtures", "conformance"]);
    // The server refuses the call without Mcp-Param-Region (-32020); the client reads the
    // tool's schema and sends it again with the header, base64-encoded when not header-safe.
    for region in ["eu-west-1", " été "] {
        let args = json!({"region": region}).to_string();
        let r = call(&[&s.url, "test_custom_header", &args]);
        assert_eq!(r.code(), 0, "{}", r.show());
        assert_eq!(r.stdout, format!("region={region}\n"), "{}", r.show());
    }
}

#[tokio::test]
async fn tokens_are_sent_and_never_echoed() {
    let (s, _d) = support::jwt::start(&[]);
    let good = support::jwt::token("alice");
    let args = [s.url.as_str(), "wait", r#"{"seconds": 0}"#];
    // From the environment.
    let from_env = call_with(&args, "", &[("MCP_TASKS_TOKEN", &good)]);
    assert_eq!(from_env.code(), 0, "{}", from_env.show());
    assert_eq!(from_env.stdout, "Waited 0 s.\n", "{}", from_env.show());
    // From the flag; the task belongs to the token's tenant.
    let mut with_flag = args.to_vec();
    with_flag.extend(["--token", &good]);
    let ok = call(&with_flag);
    assert_eq!(ok.code(), 0, "{}", ok.show());
    let id = task_id_in(&ok.stderr).unwrap_or_else(|| panic!("{}", ok.show()));
    let t = s
        .client()
        .with_tasks()
        .with_bearer(&good)
        .get_task(&id)
        .await;
    assert_eq!(t["status"], "completed", "{t}");
    for r in [&from_env, &ok] {
        assert!(
            !r.stdout.contains(&good) && !r.stderr.contains(&good),
            "token echoed: {}",
            r.show()
        );
    }
    // No token: 401, exit 2, a hint where to put one.
    let none = call(&args);
    assert_eq!(none.code(), 2, "{}", none.show());
    assert!(none.stderr.contains("HTTP 401"), "{}", none.show());
    assert!(none.stderr.contains("MCP_TASKS_TOKEN"), "{}", none.show());
    // Bad tokens (another key's signature; junk): refused, exit 2, never shown.
    let forged = support::jwt::sign(
        &support::jwt::claims("alice"),
        "other-signing-key.pem",
        "test-key-1",
    );
    for bad in [forged.as_str(), "not-a-jwt-but-secret-1234"] {
        let mut flag = args.to_vec();
        flag.extend(["--token", bad]);
        let from_env = call_with(&args, "", &[("MCP_TASKS_TOKEN", bad)]);
        for r in [call(&flag), from_env] {
            assert_eq!(r.code(), 2, "{}", r.show());
            assert!(
                r.stderr.contains("refused the bearer token"),
                "{}",
                r.show()
            );
            assert!(
                !r.stdout.contains(bad) && !r.stderr.contains(bad),
                "token echoed: {}",
                r.show()
            );
        }
    }
    // A token that cannot be a header value is refused without showing it.
    let odd = "secret\nwith-newline";
    let r = call_with(&args, "", &[("MCP_TASKS_TOKEN", odd)]);
    assert_eq!(r.code(), 2, "{}", r.show());
    assert!(!r.stderr.contains("secret"), "{}", r.show());
}

/// A fake server: answers every connection with `response` (status line, headers, body).
fn fake_server(response: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let response = response.clone();
            std::thread::spawn(move || {
                // Read the request's headers and body (small), then answer.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
                while let Ok(n) = conn.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                if !response.is_empty() {
                    let _ = conn.write_all(&response);
                    let _ = conn.flush();
                } else {
                    // Never answer.
                    std::thread::sleep(Duration::from_secs(30));
                }
            });
        }
    });
    format!("http://{addr}/mcp")
}

fn http(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn garbage_answers_are_refused_with_exit_2() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            http("200 OK", "text/html", "<html>hello</html>"),
            "not JSON or an event stream: <html>hello</html>",
        ),
        (
            http("200 OK", "application/json", "{not json"),
            "did not answer JSON-RPC",
        ),
        (
            http("200 OK", "application/json", r#"{"jsonrpc":"2.0","id":99,"result":{}}"#),
            "the answer's id is 99, not 1",
        ),
        (
            http("502 Bad Gateway", "application/json", r#"{"message":"Internal"}"#),
            "HTTP 502 Bad Gateway: {\"message\":\"Internal\"}",
        ),
        (
            http("200 OK", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"),
            "the event stream ended without an answer",
        ),
        (
            // Announced larger than the cap: refused before reading.
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 20000000\r\n\r\n{"
                .to_vec(),
            "larger than 16777216 bytes",
        ),
        (
            // A task handle that is not one.
            http(
                "200 OK",
                "application/json",
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task"}}"#,
            ),
            "without a usable taskId",
        ),
    ];
    for (response, expected) in cases {
        let url = fake_server(response);
        let r = call(&[&url, "t", "{}", "--timeout", "5"]);
        assert_eq!(r.code(), 2, "{}", r.show());
        assert!(
            r.stderr.contains(expected),
            "want {expected:?}: {}",
            r.show()
        );
    }
    // A server that never answers: the timeout ends it.
    let url = fake_server(Vec::new());
    let start = Instant::now();
    let r = call(&[&url, "t", "{}", "--timeout", "1"]);
    assert_eq!(r.code(), 2, "{}", r.show());
    assert!(r.stderr.contains("no answer within 1s"), "{}", r.show());
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_body_past_the_cap_is_refused_while_reading() {
    // No Content-Length: the cap is enforced on the bytes as they come.
    let mut response =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n".to_vec();
    response.extend(std::iter::repeat_n(b' ', 17 << 20));
    let url = fake_server(response);
    let r = call(&[&url, "t", "{}"]);
    assert_eq!(r.code(), 2, "{}", r.show());
    assert!(
        r.stderr.contains("larger than 16777216 bytes"),
        "{}",
        r.show()
    );
}

#[test]
fn usage_errors_exit_2() {
    for (args, expected) in [
        (
            vec!["http://127.0.0.1:9/mcp", "t", "nope"],
            "ARGS_JSON is not JSON",
        ),
        (
            vec!["http://127.0.0.1:9/mcp", "t", "[1]"],
            "must be a JSON object",
        ),
        (
            vec!["ftp://127.0.0.1/mcp", "t"],
            "must be http:// or https://",
        ),
        (vec!["not a url", "t"], "is not a URL"),
        (vec!["http://127.0.0.1:9/mcp"], "TOOL"),
        (vec!["http://127.0.0.1:1/mcp", "t"], "Connection refused"),
    ] {
        let r = call(&args);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.show());
        assert!(
            r.stderr.contains(expected),
            "{args:?}: want {expected:?}: {}",
            r.show()
        );
    }
}
