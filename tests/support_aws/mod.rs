//! A test-only Lambda environment for the real function binaries (`mcp`, `tasks`, `worker`,
//! `sweep`) over the DynamoDB/SQS emulator:
//!
//! - a **Lambda Runtime API** per function (`/2018-06-01/runtime/...` on 127.0.0.1), through
//!   which the test invokes the function with an event and a deadline of its choosing;
//! - an **API Gateway front** (REST API proxy events, v1) on a real port, routing
//!   `Mcp-Method: tasks/*` to `tasks` and everything else to `mcp`, as the custom-domain
//!   routing rules of template.yaml do. The mcp API's integration streams by default
//!   (`ResponseTransferMode: STREAM`; [`Options::streaming`]): the function answers with a
//!   streamed HTTP integration response (a JSON prelude, 8 NUL bytes, then the body), which
//!   the front passes on chunk by chunk within API Gateway's stream limits (15 minutes in
//!   all, 5 minutes without a byte). The tasks API is always buffered;
//! - an **event source mapping** that long-polls the queue, invokes `worker` with SQS batch
//!   events and deletes exactly the messages not reported in `batchItemFailures`;
//! - a **counting proxy** between each function and the emulator, which tallies the DynamoDB
//!   and SQS operations (`X-Amz-Target`) every function performs.
//!
//! Every child process is killed on drop; the functions' logs go to a file under
//! `CARGO_TARGET_TMPDIR` and, when the test panics, to its output.
//!
//! One file per emulator or subject:
//!
//! - `binaries.rs`: building the function binaries (and any `cargo build`'s executables);
//! - `runtime.rs`: the Lambda Runtime API of one function, and its buffered answers;
//! - `streamed.rs`: the Runtime API's streamed answers (prelude, body, error trailers);
//! - `gateway.rs`: the API Gateway front, buffered and streaming integrations;
//! - `esm.rs`: the SQS event source mapping in front of the worker;
//! - `proxy.rs`: the SDK proxy that counts every DynamoDB/SQS call, and what the template
//!   grants each function;
//! - `xray.rs`: the stand-in X-Ray daemon;
//! - `secrets.rs`: the stand-in Secrets Manager (the mcp function's state key);
//! - `env.rs`: [`Env`], the four functions wired together over a fresh table and queue;
//! - `solo.rs`: [`Solo`], one function binary alone under its own Runtime API;
//! - `units.rs`: what DynamoDB bills for an item (its size, a put's write units);
//! - `net.rs`: what the emulators share (loopback listeners, request ids, the clock).

#![allow(dead_code)]

mod binaries;
mod env;
mod esm;
mod gateway;
mod net;
mod proxy;
mod runtime;
mod secrets;
mod solo;
mod streamed;
mod units;
mod xray;

// Each test target uses its own part of the harness.
#[allow(unused_imports)]
pub use self::{
    binaries::{Binaries, binaries, cargo_build, release_binaries},
    env::{Env, Options},
    esm::EsmStats,
    proxy::{Counts, DYNAMO_READS, DYNAMO_WRITES, granted_actions},
    runtime::{Output, RuntimeApi, Streamed},
    secrets::{SecretAnswer, SecretRequest, SecretsStandIn},
    solo::Solo,
    units::{item_bytes, write_units},
};
