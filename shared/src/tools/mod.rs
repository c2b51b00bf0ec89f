//! Tools: what a tool declares, the registry, and the built-in and conformance tool sets.
//!
//! Adding a tool is one file: a [`ToolDef`] (name, description, input schema, [`Policy`]) and
//! an implementation of [`Tool::step`] (see [`crate::jobs`]). Register it in
//! [`builtin::builtin_tools`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::jobs::{JobContext, JobError, Step};

pub mod builtin;
pub mod fixtures;

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

/// A tool: its definition and its step-wise job.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name, description, schema, policy.
    fn def(&self) -> &ToolDef;

    /// Runs before a task is created: check arguments (so a bad call is refused at once
    /// rather than becoming a failed task) or ask questions synchronously first.
    async fn preflight(&self, _ctx: &JobContext) -> Result<Preflight, JobError> {
        Ok(Preflight::Proceed(Value::Null))
    }

    /// One step of the job.
    async fn step(&self, ctx: &JobContext) -> Result<Step, JobError>;
}

/// The tools of one server, in a fixed order, with the `tools/list` body built once.
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
    by_name: HashMap<&'static str, usize>,
    list: Value,
    /// Per tool, the arguments mirrored in `Mcp-Param-*` headers.
    mirrored: Vec<Vec<(String, String)>>,
}

impl Registry {
    /// A registry of `tools`, in that order. Later duplicates of a name are refused.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut by_name = HashMap::new();
        let mut kept: Vec<Arc<dyn Tool>> = Vec::new();
        for t in tools {
            if by_name.contains_key(t.def().name) {
                continue;
            }
            by_name.insert(t.def().name, kept.len());
            kept.push(t);
        }
        let list = Value::Array(
            kept.iter()
                .map(|t| {
                    let d = t.def();
                    json!({"name": d.name, "description": d.description, "inputSchema": d.input_schema})
                })
                .collect(),
        );
        let mirrored = kept
            .iter()
            .map(|t| crate::protocol::headers::mirrored_params(&t.def().input_schema))
            .collect();
        Self {
            tools: kept,
            by_name,
            list,
            mirrored,
        }
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// The `(header token, argument)` pairs a tool mirrors in `Mcp-Param-*` headers.
    pub fn mirrored_params(&self, name: &str) -> &[(String, String)] {
        self.by_name
            .get(name)
            .map_or(&[], |&i| self.mirrored[i].as_slice())
    }

    /// The `tools` array of `tools/list`.
    pub fn list(&self) -> &Value {
        &self.list
    }

    /// Names in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.def().name).collect()
    }
}

/// An object schema with the given properties and required names.
pub fn object_schema(properties: Value, required: &[&str]) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!("object"));
    m.insert("properties".into(), properties);
    if !required.is_empty() {
        m.insert("required".into(), json!(required));
    }
    Value::Object(m)
}
