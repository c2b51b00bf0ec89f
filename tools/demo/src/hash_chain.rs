//! `hash_chain`: SHA-256 applied `rounds` times to `seed`, in checkpointed steps of
//! [`ROUNDS_PER_STEP`] rounds each, the hashing off the async threads on the fair CPU pool.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use mcp_tasks_core::jobs::{JobContext, JobError, Step};
use mcp_tasks_core::protocol::ErrorObject;
use mcp_tasks_core::tools::{Claim, Policy, TypedTool};

/// Largest `rounds`.
pub const MAX_ROUNDS: u64 = 1_000_000_000;
/// CPU time one round is claimed to take (SHA-256 of 32 bytes without SHA extensions is about
/// 0.3 µs on the machines we measured; the claim only refuses what could never fit the CPU
/// quota, the worker measures the real use).
const CLAIMED_NS_PER_ROUND: u64 = 300;
/// Rounds hashed in one step.
pub const ROUNDS_PER_STEP: u64 = 200_000;

/// The tool.
pub struct HashChain;

/// The arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Text to hash first
    #[schemars(length(max = 4096))]
    seed: String,
    /// How many times SHA-256 is applied
    #[schemars(range(min = 1, max = MAX_ROUNDS))]
    rounds: u64,
    /// Pause after each 200k rounds (for demos)
    #[serde(default)]
    #[schemars(range(max = 10_000))]
    pace_ms: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct Checkpoint {
    done: u64,
    digest: String,
    /// Rounds already done when the job last resumed from a checkpoint (for the result).
    #[serde(default)]
    resumed_at: Option<u64>,
}

/// One link of the chain: `sha256(previous digest bytes)`, the first from the seed's bytes.
pub fn hash_rounds(start: &[u8], rounds: u64) -> [u8; 32] {
    let mut cur: [u8; 32] = Sha256::digest(start).into();
    for _ in 1..rounds {
        cur = Sha256::digest(cur).into();
    }
    cur
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if s.len() != 64 {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[async_trait]
impl TypedTool for HashChain {
    type Args = Args;
    const NAME: &'static str = "hash_chain";
    const DESCRIPTION: &'static str = "Applies SHA-256 `rounds` times to `seed` and returns the \
        final hex digest. Long chains run as a durable task with progress and checkpoints.";
    const POLICY: Policy = Policy::Optional;

    fn claim(&self, a: &Args) -> Claim {
        Claim {
            wall: None,
            cpu: Some(Duration::from_nanos(
                a.rounds.saturating_mul(CLAIMED_NS_PER_ROUND),
            )),
        }
    }

    async fn step(&self, a: &Args, ctx: &JobContext) -> Result<Step, JobError> {
        let mut cp: Checkpoint = ctx.checkpoint();
        if ctx.first_step_of_run() && cp.done > 0 {
            // Resumed from a saved checkpoint (after a crash or a hand-over).
            cp.resumed_at = Some(cp.done);
        }
        let n = a.rounds.saturating_sub(cp.done).min(ROUNDS_PER_STEP);
        let began = std::time::Instant::now();
        let start =
            if cp.done == 0 {
                None
            } else {
                Some(unhex(&cp.digest).ok_or_else(|| {
                    JobError::Protocol(ErrorObject::internal("Corrupt checkpoint"))
                })?)
            };
        let seed = a.seed.clone();
        // CPU-bound: off the async threads, on the tenant's turn of the fair CPU pool.
        let digest = ctx
            .cpu(move || match start {
                None => hash_rounds(seed.as_bytes(), n),
                Some(prev) => hash_rounds(&prev, n),
            })
            .await?;
        cp.done += n;
        cp.digest = hex(&digest);
        ctx.progress(
            cp.done as f64,
            Some(a.rounds as f64),
            format!("Hashed {} of {} rounds", cp.done, a.rounds),
        );
        if cp.done >= a.rounds {
            let resumed = cp.resumed_at.unwrap_or(0);
            let mut text = format!("sha256^{}({:?}) = {}", a.rounds, a.seed, cp.digest);
            if resumed > 0 {
                text.push_str(&format!(" (resumed from a checkpoint at round {resumed})"));
            }
            return Ok(Step::Done(json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"digest": cp.digest, "rounds": a.rounds, "resumedAt": resumed},
                "isError": false
            })));
        }
        // The time left at this step's pace, so that clients poll at the rate the job deserves
        // (a ten-minute chain is not polled every second).
        let pace = Duration::from_millis(a.pace_ms);
        let steps_left = (a.rounds - cp.done).div_ceil(ROUNDS_PER_STEP);
        let steps_left = u32::try_from(steps_left).unwrap_or(u32::MAX);
        ctx.expect_remaining((began.elapsed() + pace).saturating_mul(steps_left));
        let cp = serde_json::to_value(&cp).unwrap_or_default();
        if pace.is_zero() {
            return Ok(Step::Continue(cp));
        }
        // The pause is a sleep the worker sees: past a second it parks the task, holding
        // neither a worker nor the invocation its batch-mates share.
        Ok(Step::Sleep(cp, pace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_core::task::TaskStatus;
    use mcp_tasks_core::tools::testkit::ToolKit;

    #[test]
    fn hash_chain_in_pieces_equals_one_piece() {
        let whole = hash_rounds(b"seed", 10);
        let first = hash_rounds(b"seed", 4);
        let rest = hash_rounds(&first, 6);
        assert_eq!(whole, rest);
        assert_eq!(unhex(&hex(&whole)), Some(whole));
    }

    #[tokio::test]
    async fn runs_in_steps_with_progress_to_the_digest() {
        let rounds = 2 * ROUNDS_PER_STEP + 5;
        let job = ToolKit::new(HashChain)
            .run(json!({"seed": "abc", "rounds": rounds}))
            .await
            .unwrap();
        let digest = hex(&hash_rounds(b"abc", rounds));
        assert_eq!(job.text(), format!("sha256^{rounds}(\"abc\") = {digest}"));
        assert_eq!(job.result().unwrap()["structuredContent"]["resumedAt"], 0);
        assert_eq!(job.steps(), 3);
        let done: Vec<f64> = job.progress().iter().map(|p| p.progress).collect();
        assert_eq!(done, [200_000.0, 400_000.0, rounds as f64]);
        assert_eq!(
            job.status_message(),
            Some(format!("Hashed {rounds} of {rounds} rounds").as_str())
        );
    }

    #[tokio::test]
    async fn rounds_written_with_a_fraction_are_the_integer() {
        let job = ToolKit::new(HashChain)
            .run(json!({"seed": "abc", "rounds": 1000.0}))
            .await
            .unwrap();
        let digest = hex(&hash_rounds(b"abc", 1000));
        assert_eq!(job.text(), format!("sha256^1000(\"abc\") = {digest}"));
    }

    #[tokio::test]
    async fn a_crash_resumes_from_the_last_checkpoint_with_the_same_digest() {
        let rounds = 3 * ROUNDS_PER_STEP;
        let mut job = ToolKit::new(HashChain)
            .start(json!({"seed": "s", "rounds": rounds}))
            .await
            .unwrap();
        job.step().await.unwrap();
        job.step().await.unwrap();
        job.crash();
        assert_eq!(job.checkpoint()["done"], 2 * ROUNDS_PER_STEP);
        assert_eq!(job.run().await, TaskStatus::Completed);
        assert_eq!(job.runs(), 2);
        let digest = hex(&hash_rounds(b"s", rounds));
        assert_eq!(
            job.result().unwrap()["structuredContent"],
            json!({"digest": digest, "rounds": rounds, "resumedAt": 2 * ROUNDS_PER_STEP})
        );
        assert!(
            job.text()
                .ends_with("(resumed from a checkpoint at round 400000)")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_stops_it_between_paced_steps() {
        let mut job = ToolKit::new(HashChain)
            .start(json!({"seed": "s", "rounds": MAX_ROUNDS, "pace_ms": 10_000}))
            .await
            .unwrap();
        job.run_for(Duration::from_secs(15)).await;
        assert_eq!(job.steps(), 2, "pausing after the second step");
        assert!(job.cancel());
        assert_eq!(job.status(), TaskStatus::Cancelled);
        assert_eq!(job.checkpoint()["done"], 2 * ROUNDS_PER_STEP);
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_chain_sleeps_between_steps_as_the_worker_sees_it() {
        let rounds = 2 * ROUNDS_PER_STEP + 1;
        let mut job = ToolKit::new(HashChain)
            .start(json!({"seed": "p", "rounds": rounds, "pace_ms": 5_000}))
            .await
            .unwrap();
        match job.step().await.unwrap() {
            Step::Sleep(cp, d) => {
                assert_eq!(cp["done"], ROUNDS_PER_STEP);
                assert_eq!(d, Duration::from_secs(5));
            }
            other => panic!("expected a sleep, got {other:?}"),
        }
        assert_eq!(job.saved_checkpoint()["done"], ROUNDS_PER_STEP, "saved first");
        assert_eq!(job.run().await, TaskStatus::Completed);
        let digest = hex(&hash_rounds(b"p", rounds));
        assert_eq!(job.result().unwrap()["structuredContent"]["digest"], digest);
    }

    #[tokio::test]
    async fn limits_are_the_schemas() {
        let kit = ToolKit::new(HashChain);
        for bad in [
            json!({"seed": "s", "rounds": 0}),
            json!({"seed": "s", "rounds": MAX_ROUNDS + 1}),
            json!({"seed": "s", "rounds": 1, "pace_ms": 10_001}),
            json!({"seed": "x".repeat(4097), "rounds": 1}),
            json!({"seed": "s"}),
            json!({"seed": "s", "rounds": 1, "extra": true}),
        ] {
            let Err(JobError::InvalidParams(m)) = kit.start(bad.clone()).await else {
                panic!("{bad} was accepted");
            };
            assert!(
                m.starts_with("Invalid arguments for tool hash_chain: "),
                "{m}"
            );
        }
        assert_eq!(
            kit.claim(json!({"seed": "s", "rounds": 1000})).cpu,
            Some(Duration::from_micros(300))
        );
    }
}
