//! What a declared tool adds per step over its target's own time, side by side in one run, for
//! each kind of target: the same request sent straight to the target N times (the target's own
//! time: a process spawned, an HTTP POST, an `Invoke` of the emulated API), then a task of N
//! steps through the server (each step a request, a parse, a checkpoint saved, the next step).
//! A benchmark, run by hand:
//!
//! ```text
//! cargo build --release -p mcp-tasks
//! MCP_TASKS_BIN=target/release/mcp-tasks \
//!   cargo test -p mcp-tasks --all-features --test declared_tools overhead -- --ignored --nocapture
//! ```

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::examples::{COMMAND_WRAPPER, Kind, Rig};
use super::repo;

/// Steps per task (and direct calls per target).
const STEPS: u64 = 40;

/// One step's request as the server sends it, for the direct calls.
fn request(rig: &Rig, left: u64) -> Value {
    let (tool, checkpoint) = match rig.kind {
        Kind::Command => ("countdown", json!({"left": left + 1})),
        _ => ("report", json!({"parts": 0, "total": 0})),
    };
    json!({"protocol": "mcp-tasks-step/1", "tool": tool,
           "arguments": rig.arguments(STEPS, false, 0), "checkpoint": checkpoint, "input": {},
           "attempt": 1, "deadlineMs": 0, "task": {"id": "tsk_direct"}})
}

/// The target's own time per call: the request sent straight to it.
async fn direct(rig: &Rig, url: Option<&str>) -> Duration {
    let http = reqwest::Client::new();
    let started = Instant::now();
    for i in 0..STEPS {
        let body = request(rig, i).to_string();
        match rig.kind {
            Kind::Command => {
                use std::io::Write as _;
                // The very command the manifest names (the logging wrapper around the script).
                let mut child = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(COMMAND_WRAPPER)
                    .arg(repo().join("examples/shell/countdown.sh"))
                    .env("STEP_LOG", &rig.log)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(body.as_bytes())
                    .unwrap();
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success());
            }
            Kind::Http | Kind::Lambda => {
                let url = url.unwrap();
                let resp = http.post(url).body(body).send().await.unwrap();
                assert_eq!(resp.status(), 200);
                resp.bytes().await.unwrap();
            }
        }
    }
    started.elapsed() / STEPS as u32
}

/// Per step through the server: a task of STEPS steps, from its creation to its result.
async fn through_the_server(rig: &Rig) -> Duration {
    let s = rig.start(&[]);
    let c = s.client().with_tasks();
    let started = Instant::now();
    let created = c.tool(rig.tool(), rig.arguments(STEPS, false, 0)).await;
    let id = created["taskId"].as_str().unwrap().to_owned();
    loop {
        let t = c.get_task(&id).await;
        if t["status"] == "completed" {
            break;
        }
        assert_eq!(t["status"], "working", "{t}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed() / STEPS as u32
}

/// Rounds of each measurement, interleaved; the median is reported.
const ROUNDS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark, run by hand: see the module's doc"]
async fn overhead_per_step_of_each_target() {
    println!(
        "| target | its own time per call | per step through the server | overhead per step |"
    );
    println!("|---|---:|---:|---:|");
    for kind in [Kind::Command, Kind::Http, Kind::Lambda] {
        let rig = Rig::new(kind);
        let url = rig.target_url();
        let (mut own, mut via) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            own.push(direct(&rig, url.as_deref()).await);
            via.push(through_the_server(&rig).await);
        }
        let (own, via) = (median(own), median(via));
        println!(
            "| {kind:?} | {:.2} ms | {:.2} ms | {:.2} ms ({:.2}x) |",
            own.as_secs_f64() * 1e3,
            via.as_secs_f64() * 1e3,
            via.saturating_sub(own).as_secs_f64() * 1e3,
            via.as_secs_f64() / own.as_secs_f64()
        );
    }
}
