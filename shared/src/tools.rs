//! Tools: what a tool declares, and the registry. This crate holds no tool: the tools a server
//! serves are passed in by whoever assembles it (`tools/src/lib.rs` for the Rust ones, a
//! manifest for declared ones: [`crate::declared`]); docs/add-a-tool.md says how to add one.
//!
//! A Rust tool is a [`TypedTool`] (its arguments a Rust type whose derived JSON Schema is the
//! `inputSchema`, a name, a description, a [`Policy`] and a step-wise job, see
//! [`crate::jobs`]); the kit ([`testkit`], feature `testkit`) runs it in a test, step by step.
//! [`Tool`] is the untyped interface the engine and the worker use (and the conformance
//! fixtures implement directly, their schemas written out as the official suite expects them).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::jobs::{JobContext, JobError, Step};

/// Tools shaped like the demonstration ones, for this crate's own tests (the tools a server
/// serves live outside it: `tools/`).
#[cfg(test)]
pub(crate) mod doubles;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod typed;

pub use typed::{TypedTool, input_schema, typed};

/// Whether a tool runs as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Never a task: always answered inline.
    Sync,
    /// A task when the request declared the tasks extension, inline otherwise (within the
    /// synchronous budget).
    Optional,
    /// Only as a task: `-32021` when the request did not declare the extension.
    TaskOnly,
}

/// What `tools/list` shows, plus the policy.
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Tool name.
    pub name: &'static str,
    /// Description for the model.
    pub description: &'static str,
    /// JSON Schema of the arguments (served verbatim).
    pub input_schema: Value,
    /// Task policy.
    pub policy: Policy,
}

/// What happens before a task is created.
#[derive(Debug)]
pub enum Preflight {
    /// Create the task; the value is its first checkpoint.
    Proceed(Value),
    /// Ask first, synchronously (SEP-2322 rounds), then try again.
    NeedInput(BTreeMap<String, Value>),
}

/// The work one call of a tool claims, estimated from its arguments before any task exists:
/// checked against the per-task quotas ([`crate::quota::Quotas`]) at the edge, so a call that
/// could never be allowed to finish is refused at once instead of failing hours later.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Claim {
    /// Wall time the job will run (a wait, a poll of something slow).
    pub wall: Option<Duration>,
    /// CPU time the job will use on the CPU pool.
    pub cpu: Option<Duration>,
}

/// How the worker runs a tool's jobs, beyond the server's settings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunPolicy {
    /// A longest running time for one task below the server's own (the worker stops the job
    /// at the smaller of the two).
    pub max_task_wall: Option<Duration>,
}

/// A tool: its definition and its step-wise job.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name, description, schema, policy.
    fn def(&self) -> &ToolDef;

    /// The tool's name (its [`ToolDef::name`]). A tool that derives its definition at the first
    /// [`Tool::def`] (a [typed](typed::typed) one) answers without deriving it, so a registry
    /// is built at cold start without any tool's schema.
    fn name(&self) -> &'static str {
        self.def().name
    }

    /// Runs before a task is created: check arguments (so a bad call is refused at once
    /// rather than becoming a failed task) or ask questions synchronously first.
    async fn preflight(&self, _ctx: &JobContext) -> Result<Preflight, JobError> {
        Ok(Preflight::Proceed(Value::Null))
    }

    /// One step of the job.
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError>;

    /// The work a call with these arguments claims (default: nothing known in advance; the
    /// worker still stops a job at the per-task limits while it runs).
    fn claim(&self, _arguments: &Value) -> Claim {
        Claim::default()
    }

    /// How the worker runs this tool's jobs (default: the server's settings alone).
    fn run_policy(&self) -> RunPolicy {
        RunPolicy::default()
    }

    /// Called when a task of this tool ends before its job did (cancelled, stopped at a
    /// limit, expired), with its task id and last checkpoint: a tool whose work runs elsewhere
    /// (a Step Functions execution) stops it here. Best effort and possibly more than once;
    /// by default nothing.
    async fn abandon(&self, _task_id: &str, _checkpoint: &Value) {}

    /// A human-readable title for `tools/list` (default: none).
    fn title(&self) -> Option<&str> {
        None
    }
}

/// A tool shows as its name (options and registries holding tools stay `Debug`).
impl std::fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tool({})", self.name())
    }
}

/// A tool's job, for the runner that steps it (as the worker, the synchronous lane and the
/// test kit do).
impl crate::jobs::runner::Steps for Arc<dyn Tool> {
    fn step<'a>(&'a self, ctx: &'a JobContext) -> crate::jobs::runner::StepFuture<'a> {
        Tool::step(&**self, ctx)
    }
}

/// The tools of one server, in a fixed order. What is derived from their definitions (the
/// `tools/list` body, the mirrored headers, the compiled schemas) is built at its first need,
/// once: a cold start builds none of it, and an instance that never answers `tools/list`
/// never does.
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
    by_name: HashMap<&'static str, usize>,
    /// The `tools` array of `tools/list` (on first use).
    list: OnceLock<Value>,
    /// Per tool, the arguments mirrored in `Mcp-Param-*` headers (on first use).
    mirrored: Vec<OnceLock<Vec<(String, String)>>>,
    /// Per tool, its input schema compiled (on first use), or why it cannot be.
    validators: Vec<OnceLock<Result<crate::schema::Validator, String>>>,
    /// How [`Registry::validate`] checks a tool's arguments: [`Registry::check_schema`] once
    /// [`Registry::checking_arguments`] set it, else [`Registry::not_checked`]. Reached only
    /// through this pointer, the schema checker is linked into the programs that serve
    /// `tools/call` (the mcp function, the local server) and not into the worker or the tasks
    /// function.
    check: fn(&Self, usize, &Value) -> Result<(), String>,
}

/// Most validation errors named in one refusal.
const MAX_ARGUMENT_ERRORS: usize = 3;

impl Registry {
    /// A registry of `tools`, in that order, for running their jobs (the worker) or serving
    /// `tasks/*` only: it does not check arguments ([`Registry::checking_arguments`] makes it
    /// do so). A later tool of a name already listed is dropped, the first kept: the hosts refuse
    /// such a pair before they get here ([`crate::app::all_tools`]).
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut by_name = HashMap::new();
        let mut kept: Vec<Arc<dyn Tool>> = Vec::new();
        for t in tools {
            if by_name.contains_key(t.name()) {
                continue;
            }
            by_name.insert(t.name(), kept.len());
            kept.push(t);
        }
        let mirrored = kept.iter().map(|_| OnceLock::new()).collect();
        let validators = kept.iter().map(|_| OnceLock::new()).collect();
        Self {
            tools: kept,
            by_name,
            list: OnceLock::new(),
            mirrored,
            validators,
            check: Self::not_checked,
        }
    }

    /// This registry, checking each call's arguments against its tool's `inputSchema`
    /// ([`Registry::validate`]): what a host that serves `tools/call` builds.
    pub fn checking_arguments(mut self) -> Self {
        self.check = Self::check_schema;
        self
    }

    /// [`Registry::validate`] of a registry built without [`Registry::checking_arguments`]:
    /// a host wired that way would take arguments nobody checked, so every call is refused,
    /// loudly, instead.
    fn not_checked(&self, i: usize, _arguments: &Value) -> Result<(), String> {
        let name = self.tools[i].name();
        tracing::error!(
            tool = name,
            "arguments reached a registry that does not check them"
        );
        Err(format!("Tool {name} cannot take calls on this server"))
    }

    /// Checks `arguments` against the tool's declared `inputSchema` (JSON Schema 2020-12, no
    /// remote references): the one check of arguments at the edge, before any task exists or
    /// any step runs. The message names where and what (never the argument values, which are
    /// the caller's and may be large). An unknown tool passes (the caller refuses it anyway).
    pub fn validate(&self, name: &str, arguments: &Value) -> Result<(), String> {
        let Some(&i) = self.by_name.get(name) else {
            return Ok(());
        };
        (self.check)(self, i, arguments)
    }

    /// [`Registry::validate`] of tool `i`, with its compiled schema.
    fn check_schema(&self, i: usize, arguments: &Value) -> Result<(), String> {
        let name = self.tools[i].name();
        let validator = self.validators[i].get_or_init(|| {
            crate::schema::Validator::new(&self.tools[i].def().input_schema).map_err(|e| {
                tracing::error!(tool = name, error = %e, "a tool's inputSchema does not compile");
                format!("Tool {name} has an invalid input schema")
            })
        });
        let validator = validator.as_ref().map_err(Clone::clone)?;
        let errors: Vec<String> = validator
            .errors(arguments, MAX_ARGUMENT_ERRORS)
            .into_iter()
            .map(|e| {
                let line = format!("arguments{}: {}", e.path, e.message);
                crate::protocol::truncate(&line, 200)
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "Invalid arguments for tool {}: {}",
                crate::protocol::truncate(name, 64),
                errors.join("; ")
            ))
        }
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// The `(header token, argument)` pairs a tool mirrors in `Mcp-Param-*` headers.
    pub fn mirrored_params(&self, name: &str) -> &[(String, String)] {
        self.by_name.get(name).map_or(&[], |&i| {
            self.mirrored[i].get_or_init(|| {
                crate::protocol::headers::mirrored_params(&self.tools[i].def().input_schema)
            })
        })
    }

    /// The `tools` array of `tools/list`.
    pub fn list(&self) -> &Value {
        self.list.get_or_init(|| {
            Value::Array(
                self.tools
                    .iter()
                    .map(|t| {
                        let d = t.def();
                        let mut entry = Map::new();
                        entry.insert("name".into(), json!(d.name));
                        entry.insert("description".into(), json!(d.description));
                        entry.insert("inputSchema".into(), d.input_schema.clone());
                        if let Some(title) = t.title() {
                            entry.insert("title".into(), json!(title));
                        }
                        Value::Object(entry)
                    })
                    .collect(),
            )
        })
    }

    /// Names in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.name()).collect()
    }
}

/// An object schema with the given properties and required names; no other property is
/// accepted (arguments nobody reads are refused, not stored and carried with the task).
pub fn object_schema(properties: Value, required: &[&str]) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!("object"));
    m.insert("properties".into(), properties);
    m.insert("additionalProperties".into(), json!(false));
    if !required.is_empty() {
        m.insert("required".into(), json!(required));
    }
    Value::Object(m)
}
