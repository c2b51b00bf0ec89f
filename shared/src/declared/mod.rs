//! Declared tools: tools from a manifest (docs/tool-manifest.md) whose steps run in someone
//! else's code — an AWS Lambda function in any runtime, an HTTPS endpoint, or (locally) a
//! program — asked one step at a time over the step protocol (docs/step-protocol.md). To
//! clients they are tools like any other: tasks or synchronous answers, progress,
//! `input_required`, cancel, the same quotas, isolation, metrics and traces, because the worker
//! runs them exactly as it runs a Rust tool's job.
//!
//! - [`manifest`] — reading and checking the TOML file, and building the tools;
//! - [`entry`] — one checked entry: what the manifest makes and a tool runs by;
//! - [`protocol`] — the request and the answer of `mcp-tasks-step/1`;
//! - [`tool`] — [`DeclaredTool`]: one step, one request; retries parked between tries;
//! - [`target`] — the [`Target`] port and what a host lends targets;
//! - [`command`], [`http`] — two targets; the Lambda one is [`LambdaTarget`] over a
//!   [`LambdaInvoker`] (the AWS adapter signs Invoke requests).

use std::sync::Arc;

use async_trait::async_trait;

pub mod command;
pub mod entry;
pub mod http;
pub mod manifest;
pub mod protocol;
pub mod target;
pub mod tool;
pub mod workflow;

pub use manifest::{Manifest, ManifestError};
pub use target::{
    CallLimits, LambdaInvoker, LazySecrets, RequestSigner, SecretFetch, Target, TargetError,
    TargetHost, TraceId,
};
pub use tool::DeclaredTool;
pub use workflow::{StatesApi, StatesError, WorkflowTool};

/// The `lambda` target: a synchronous invocation of a function per step.
pub struct LambdaTarget {
    /// The function's name or ARN.
    pub function: String,
    /// Who invokes it.
    pub invoker: Arc<dyn LambdaInvoker>,
}

#[async_trait]
impl Target for LambdaTarget {
    async fn call(&self, request: Vec<u8>, limits: CallLimits) -> Result<Vec<u8>, TargetError> {
        self.invoker.invoke(&self.function, request, limits).await
    }
}
