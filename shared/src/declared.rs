//! Declared tools: tools from a manifest (docs/tool-manifest.md) whose steps run in someone
//! else's code — an AWS Lambda function in any runtime, an HTTPS endpoint, or (locally) a
//! program — asked one step at a time over the step protocol (docs/step-protocol.md). To
//! clients they are tools like any other: tasks or synchronous answers, progress,
//! `input_required`, cancel, the same quotas, isolation, metrics and traces, because the worker
//! runs them exactly as it runs a Rust tool's job.
//!
//! - [`manifest`] — reading and checking the TOML file, and building the tools;
//! - [`entry`] — one checked entry: what the manifest makes and a tool runs by;
//! - [`step_protocol`] — the request and the answer of `mcp-tasks-step/1`;
//! - [`tool`] — [`DeclaredTool`]: one step, one request; retries parked between tries;
//! - [`target`] — the [`Target`] port and what a host lends targets;
//! - [`command`], [`http`], [`lambda`] — the step targets ([`LambdaTarget`] over a
//!   [`LambdaInvoker`]: the AWS adapter signs Invoke requests);
//! - [`workflow`] — a Step Functions workflow as a task ([`WorkflowTool`] over [`StatesApi`]).

pub mod command;
pub mod entry;
pub mod http;
pub mod lambda;
pub mod manifest;
pub mod step_protocol;
pub mod target;
pub mod tool;
pub mod workflow;

pub use lambda::LambdaTarget;
pub use manifest::{Manifest, ManifestError};
pub use target::{
    CallLimits, LambdaInvoker, LazySecrets, RequestSigner, SecretFetch, StatesApi, StatesError,
    Target, TargetError, TargetHost, TraceId,
};
pub use tool::DeclaredTool;
pub use workflow::WorkflowTool;
