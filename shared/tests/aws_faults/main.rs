//! Fault injection against the real AWS adapters: [`DynamoStore`] and [`SqsQueue`] on the
//! emulator, driven by the real [`Worker`], [`Engine`] and [`Sweeper`] in-process, with SQS
//! messages received, retried and deleted by the worker function's own policy
//! ([`decide`]). The same guarantees `tests/faults.rs` checks on the local server:
//!
//! 1. `duplicate_delivery` — every work message (starts and continuations) is sent twice and
//!    two consumers race over the queue: each job's effect runs once, no two runs of one job
//!    ever overlap, each task completes once with the exact result.
//! 2. `crash_mid_job` — runs are killed (their tokio task aborted) after saving at least one
//!    checkpoint and their message is left to come back after the queue's visibility timeout:
//!    the next run resumes from the checkpoint (never from zero), several cycles per task,
//!    and the task completes once with the exact result.
//! 3. `cancel_race` — `tasks/cancel` races the worker finishing, on DynamoDB's conditional
//!    writes: exactly one terminal state, which never changes afterwards.
//! 4. `enqueue_crash` — a task stored without its message (the enqueue failed), and a task
//!    whose run died and whose message is gone: the sweep re-enqueues both and they complete
//!    once (the dead one from its checkpoint).
//! 5. `update_retry` — the same `tasks/update` answer sent twice, and three times at once: one
//!    write, one resume message, one effect.
//! 6. `lambda_handler` — the worker function's own handler ([`SqsWorker::handle`], built-in
//!    tools) fed SQS batches shaped as the event source mapping delivers them, every message
//!    sent twice, short invocations: each task completes once (one terminal write), with the
//!    exact result, in no more runs than it has steps.
//!
//! Each suite prints one `aws_faults <suite>: trials=… lost=… doubled=…` line and fails on any
//! loss or doubling. Suites 1–5 run a test tool (`tally`) that counts its own steps, runs and
//! effects, so "ran once" is measured; its result is a digest of every step, so "exact" is
//! too. The store is wrapped to count terminal writes per task, so "completed once" is
//! measured at the store as well.
//!
//! Needs both emulators, as `aws_lambda` does; without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set (to anything but empty or `0`).
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks-core --features lambda --test aws_faults -- --nocapture
//! ```
//!
//! Knobs:
//! - `AWS_FAULT_TRIALS` (default 1) multiplies every suite's trial count for long runs (e.g.
//!   `AWS_FAULT_TRIALS=10`, a few minutes);
//! - `AWS_FAULT_SEED` replays a run's random choices (each suite prints its seed);
//! - `AWS_FAULT_WRITE_LOCK=0` stops serializing each task's conditional writes in the test
//!   (see `Journaled`). The lock is on by default because moto's conditional `PutItem` is not
//!   atomic under concurrent requests; turn it off against DynamoDB Local or DynamoDB itself.
//!   Either way, two successful writes from one read version fail the suite as an emulator
//!   violation, so a broken emulator is never mistaken for a doubled task, nor hides one.
//!
//! On a failure the suite prints, for each bad task, what the tool, the consumers and the
//! store saw (timestamped), which is usually enough to tell which race went wrong.
//!
//! Timing: leases are wall-clock and the test queues use a 2-second visibility timeout, so the
//! crash cycles take real seconds. Nothing here asserts speed; every wait polls the store or
//! the queue against a generous deadline, and the sweep is re-run until its listing (a
//! DynamoDB index, which may lag) has seen every task.
//!
//! One file per suite (`duplicate_delivery.rs`, `crash.rs` for 2 and 4, `cancel_race.rs`,
//! `update_retry.rs`, `lambda_handler.rs`); what they share is the counting tool (`tally.rs`),
//! the journaled store (`journaled.rs`), the table and queue (`rig.rs`), the consumers
//! (`consumers.rs`) and the judging of what they did (`judge.rs`).

#[path = "../common/mod.rs"]
mod common;

mod cancel_race;
mod consumers;
mod crash;
mod duplicate_delivery;
mod journaled;
mod judge;
mod lambda_handler;
mod rig;
mod tally;
mod update_retry;

use std::sync::Mutex;

const TENANT: &str = "tenant-faults";
/// The queue's `maxReceiveCount` as the worker function is told it.
const MAX_RECEIVES: u32 = 50;
/// The test queues' visibility timeout (seconds): a failed or crashed delivery comes back
/// this long after it was received.
const VISIBILITY: &str = "2";

// ── knobs and randomness ──

/// `AWS_FAULT_TRIALS`, the multiplier of every suite's trial count (at least 1).
fn scale() -> usize {
    std::env::var("AWS_FAULT_TRIALS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// The suite's generator, seeded from `AWS_FAULT_SEED` or the clock (the seed is printed).
fn rng(suite: &str) -> common::Rng {
    common::Rng::new("AWS_FAULT_SEED", &format!("aws_faults {suite}"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
