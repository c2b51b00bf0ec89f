//! The built-in tools: each shows one path through the engine, doing real, checkable work.
//!
//! | tool | policy | shows |
//! |---|---|---|
//! | `hash_chain` | optional task | CPU-bound chunks off the async threads, progress, checkpoints, resume after a crash |
//! | `wait` | optional task | a long I/O-bound wait; many run at once |
//! | `confirm_action` | optional task | `input_required` (task) or SEP-2322 rounds (synchronous) |
//! | `lint_json` | sync | a tool error the model reads (`isError: true`) |
//! | `unreliable_upstream` | task only | a protocol-level failure (`failed` with a JSON-RPC error) |

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Claim, Policy, Preflight, Tool, ToolDef, object_schema};
use crate::jobs::{JobContext, JobError, Step, accepted, elicitation, text_result};
use crate::protocol::{ErrorObject, INTERNAL_ERROR};

/// The built-in tools, in `tools/list` order.
pub fn builtin_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(HashChain::new()),
        Arc::new(Wait::new()),
        Arc::new(ConfirmAction::new()),
        Arc::new(LintJson::new()),
        Arc::new(UnreliableUpstream::new()),
    ]
}

/// Largest `rounds` for `hash_chain`.
pub const MAX_ROUNDS: u64 = 1_000_000_000;
/// CPU time one round is claimed to take (SHA-256 of 32 bytes without SHA extensions is about
/// 0.3 µs on the machines we measured; the claim only refuses what could never fit the CPU
/// quota, the worker measures the real use).
const CLAIMED_NS_PER_ROUND: u64 = 300;
const ROUNDS_PER_STEP: u64 = 200_000;

/// SHA-256 applied `rounds` times to `seed`, in steps of [`ROUNDS_PER_STEP`].
struct HashChain {
    def: ToolDef,
}

#[derive(Deserialize)]
struct HashArgs {
    seed: String,
    rounds: u64,
    /// Extra pause per step, to make a run observable (demos, crash tests).
    #[serde(default)]
    pace_ms: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct HashCheckpoint {
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

impl HashChain {
    fn new() -> Self {
        Self {
            def: ToolDef {
                name: "hash_chain",
                description: "Applies SHA-256 `rounds` times to `seed` and returns the final hex digest. \
                    Long chains run as a durable task with progress and checkpoints.",
                input_schema: object_schema(
                    json!({
                        "seed": {"type": "string", "maxLength": 4096, "description": "Text to hash first"},
                        "rounds": {"type": "integer", "minimum": 1, "maximum": MAX_ROUNDS},
                        "pace_ms": {"type": "integer", "minimum": 0, "maximum": 10000,
                            "description": "Pause after each 200k rounds (for demos)"}
                    }),
                    &["seed", "rounds"],
                ),
                policy: Policy::Optional,
            },
        }
    }

    fn args(ctx: &JobContext) -> Result<HashArgs, JobError> {
        let a: HashArgs = ctx.args()?;
        if a.rounds == 0 || a.rounds > MAX_ROUNDS {
            return Err(JobError::InvalidParams(format!(
                "rounds must be within 1..={MAX_ROUNDS}"
            )));
        }
        if a.pace_ms > 10_000 {
            return Err(JobError::InvalidParams(
                "pace_ms must be at most 10000".into(),
            ));
        }
        Ok(a)
    }
}

#[async_trait]
impl Tool for HashChain {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        Self::args(ctx)?;
        Ok(Preflight::Proceed(Value::Null))
    }

    fn claim(&self, arguments: &Value) -> Claim {
        let rounds = arguments.get("rounds").and_then(Value::as_u64).unwrap_or(0);
        Claim {
            wall: None,
            cpu: Some(Duration::from_nanos(
                rounds.saturating_mul(CLAIMED_NS_PER_ROUND),
            )),
        }
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let a = Self::args(ctx)?;
        let mut cp: HashCheckpoint = ctx.checkpoint();
        if ctx.first_step_of_run() && cp.done > 0 {
            // Resumed from a saved checkpoint (after a crash or a hand-over).
            cp.resumed_at = Some(cp.done);
        }
        let n = (a.rounds - cp.done).min(ROUNDS_PER_STEP);
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
        if a.pace_ms > 0 {
            tokio::time::sleep(Duration::from_millis(a.pace_ms)).await;
        }
        Ok(Step::Continue(
            serde_json::to_value(&cp).unwrap_or_default(),
        ))
    }
}

/// Waits `seconds`, reporting progress each second.
struct Wait {
    def: ToolDef,
}

#[derive(Deserialize)]
struct WaitArgs {
    seconds: f64,
}

impl Wait {
    fn new() -> Self {
        Self {
            def: ToolDef {
                name: "wait",
                description: "Waits the given number of seconds (up to a day), then says so. \
                    Stands in for any slow I/O-bound job.",
                input_schema: object_schema(
                    json!({"seconds": {"type": "number", "minimum": 0, "maximum": 86400}}),
                    &["seconds"],
                ),
                policy: Policy::Optional,
            },
        }
    }

    fn millis(ctx: &JobContext) -> Result<u64, JobError> {
        let a: WaitArgs = ctx.args()?;
        if !(0.0..=86_400.0).contains(&a.seconds) {
            return Err(JobError::InvalidParams(
                "seconds must be within 0..=86400".into(),
            ));
        }
        Ok((a.seconds * 1000.0) as u64)
    }
}

#[async_trait]
impl Tool for Wait {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        Self::millis(ctx)?;
        Ok(Preflight::Proceed(Value::Null))
    }

    fn claim(&self, arguments: &Value) -> Claim {
        let seconds = arguments.get("seconds").and_then(Value::as_f64);
        Claim {
            wall: seconds
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| Duration::from_secs_f64(s.min(1e9))),
            cpu: None,
        }
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let total = Self::millis(ctx)?;
        let waited: u64 = ctx.checkpoint();
        if waited >= total {
            return Ok(Step::Done(text_result(format!(
                "Waited {} s.",
                total as f64 / 1000.0
            ))));
        }
        let slice = (total - waited).min(1000);
        tokio::time::sleep(Duration::from_millis(slice)).await;
        let waited = waited + slice;
        ctx.progress(
            waited as f64,
            Some(total as f64),
            format!(
                "Waited {:.1} of {:.1} s",
                waited as f64 / 1000.0,
                total as f64 / 1000.0
            ),
        );
        Ok(Step::Continue(json!(waited)))
    }
}

/// Asks for confirmation before acting on a named item.
struct ConfirmAction {
    def: ToolDef,
}

#[derive(Deserialize)]
struct ConfirmArgs {
    action: String,
    target: String,
}

impl ConfirmAction {
    fn new() -> Self {
        Self {
            def: ToolDef {
                name: "confirm_action",
                description: "Asks the user to confirm an action on a target, then reports the decision.",
                input_schema: object_schema(
                    json!({"action": {"type": "string", "maxLength": 200},
                           "target": {"type": "string", "maxLength": 200}}),
                    &["action", "target"],
                ),
                policy: Policy::Optional,
            },
        }
    }
}

#[async_trait]
impl Tool for ConfirmAction {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn preflight(&self, ctx: &JobContext) -> Result<Preflight, JobError> {
        let _: ConfirmArgs = ctx.args()?;
        if !ctx.client_declares("elicitation") {
            return Err(JobError::Protocol(
                crate::protocol::McpError::missing_capability(
                    "confirm_action needs the elicitation capability",
                    json!({"elicitation": {}}),
                )
                .error,
            ));
        }
        Ok(Preflight::Proceed(Value::Null))
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let a: ConfirmArgs = ctx.args()?;
        let Some(answer) = ctx.input("confirm") else {
            let schema = json!({"type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
                "required": ["confirm"]});
            return Ok(Step::NeedInput(
                [(
                    "confirm".to_owned(),
                    elicitation(&format!("{} {}?", a.action, a.target), schema),
                )]
                .into(),
            ));
        };
        let yes = accepted(answer)?.is_some_and(|c| c.get("confirm") == Some(&json!(true)));
        Ok(Step::Done(text_result(if yes {
            format!("Confirmed: {} {}.", a.action, a.target)
        } else {
            format!("Not confirmed: {} {} was not done.", a.action, a.target)
        })))
    }
}

/// Checks that a text is valid JSON; invalid JSON is a tool error the model can act on.
struct LintJson {
    def: ToolDef,
}

impl LintJson {
    fn new() -> Self {
        Self {
            def: ToolDef {
                name: "lint_json",
                description: "Checks whether `text` is valid JSON and says where it is not.",
                input_schema: object_schema(json!({"text": {"type": "string"}}), &["text"]),
                policy: Policy::Sync,
            },
        }
    }
}

#[async_trait]
impl Tool for LintJson {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        #[derive(Deserialize)]
        struct A {
            text: String,
        }
        let a: A = ctx.args()?;
        match serde_json::from_str::<Value>(&a.text) {
            Ok(v) => Ok(Step::Done(text_result(format!(
                "Valid JSON ({}).",
                match v {
                    Value::Object(_) => "an object",
                    Value::Array(_) => "an array",
                    _ => "a scalar",
                }
            )))),
            Err(e) => Err(JobError::Tool(format!(
                "Invalid JSON at line {}, column {}: {e}",
                e.line(),
                e.column()
            ))),
        }
    }
}

/// A job whose (simulated) upstream is down: it ends `failed` with a JSON-RPC error.
struct UnreliableUpstream {
    def: ToolDef,
}

impl UnreliableUpstream {
    fn new() -> Self {
        Self {
            def: ToolDef {
                name: "unreliable_upstream",
                description: "Simulates a job whose upstream service is unavailable: the task fails \
                    with a JSON-RPC error after `after_ms` (default 500).",
                input_schema: object_schema(
                    json!({"after_ms": {"type": "integer", "minimum": 0, "maximum": 60000}}),
                    &[],
                ),
                policy: Policy::TaskOnly,
            },
        }
    }
}

#[async_trait]
impl Tool for UnreliableUpstream {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError> {
        let after = ctx
            .arguments()
            .get("after_ms")
            .and_then(Value::as_u64)
            .unwrap_or(500)
            .min(60_000);
        tokio::time::sleep(Duration::from_millis(after)).await;
        Err(JobError::Protocol(ErrorObject {
            code: INTERNAL_ERROR,
            message: "Upstream service unavailable (simulated)".into(),
            data: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_chain_in_pieces_equals_one_piece() {
        let whole = hash_rounds(b"seed", 10);
        let first = hash_rounds(b"seed", 4);
        let rest = hash_rounds(&first, 6);
        assert_eq!(whole, rest);
        assert_eq!(unhex(&hex(&whole)), Some(whole));
    }
}
