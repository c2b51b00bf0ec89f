//! What one tenant can make the deployment store, re-send and hold: bounded, measured through
//! the function binaries.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support_aws::{Env, Options, item_bytes, write_units};
use crate::{TENANT, poll};

/// Client capabilities declaring tasks and elicitation, padded with `pad` bytes.
fn padded_caps(pad: usize) -> Value {
    json!({
        "extensions": {"io.modelcontextprotocol/tasks": {}},
        "elicitation": {"form": {}},
        "experimental": {"pad": "p".repeat(pad)},
    })
}

/// A task's record is rewritten at every lease and checkpoint and read at every poll, so what
/// a client sends in `_meta` must not land in it. Three `hash_chain` tasks, created with no
/// padding, 15 KB of padding (under the 16 KiB `_meta` bound) and 200 KB: the record of each
/// is read once a checkpoint was written, and its size is what DynamoDB bills each checkpoint
/// (a put costs one write unit per started KB). Prints the figures (`PADDED META`).
///
/// Asserted: the 200 KB `_meta` is refused at the edge (`-32602`, HTTP 400, nothing created),
/// and a padded task's record stays under a KB, as an unpadded one (one write unit a checkpoint).
/// It used to take the whole `clientCapabilities`: 197 write units a checkpoint at 200 KB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_meta_never_reaches_the_task_record() {
    let options = Options {
        worker_timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let Some(env) = Env::start("padded_meta", options).await else {
        return;
    };
    let args = json!({"name": "hash_chain",
                      "arguments": {"seed": "pad", "rounds": 200_000_000u64, "pace_ms": 200}});
    let mut sizes = Vec::new();
    let mut refusal = None;
    for pad in [0, 15_000, 200_000] {
        let c = env.client().with_caps(padded_caps(pad));
        let a = c.send("tools/call", args.clone()).await;
        let v = a.json();
        let Some(id) = v["result"]["taskId"].as_str().map(str::to_owned) else {
            refusal = Some((pad, a.status, v));
            continue;
        };
        // Leased and checkpointed: the record as every later checkpoint rewrites it.
        poll(&c, &id, Duration::from_secs(60), |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Hashed"))
        })
        .await;
        let item = env.item(TENANT, &id).await.expect("the task's item");
        let bytes = item_bytes(&item);
        sizes.push((pad, bytes));
        let cancelled = c.call("tasks/cancel", json!({"taskId": id})).await;
        assert!(cancelled.is_object(), "{cancelled}");
    }
    let line: Vec<String> = sizes
        .iter()
        .map(|(pad, bytes)| {
            format!(
                "{pad} B of padding: record {bytes} B, {} write units a checkpoint",
                write_units(*bytes)
            )
        })
        .collect();
    println!(
        "PADDED META {} | 200000 B of padding: {}",
        line.join(" | "),
        refusal
            .as_ref()
            .map_or("accepted".into(), |(_, s, v)| format!(
                "refused, HTTP {s}: {v}"
            ))
    );
    let (pad, status, v) = refusal.expect("the 200 KB _meta was refused");
    assert_eq!(pad, 200_000, "only the oversized _meta is refused: {v}");
    assert_eq!(
        (status, v["error"]["code"].as_i64()),
        (400, Some(-32602)),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(message, "params._meta is larger than 16384 bytes");
    assert_eq!(
        sizes.len(),
        2,
        "the unpadded and the 15 KB tasks were created"
    );
    for (pad, bytes) in &sizes {
        assert_eq!(
            write_units(*bytes),
            1,
            "{pad} B of padding made a {bytes} B record"
        );
    }
    env.report("padded _meta");
}
