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
//! Needs `python3`, `jq` (the shell example), `setsid` (util-linux: a command's escaping
//! grandchild) and `node` (the Node example; `NODE` names it,
//! else `node` on PATH): a missing one fails the test with what to install.

mod bad;
mod commands;
mod examples;
mod manifests;
mod overhead;
mod plain;
mod secrets;
mod signed;
#[path = "../support/mod.rs"]
mod support;
mod workflows;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use support::targets::{Helper, lambda_api, lambda_env, logged, node, repo, wait_logged};

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
