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

/// Where an entry's steps run.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetKind {
    /// An AWS Lambda function, by name or ARN.
    Lambda(String),
    /// An HTTPS endpoint (HTTP to loopback), with an optional secret header.
    Http {
        /// The URL.
        url: String,
        /// The secret header: its name and the variable holding its value.
        secret: Option<(String, String)>,
    },
    /// A program and its arguments, with the variables it is given.
    Command {
        /// Program, then arguments.
        argv: Vec<String>,
        /// Environment variables passed on.
        env: Vec<String>,
    },
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
}
