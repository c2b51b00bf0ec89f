//! A `command` target's bounds: its stderr read in lines of bounded length (a line of 256 MiB
//! costs the server no memory) and logged with its control characters escaped; and what its
//! steps start — a grandchild that left the step's process group with `setsid()` included —
//! killed when the step ends (an answer, a timeout, a cancel) and, after the server was killed
//! with SIGKILL, when a server starts again on the same data directory.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use super::support::Server;
use super::write_manifest;

const DONE: &str = r#"{"done":{"content":[{"type":"text","text":"ok"}]}}"#;

/// A manifest of one `task = "required"` tool `name` running `sh -c script`.
fn one_tool(dir: &Path, name: &str, extra: &str, script: &str) -> PathBuf {
    let script = serde_json::to_string(script).unwrap();
    write_manifest(
        dir,
        &format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"a command\"\ntask = \"required\"\n\
             input_schema = {{ type = \"object\" }}\nmax_retries = 0\n{extra}\n\
             target = {{ command = [\"sh\", \"-c\", {script}] }}\n"
        ),
    )
}

/// A line of `/proc/PID/status`, in kB.
fn status_kb(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether process `pid` runs (exists and is not a zombie).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(')').map_or("", |(_, r)| r).trim_start();
    !stat.is_empty() && !state.starts_with('Z')
}

/// The pid a step wrote to `file`, once it is there.
async fn pid_in(file: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{file:?} never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits up to `within` for `pid` to be gone.
async fn gone(pid: i32, within: Duration, what: &str) {
    let start = Instant::now();
    while alive(pid) {
        assert!(start.elapsed() < within, "{what} (pid {pid}) lives on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One stderr line of 256 MiB without a newline: the step completes, the server's peak memory
/// stays near where it was (it held the whole line before: 31 -> 567 MiB), and the line is
/// logged cut at 1024 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_stderr_line_is_cut_while_read() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = one_tool(
        dir.path(),
        "flood",
        "step_timeout_seconds = 120",
        &format!("cat > /dev/null; head -c 268435456 /dev/zero | tr '\\0' x >&2; echo '{DONE}'"),
    );
    let s = Server::start(
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let before = status_kb(s.pid(), "VmHWM:");
    let c = s.client().with_tasks();
    let id = c.tool("flood", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(120)).await;
    assert_eq!(t["status"], "completed", "{t}");
    let after = status_kb(s.pid(), "VmHWM:");
    println!("the server's peak memory: {before} kB before the flood, {after} kB after");
    assert!(
        after < before + 64 * 1024,
        "peak memory {before} -> {after} kB"
    );
    let log = s.kill();
    let line = log
        .lines()
        .find(|l| l.contains("declared tool: stderr"))
        .expect("the line is logged");
    let run = line.matches('x').count();
    assert!(
        line.contains(&"x".repeat(1024)),
        "{}",
        &line[..200.min(line.len())]
    );
    assert!(run < 1024 + 64, "{run} x logged");
    assert!(
        line.contains("cut=true"),
        "{}",
        &line[..200.min(line.len())]
    );
}

/// What a program echoes to its stderr (a tenant's argument, say) reaches the log with every
/// character a terminal acts on escaped: a screen clear, a clipboard write (OSC 52), a bell, a
/// carriage return that would let a forged line pass for the server's, a C1 CSI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_reaches_the_log_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = one_tool(
        dir.path(),
        "noisy",
        "",
        &format!(
            "cat > /dev/null; printf 'clear \\033[2J\\nclip \\033]52;c;SGk=\\007\\nbell \\007\\n\
             real\\r2026-01-01T00:00:00Z  INFO forged: all is well\\ncsi \\302\\23331m\\n' >&2; \
             echo '{DONE}'"
        ),
    );
    let s = Server::start(
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let c = s.client().with_tasks();
    let id = c.tool("noisy", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = c.wait_terminal(&id, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "completed", "{t}");
    let log = s.kill();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("declared tool: stderr"))
        .collect();
    assert_eq!(lines.len(), 5, "{log}");
    for l in &lines {
        assert!(
            !l.chars().any(|c| c.is_control()),
            "a control character reached the log: {l:?}"
        );
    }
    let all = lines.join("\n");
    for shown in [
        "clear \\u{1b}[2J",
        "clip \\u{1b}]52;c;SGk=\\u{7}",
        "bell \\u{7}",
        "real\\r2026-01-01T00:00:00Z  INFO forged",
        "csi \\u{9b}31m",
    ] {
        assert!(all.contains(shown), "{shown} not in {all}");
    }
    // No line of the log starts with the forged text.
    assert!(
        !log.lines()
            .any(|l| l.contains("INFO forged") && !l.contains("declared tool"))
    );
}

/// The script of a step that writes its own pid to `pids`, starts a grandchild that calls
/// `setsid()` (a session and process group of its own) and writes its pid to `escaped`, then
/// waits.
fn escaping(pids: &Path, escaped: &Path) -> String {
    format!(
        "echo $$ > {}; setsid sh -c 'echo $$ > {}; exec sleep 60' & cat > /dev/null; sleep 60",
        pids.display(),
        escaped.display()
    )
}

/// A grandchild that left the step's process group with `setsid()` dies with the step, on a
/// timeout and on a cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_grandchild_survives_neither_timeout_nor_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, e1, p2, e2) = ["p1", "e1", "p2", "e2"].map(|f| dir.path().join(f)).into();
    let text = format!(
        "[[tool]]\nname = \"slow\"\ndescription = \"times out\"\ntask = \"required\"\n\
         input_schema = {{ type = \"object\" }}\nmax_retries = 0\nstep_timeout_seconds = 2\n\
         target = {{ command = [\"sh\", \"-c\", {}] }}\n\n\
         [[tool]]\nname = \"long\"\ndescription = \"is cancelled\"\ntask = \"required\"\n\
         input_schema = {{ type = \"object\" }}\nmax_retries = 0\nstep_timeout_seconds = 120\n\
         target = {{ command = [\"sh\", \"-c\", {}] }}\n",
        serde_json::to_string(&escaping(&p1, &e1)).unwrap(),
        serde_json::to_string(&escaping(&p2, &e2)).unwrap(),
    );
    let manifest = write_manifest(dir.path(), &text);
    let s = Server::start(
        &dir.path().join("data"),
        &["--tools", &manifest.display().to_string()],
    );
    let c = s.client().with_tasks();
    let slow = c.tool("slow", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = c.tool("long", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (grandchild1, grandchild2) = (pid_in(&e1).await, pid_in(&e2).await);
    let t = c.wait_terminal(&slow, Duration::from_secs(20)).await;
    assert_eq!(t["status"], "failed", "{t}");
    gone(
        grandchild1,
        Duration::from_secs(3),
        "a setsid grandchild after the timeout",
    )
    .await;
    c.call("tasks/cancel", json!({"taskId": long})).await;
    let t = c.wait_terminal(&long, Duration::from_secs(10)).await;
    assert_eq!(t["status"], "cancelled", "{t}");
    gone(
        grandchild2,
        Duration::from_secs(3),
        "a setsid grandchild after the cancel",
    )
    .await;
    for f in [&p1, &p2] {
        gone(
            pid_in(f).await,
            Duration::from_secs(3),
            "the step's program",
        )
        .await;
    }
}

/// The server killed with SIGKILL mid-step: its step's program and the program's setsid
/// grandchild are killed when a server starts again on the same data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_killed_server_left_is_killed_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, escaped) = (dir.path().join("pids"), dir.path().join("escaped"));
    let manifest = one_tool(
        dir.path(),
        "long",
        "step_timeout_seconds = 120",
        &escaping(&pids, &escaped),
    );
    let data = dir.path().join("data");
    let args = ["--tools", &manifest.display().to_string()];
    let s = Server::start(&data, &args);
    let c = s.client().with_tasks();
    c.tool("long", json!({})).await;
    let (child, grandchild) = (pid_in(&pids).await, pid_in(&escaped).await);
    s.kill();
    std::fs::remove_file(&pids).unwrap();
    std::fs::remove_file(&escaped).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        alive(child) && alive(grandchild),
        "a SIGKILL kills nothing else (else this test tests nothing)"
    );
    // Another server, on another data directory, leaves them alone.
    let other = Server::start(&dir.path().join("other"), &args);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(alive(child) && alive(grandchild));
    drop(other);
    let again = Server::start(&data, &args);
    gone(child, Duration::from_secs(3), "the killed server's step").await;
    gone(grandchild, Duration::from_secs(3), "its setsid grandchild").await;
    drop(again);
}
