//! Nothing a server or a store holds reaches a terminal raw: `mcp-tasks call` and
//! `mcp-tasks tasks` escape the control characters of what they print (C0 but newline and tab,
//! DEL, C1, so every escape sequence), and `call` never prints the bearer token, even when a
//! server echoes it back — a mark stands in its place.
//!
//! "stdout is a terminal" is a real one: `call` runs under `script` (util-linux), which gives
//! it a pseudo-terminal as stdin and stdout; its stderr goes to a file. Without `script` the
//! tests fail, they do not skip.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

/// What a hostile server or a damaged record may hold: a window-title OSC ended by BEL, a
/// clear-screen CSI, a C1 CSI (U+009B), DEL and a carriage return.
const HOSTILE: &str = "\x1b]0;owned\x07\x1b[2J\u{9b}31m\x7f\r";
/// [`HOSTILE`] as `call` shows it on a terminal.
const HOSTILE_SHOWN: &str = "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{9b}31m\\u{7f}\\r";
/// [`HOSTILE`] in JSON as the commands write it.
const HOSTILE_JSON: &str = "\\u001b]0;owned\\u0007\\u001b[2J\\u009b31m\\u007f\\r";
const TOKEN: &str = "tok-SECRET-4711";

/// Whether a terminal could act on `c` (what must never be written raw).
fn unsafe_char(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// The characters of `text` a terminal could act on, for assertion messages.
fn unsafe_in(text: &str) -> Vec<char> {
    text.chars().filter(|c| unsafe_char(*c)).collect()
}

/// A fake MCP server: each request (one per connection) is answered by `answer(method,
/// request)`: `Ok(result)` or `Err(error object)`.
fn fake_server(
    answer: impl Fn(&str, &Value) -> Result<Value, Value> + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
                let Some(request) = read_request(&mut conn) else {
                    return;
                };
                let method = request["method"].as_str().unwrap_or("");
                let mut reply = json!({"jsonrpc": "2.0", "id": request["id"]});
                match answer(method, &request) {
                    Ok(result) => reply["result"] = result,
                    Err(error) => reply["error"] = error,
                }
                let body = reply.to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    url
}

/// One HTTP request's JSON body.
fn read_request(conn: &mut std::net::TcpStream) -> Option<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = conn.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let len = text[..end]
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            return serde_json::from_slice(&buf[end + 4..end + 4 + len]).ok();
        }
    }
}

/// A server whose task says, asks and answers [`HOSTILE`] and the token: a progress message,
/// a question (its message and its field's title), then a result.
fn task_server() -> String {
    let polls = AtomicUsize::new(0);
    fake_server(move |method, _| match method {
        "tools/call" => Ok(json!({
            "resultType": "task", "taskId": "task-1", "status": "working", "pollIntervalMs": 100,
        })),
        "tasks/update" => Ok(json!({})),
        "tasks/get" => Ok(match polls.fetch_add(1, Ordering::SeqCst) {
            0 => json!({"taskId": "task-1", "status": "working", "pollIntervalMs": 100,
                        "statusMessage": format!("step 1 of 2 {HOSTILE} {TOKEN}")}),
            1 => json!({"taskId": "task-1", "status": "input_required", "pollIntervalMs": 100,
                        "inputRequests": {"q": {"method": "elicitation/create", "params": {
                            "mode": "form", "message": format!("Sure? {HOSTILE} {TOKEN}"),
                            "requestedSchema": {"type": "object", "required": ["ok"],
                                "properties": {"ok": {"type": "boolean",
                                                      "title": format!("OK {HOSTILE}")}}}}}}}),
            _ => json!({"taskId": "task-1", "status": "completed", "pollIntervalMs": 100,
                        "result": {"isError": false, "content": [{"type": "text",
                            "text": format!("line1 {HOSTILE} {TOKEN}\nline2\tend")}]}}),
        }),
        _ => Err(json!({"code": -32601, "message": "no"})),
    })
}

/// A server refusing every call with an error that holds [`HOSTILE`] and the token.
fn refusing_server() -> String {
    fake_server(|_, _| {
        Err(
            json!({"code": -32602, "message": format!("no {HOSTILE} {TOKEN}"),
                   "data": {"echo": format!("Bearer {TOKEN}")}}),
        )
    })
}

/// What one run of `mcp-tasks call` left.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `mcp-tasks call URL t {} --token TOKEN EXTRA…` with its stdout and stdin on a terminal
/// (`script`), `input` typed in; the terminal's CR-LF line ends are read back as LF.
fn call_on_a_terminal(url: &str, extra: &[&str], input: &str) -> Run {
    let dir = support::data_dir();
    let err = dir.path().join("stderr");
    let mut line = String::from("exec \"$BIN\" call \"$URL\" t '{}' --token \"$TOKEN\"");
    for (i, _) in extra.iter().enumerate() {
        line.push_str(&format!(" \"$EXTRA{i}\""));
    }
    line.push_str(" 2>\"$ERR\"");
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"])
        .env("BIN", env!("CARGO_BIN_EXE_mcp-tasks"))
        .env("URL", url)
        .env("TOKEN", TOKEN)
        .env("ERR", &err)
        .env_remove("MCP_TASKS_TOKEN");
    for (i, e) in extra.iter().enumerate() {
        cmd.env(format!("EXTRA{i}"), e);
    }
    let out = run(cmd, input);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    }
}

/// The same run with stdin, stdout and stderr piped (no terminal anywhere).
fn call_piped(url: &str, extra: &[&str], input: &str) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.args(["call", url, "t", "{}", "--token", TOKEN])
        .args(extra)
        .env_remove("MCP_TASKS_TOKEN");
    let out = run(cmd, input);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(mut cmd: Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?} (util-linux `script` needed): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// stderr: every line escaped, the token marked, whatever stdout is.
fn check_stderr(r: &Run) {
    assert!(
        unsafe_in(&r.stderr).is_empty(),
        "raw controls on stderr: {r:#?}"
    );
    assert!(!r.stderr.contains(TOKEN), "token on stderr: {r:#?}");
    assert!(r.stderr.contains(HOSTILE_SHOWN), "{r:#?}");
}

#[test]
fn a_task_is_followed_on_a_terminal_without_its_controls_or_the_token() {
    let r = call_on_a_terminal(&task_server(), &[], "y\n");
    assert_eq!(r.code, Some(0), "{r:#?}");
    // The result: escaped, laid out, the token marked.
    assert!(
        unsafe_in(&r.stdout).is_empty(),
        "raw controls on the terminal: {r:#?}"
    );
    assert!(
        r.stdout
            .contains(&format!("line1 {HOSTILE_SHOWN} [token]\nline2\tend\n")),
        "{r:#?}"
    );
    assert!(!r.stdout.contains(TOKEN), "token on the terminal: {r:#?}");
    // Progress, the question and its field: the same on stderr.
    check_stderr(&r);
    assert!(
        r.stderr
            .contains(&format!("step 1 of 2 {HOSTILE_SHOWN} [token]")),
        "{r:#?}"
    );
    assert!(
        r.stderr
            .contains(&format!("? Sure? {HOSTILE_SHOWN} [token]")),
        "{r:#?}"
    );
    assert!(r.stderr.contains(&format!("OK {HOSTILE_SHOWN}")), "{r:#?}");
}

#[test]
fn into_a_pipe_the_result_is_exact_but_for_the_token() {
    let r = call_piped(&task_server(), &[], "y\n");
    assert_eq!(r.code, Some(0), "{r:#?}");
    assert_eq!(
        r.stdout,
        format!("line1 {HOSTILE} [token]\nline2\tend\n"),
        "{r:#?}"
    );
    check_stderr(&r);
}

#[test]
fn json_output_is_the_same_value_without_raw_controls_or_the_token() {
    for r in [
        call_on_a_terminal(&task_server(), &["--json"], "y\n"),
        call_piped(&task_server(), &["--json"], "y\n"),
    ] {
        assert_eq!(r.code, Some(0), "{r:#?}");
        assert!(unsafe_in(&r.stdout).is_empty(), "raw controls: {r:#?}");
        assert!(r.stdout.contains(HOSTILE_JSON), "{r:#?}");
        // On the terminal the typed answer is echoed before the JSON.
        let json = &r.stdout[r.stdout.find('{').expect("JSON")..];
        let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {r:#?}"));
        assert_eq!(
            v["content"][0]["text"],
            format!("line1 {HOSTILE} [token]\nline2\tend"),
            "{r:#?}"
        );
        assert!(!r.stdout.contains(TOKEN), "{r:#?}");
    }
}

#[test]
fn an_error_echoing_controls_and_the_token_is_escaped_and_marked() {
    let url = refusing_server();
    let text = call_piped(&url, &[], "");
    assert_eq!(text.code, Some(2), "{text:#?}");
    check_stderr(&text);
    assert!(text.stderr.contains("[token]"), "{text:#?}");
    let json = call_on_a_terminal(&url, &["--json"], "");
    assert_eq!(json.code, Some(2), "{json:#?}");
    assert!(unsafe_in(&json.stdout).is_empty(), "{json:#?}");
    assert!(!json.stdout.contains(TOKEN), "{json:#?}");
    let v: Value = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {json:#?}"));
    assert_eq!(v["error"]["message"], format!("no {HOSTILE} [token]"));
    assert_eq!(v["error"]["data"]["echo"], "Bearer [token]");
    check_stderr(&json);
}

/// A stopped server's store holding [`HOSTILE`] in a status message, an input request and a
/// result: `tasks show` and `tasks list` print none of it raw, in text or JSON.
#[tokio::test]
async fn tasks_show_and_list_escape_del_and_c1_too() {
    use mcp_tasks_core::store::TaskStore as _;
    use mcp_tasks_core::store::embedded::EmbeddedStore;
    use mcp_tasks_core::task::{TaskRecord, TaskStatus, new_task_id};

    let dir = support::data_dir();
    let (asking, done) = {
        let store = EmbeddedStore::open(&dir.path().join("tasks.redb")).unwrap();
        let mut asking = TaskRecord::new("local".into(), new_task_id(), "t", None, 1000, json!({}));
        asking.status = TaskStatus::InputRequired;
        asking.status_message = Some(format!("waiting {HOSTILE}"));
        asking.input_requests.insert(
            "q".into(),
            json!({"method": "elicitation/create", "params": {"message": HOSTILE}}),
        );
        let mut done = TaskRecord::new("local".into(), new_task_id(), "t", None, 1000, json!({}));
        done.status = TaskStatus::Completed;
        done.result = Some(json!({"content": [{"type": "text", "text": HOSTILE}]}));
        for t in [&asking, &done] {
            store.create(t, &json!({"note": HOSTILE})).await.unwrap();
        }
        (asking.task_id, done.task_id)
    };
    let tasks = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
            .arg("tasks")
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let show = |id: &str, json: bool| {
        let mut args = vec!["show", id, "--tenant", "local", "--arguments"];
        if json {
            args.push("--json");
        }
        tasks(&args)
    };
    for (what, out) in [
        ("show (text), asking", show(&asking, false)),
        ("show (text), done", show(&done, false)),
        ("show --json, asking", show(&asking, true)),
        ("show --json, done", show(&done, true)),
        ("list", tasks(&["list"])),
        ("list --json", tasks(&["list", "--json"])),
    ] {
        assert!(
            unsafe_in(&out).is_empty(),
            "{what}: raw {:?} in {out}",
            unsafe_in(&out)
        );
        assert!(
            out.contains("owned"),
            "{what}: the text itself is shown: {out}"
        );
    }
    // The JSON is the same value as stored.
    let v: Value = serde_json::from_str(&show(&done, true)).unwrap();
    assert_eq!(v["result"]["content"][0]["text"], HOSTILE);
    assert_eq!(v["arguments"]["note"], HOSTILE);
    let listed: Value =
        serde_json::from_str(tasks(&["list", "--json"]).lines().next().unwrap()).unwrap();
    assert_eq!(listed["status_message"], format!("waiting {HOSTILE}"));
}
