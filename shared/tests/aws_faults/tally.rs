//! The counting tool `tally`: its steps, runs and effects, and the only correct result.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mcp_tasks_core::jobs::{JobContext, JobError, Step, elicitation, text_result};
use mcp_tasks_core::task::TaskRecord;
use mcp_tasks_core::tools::{Tool, ToolDef};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::sleep;

/// The tool's checkpoint: steps done and a running digest of them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Cp {
    pub at: u64,
    pub sum: u64,
}

/// What step `i` adds to the digest.
pub fn weight(i: u64) -> u64 {
    (i + 1) * (i + 1) * 7919 % 1_000_003
}

/// The only correct result of `tally` with this key and step count.
pub fn expected_result(key: &str, n: u64) -> Value {
    let sum: u64 = (0..n).map(weight).sum();
    text_result(format!("tally {key}: {n} steps, digest {sum}"))
}

/// What the tool saw of one job (keyed by its `key` argument).
#[derive(Debug, Default)]
pub struct Entry {
    /// The checkpoint (`at`) each run started from.
    pub starts: Vec<u64>,
    /// How many times each step index ran to its end.
    pub completed_steps: BTreeMap<u64, u32>,
    /// Steps of this job running right now.
    pub in_flight: u32,
    /// Times a step started while another step of the same job was running.
    pub overlaps: u32,
    /// Runs that went on with the answer to the input request.
    pub answered_runs: u32,
    /// Times the final step (the job's effect) ran.
    pub effects: u32,
    /// Run starts and effects with their times, for the diagnosis of a failure.
    pub events: Vec<String>,
}

/// Seconds since the first call (timestamps of the diagnostics).
pub fn clock() -> f64 {
    static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    T0.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

pub type Log = Arc<Mutex<HashMap<String, Entry>>>;

pub fn with_entry<R>(log: &Log, key: &str, f: impl FnOnce(&mut Entry) -> R) -> R {
    let mut map = log.lock().unwrap_or_else(|e| e.into_inner());
    f(map.entry(key.to_owned()).or_default())
}

/// Counts `n` steps of `ms` each; with `ask`, first asks for input (`go`). Records every run,
/// step and effect in the log.
pub struct Tally {
    pub def: ToolDef,
    pub log: Log,
}

/// Marks a step as running until it ends or is dropped (cancel, deadline, crash).
pub struct InFlight {
    pub log: Log,
    pub key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        with_entry(&self.log, &self.key, |e| e.in_flight -= 1);
    }
}

#[async_trait]
impl Tool for Tally {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let args = ctx.arguments();
        let key = args["key"].as_str().unwrap_or_default().to_owned();
        let n = args["n"].as_u64().unwrap_or(1);
        let ms = args["ms"].as_u64().unwrap_or(0);
        let ask = args["ask"].as_bool().unwrap_or(false);
        let cp: Cp = ctx.checkpoint();
        let first = ctx.first_step_of_run();
        let _running = with_entry(&self.log, &key, |e| {
            if first {
                e.starts.push(cp.at);
                e.events
                    .push(format!("{:8.3}s run starts at {}", clock(), cp.at));
            }
            e.in_flight += 1;
            if e.in_flight > 1 {
                e.overlaps += 1;
            }
            InFlight {
                log: self.log.clone(),
                key: key.clone(),
            }
        });
        if ask && cp.at == 0 {
            if ctx.input("go").is_none() {
                let ask = elicitation("Go on?", json!({"type": "object", "properties": {}}));
                return Ok(Step::NeedInput(BTreeMap::from([("go".to_owned(), ask)])));
            }
            if first {
                with_entry(&self.log, &key, |e| e.answered_runs += 1);
            }
        }
        if cp.at >= n {
            with_entry(&self.log, &key, |e| {
                e.effects += 1;
                e.events.push(format!("{:8.3}s effect", clock()));
            });
            return Ok(Step::Done(expected_result(&key, n)));
        }
        sleep(Duration::from_millis(ms)).await;
        let next = Cp {
            at: cp.at + 1,
            sum: cp.sum + weight(cp.at),
        };
        with_entry(&self.log, &key, |e| {
            *e.completed_steps.entry(cp.at).or_default() += 1;
        });
        // The digest comes from the checkpoints alone: a lost or repeated step shows in it.
        if next.at >= n {
            let want: u64 = (0..n).map(weight).sum();
            if next.sum != want {
                return Err(JobError::Tool(format!("digest {} != {want}", next.sum)));
            }
        }
        Ok(Step::Continue(json!(next)))
    }
}

pub fn at(task: &TaskRecord) -> u64 {
    serde_json::from_value::<Cp>(task.checkpoint.clone())
        .map(|c| c.at)
        .unwrap_or(0)
}
