//! Declared tools on the local server, black-box: `mcp-tasks serve --tools FILE` with the
//! examples users copy as targets — `examples/shell/countdown.sh` as a `command`,
//! `examples/python/report.py` served over HTTP by `examples/python/serve.py`, and the same
//! Python handler plus `examples/node/approve.mjs` behind an emulated Lambda Invoke API
//! (`tests/targets/lambda_api.py`, reached through `AWS_ENDPOINT_URL_LAMBDA`) — each through a
//! task with progress and its exact result, a question and its answer, a cancel that stops the
//! next step, and a resume from the checkpoint after the server is killed; then targets that
//! misbehave (`tests/targets/bad_target.py`, the emulator's misbehaving functions) and
//! manifests that must not start.
//!
//! Needs `python3`, `jq` (the shell example) and `node` (the Node example; `NODE` names it,
//! else `node` on PATH): a missing one fails the test with what to install.

mod bad;
mod examples;
mod manifests;
#[path = "../support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `NODE`, or `node` on PATH.
pub fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".into())
}

/// A helper process that prints `listening on URL` once ready; killed on drop.
pub struct Helper {
    child: Child,
    /// Its base URL.
    pub url: String,
}

impl Helper {
    /// Starts `python3 script args…` and waits for its URL.
    pub fn python(script: &Path, args: &[&str]) -> Helper {
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 is needed for these tests: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.trim().trim_end_matches('/').to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{} did not start", script.display()));
        Helper { child, url }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The requests a target logged (one JSON line each), as the `event`s they carried.
pub fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v.get("event").cloned().unwrap_or(v)
        })
        .collect()
}

/// Waits until `log` holds at least `n` requests.
pub async fn wait_logged(log: &Path, n: usize, within: Duration) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let got = logged(log);
        if got.len() >= n {
            return got;
        }
        assert!(
            start.elapsed() < within,
            "{} requests logged in {within:?}, wanted {n}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Whether any process of process group `pgid` is alive (Linux `/proc`).
pub fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(Result::ok).any(|e| {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid pgrp …: the fields after the last ')'.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.get(3).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
            && fields.first() != Some(&"Z")
    })
}

/// Writes `text` as `tools.toml` in `dir`; returns its path.
pub fn write_manifest(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("tools.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The text of a `CallToolResult`'s first content item.
pub fn result_text(task: &Value) -> String {
    task["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
