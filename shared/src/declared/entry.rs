//! A declared tool as the manifest describes it, once checked: what the manifest makes and the
//! tool runs by.

use std::time::Duration;

use serde_json::Value;

use crate::tools::Policy;

/// One checked entry, before its target is built.
#[derive(Debug, Clone)]
pub struct DeclaredEntry {
    /// `tools/list`'s name.
    pub name: String,
    /// `tools/list`'s title.
    pub title: Option<String>,
    /// `tools/list`'s description.
    pub description: String,
    /// `tools/list`'s `inputSchema`.
    pub input_schema: Value,
    /// Whether it runs as a task.
    pub policy: Policy,
    /// Where its steps run.
    pub target: TargetKind,
    /// Its limits and options.
    pub limits: Limits,
}

impl DeclaredEntry {
    /// The tool's definition. A manifest is read once per process (at start), so its strings
    /// live as long as the process: leaking them keeps `ToolDef`'s `&'static str`s for every
    /// tool alike.
    pub fn tool_def(&self) -> crate::tools::ToolDef {
        let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
        crate::tools::ToolDef {
            name: leak(&self.name),
            description: leak(&self.description),
            input_schema: self.input_schema.clone(),
            policy: self.policy,
        }
    }
}

/// Where an entry's steps run.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetKind {
    /// An AWS Lambda function, by name or ARN.
    Lambda(String),
    /// An HTTPS endpoint (HTTP to loopback), with an optional secret header.
    Http {
        /// The URL.
        url: String,
        /// The secret header, if any.
        secret: Option<HttpSecret>,
        /// The AWS service each request is signed for (SigV4), if any.
        sigv4: Option<String>,
    },
    /// An AWS Step Functions state machine (Standard): one execution per task, looked at every
    /// `poll`.
    StepFunctions {
        /// The state machine's ARN.
        machine: String,
        /// The time between looks.
        poll: Duration,
    },
    /// A program and its arguments, with the variables it is given.
    Command {
        /// Program, then arguments.
        argv: Vec<String>,
        /// Environment variables passed on.
        env: Vec<String>,
    },
}

/// An `http` target's secret header: its name and where its value comes from. The value is
/// read once, never per step: a `secret_env` when the manifest's tools are built, a
/// `secret_arn` at the first step that needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSecret {
    /// The header's name (`Authorization` unless the entry names another).
    pub header: String,
    /// The environment variable holding the value (`secret_env`): the local server's source,
    /// and the deployed functions' where no `arn` is given.
    pub env: Option<String>,
    /// The Secrets Manager secret holding the value (`secret_arn`): read by the deployed
    /// functions at the first step that needs it; the local server reads `env` instead.
    pub arn: Option<String>,
}

/// An entry's limits and options (docs/tool-manifest.md).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// How long one step may take.
    pub step_timeout: Duration,
    /// The largest answer read.
    pub max_answer_bytes: usize,
    /// How many times a step that failed in a retried way is asked again.
    pub max_retries: u32,
    /// The task's running time, when the entry bounds it below the server's limit.
    pub max_task_wall: Option<Duration>,
    /// Whether requests carry the tenant.
    pub pass_tenant: bool,
    /// What the target speaks.
    pub protocol: Wire,
}

/// What a target speaks (the entry's `protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wire {
    /// `mcp-tasks-step/1` (docs/step-protocol.md): asked one step at a time.
    #[default]
    Step,
    /// `plain`: called once per task with exactly the arguments; its answer is the result.
    Plain,
}

/// A `sigv4` service name (`execute-api`, `lambda`, `vpc-lattice-svcs`, …): 1 to 64 of
/// a-z 0-9 and `-`.
pub(crate) fn sigv4_service(name: String) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    match ok {
        true => Ok(name),
        false => Err(format!(
            "sigv4 must be an AWS service name to sign for (1 to 64 of a-z 0-9 -, e.g. \
             \"execute-api\"): {}",
            crate::protocol::truncate(&name, 64)
        )),
    }
}
