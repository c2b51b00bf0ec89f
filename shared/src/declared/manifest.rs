//! The tool manifest (docs/tool-manifest.md): a TOML file of `[[tool]]` entries, read and
//! checked whole before a server starts — a bad entry, a duplicate name or an unknown key
//! refuses the start, naming the entry — then turned into [`DeclaredTool`]s over the targets a
//! host can offer.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::command::CommandTarget;
pub use super::entry::{DeclaredEntry, HttpSecret, Limits, TargetKind, Wire};
use super::http::HttpTarget;
use super::target::{Target, TargetHost};
use super::tool::DeclaredTool;
use super::workflow::WorkflowTool;

mod refusal;
use crate::tools::{Policy, Tool};
use refusal::toml_error;

/// Bounds of the per-entry limits, and their defaults (docs/tool-manifest.md).
pub mod bounds {
    /// `step_timeout_seconds`: default and maximum (a Lambda invocation's limit).
    pub const STEP_TIMEOUT: (u64, u64) = (60, 900);
    /// `max_answer_bytes`: default, least and most.
    pub const ANSWER_BYTES: (u64, u64, u64) = (
        256 * 1024,
        1024,
        crate::declared::step_protocol::MAX_ANSWER_BYTES as u64,
    );
    /// `max_retries`: default and maximum.
    pub const RETRIES: (u32, u32) = (4, 10);
    /// `max_task_seconds`: the most (a year; the server's own limit applies as well).
    pub const TASK_SECONDS: u64 = 31_536_000;
    /// Most tools one manifest may declare.
    pub const TOOLS: usize = 256;
    /// Largest manifest file read.
    pub const FILE_BYTES: u64 = 1024 * 1024;
}

/// Why a manifest cannot be served. Its text names the file, the entry and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {}{reason}", .entry.as_ref().map(|e| format!("{e}: ")).unwrap_or_default())]
pub struct ManifestError {
    /// The file (or `the bundled manifest`).
    pub origin: String,
    /// `tool #3 (monthly_report)`, when one entry is at fault.
    pub entry: Option<String>,
    /// What is wrong.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tool: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    title: Option<String>,
    description: String,
    #[serde(default = "optional")]
    task: String,
    input_schema: Value,
    target: TargetSpec,
    #[serde(default)]
    step_timeout_seconds: Option<u64>,
    #[serde(default)]
    max_task_seconds: Option<u64>,
    #[serde(default)]
    max_answer_bytes: Option<u64>,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    pass_tenant: bool,
    #[serde(default)]
    protocol: Option<String>,
}

fn optional() -> String {
    "optional".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetSpec {
    #[serde(default)]
    lambda: Option<String>,
    #[serde(default)]
    http: Option<String>,
    #[serde(default)]
    command: Option<Vec<String>>,
    /// A Standard state machine's ARN.
    #[serde(default)]
    step_functions: Option<String>,
    /// `step_functions`: seconds between looks at the execution.
    #[serde(default)]
    poll_seconds: Option<u64>,
    /// `http`: the header that carries the secret (default `Authorization`).
    #[serde(default)]
    header: Option<String>,
    /// `http`: the environment variable holding the header's whole value.
    #[serde(default)]
    secret_env: Option<String>,
    /// `http`: the Secrets Manager secret holding the header's whole value (AWS).
    #[serde(default)]
    secret_arn: Option<String>,
    /// `command`: environment variables passed on to the program.
    #[serde(default)]
    env: Option<Vec<String>>,
    /// `http`: sign each request with AWS Signature Version 4 for this service.
    #[serde(default)]
    sigv4: Option<String>,
}

/// A manifest, read and checked.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Where it came from (for messages).
    pub origin: String,
    /// Its entries, in file order.
    pub entries: Vec<DeclaredEntry>,
}

impl Manifest {
    /// Reads a manifest file (at most [`bounds::FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<Self, ManifestError> {
        let origin = path.display().to_string();
        let fail = |reason: String| ManifestError {
            origin: origin.clone(),
            entry: None,
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| fail(format!("cannot read it ({e})")))?;
        if meta.len() > bounds::FILE_BYTES {
            return Err(fail(format!("larger than {} bytes", bounds::FILE_BYTES)));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it ({e})")))?;
        Self::parse(&text, &origin)
    }

    /// Parses and checks a manifest's text: every entry complete, every value within its
    /// bounds, names unique. Input schemas are not compiled here ([`Manifest::check_schemas`]).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ManifestError> {
        let file: File = toml::from_str(text).map_err(|e| toml_error(text, origin, &e))?;
        if file.tool.len() > bounds::TOOLS {
            return Err(ManifestError {
                origin: origin.to_owned(),
                entry: None,
                reason: format!("more than {} tools", bounds::TOOLS),
            });
        }
        let mut entries: Vec<DeclaredEntry> = Vec::new();
        for (i, e) in file.tool.into_iter().enumerate() {
            let label = format!(
                "tool #{} ({})",
                i + 1,
                crate::protocol::truncate(&e.name, 64)
            );
            let fail = |reason: String| ManifestError {
                origin: origin.to_owned(),
                entry: Some(label.clone()),
                reason,
            };
            let entry = entry(e).map_err(fail)?;
            if entries.iter().any(|o| o.name == entry.name) {
                return Err(fail("a tool of this name is declared earlier".into()));
            }
            entries.push(entry);
        }
        Ok(Self {
            origin: origin.to_owned(),
            entries,
        })
    }

    /// Compiles every entry's input schema with the argument checker, as a server that takes
    /// `tools/call` will (the worker, which never checks arguments, skips this and so does not
    /// link the checker).
    pub fn check_schemas(&self) -> Result<(), ManifestError> {
        for (i, e) in self.entries.iter().enumerate() {
            crate::schema::Validator::new(&e.input_schema).map_err(|err| ManifestError {
                origin: self.origin.clone(),
                entry: Some(format!("tool #{} ({})", i + 1, e.name)),
                reason: format!("input_schema does not compile: {err}"),
            })?;
        }
        Ok(())
    }

    /// The declared tools over the targets `host` offers: an entry whose kind of target the
    /// host cannot run refuses them all.
    pub fn tools(&self, host: &TargetHost) -> Result<Vec<Arc<dyn Tool>>, ManifestError> {
        let mut out: Vec<Arc<dyn Tool>> = Vec::with_capacity(self.entries.len());
        for (i, e) in self.entries.iter().enumerate() {
            let fail = |reason: String| ManifestError {
                origin: self.origin.clone(),
                entry: Some(format!("tool #{} ({})", i + 1, e.name)),
                reason,
            };
            let target: Arc<dyn Target> = match &e.target {
                TargetKind::Command { argv, env } => {
                    if !host.allow_commands {
                        return Err(fail(
                            "a command target runs only on the local server (mcp-tasks serve), \
                             never on Lambda"
                                .into(),
                        ));
                    }
                    Arc::new(CommandTarget::new(argv, env, host).map_err(fail)?)
                }
                TargetKind::Http { url, secret, sigv4 } => Arc::new(
                    HttpTarget::new(url, secret.as_ref(), sigv4.as_deref(), host).map_err(fail)?,
                ),
                TargetKind::StepFunctions { machine, poll } => match &host.states {
                    Some(api) => {
                        if e.limits.protocol != Wire::Step {
                            return Err(fail("a step_functions target takes no protocol".into()));
                        }
                        out.push(Arc::new(WorkflowTool::new(e, machine, *poll, api.clone())));
                        continue;
                    }
                    None => {
                        return Err(fail(
                            "a step_functions target needs AWS (this build or host has no Step \
                             Functions client)"
                                .into(),
                        ));
                    }
                },
                TargetKind::Lambda(function) => match &host.lambda {
                    Some(invoker) => Arc::new(super::LambdaTarget {
                        function: function.clone(),
                        invoker: invoker.clone(),
                    }),
                    None => {
                        return Err(fail(
                            "a lambda target needs AWS (this build or host has no Lambda client)"
                                .into(),
                        ));
                    }
                },
            };
            out.push(Arc::new(DeclaredTool::new(e, target)));
        }
        Ok(out)
    }

    /// The Secrets Manager secrets its `http` targets name (`secret_arn`), each once: what the
    /// deployed functions fetch at cold start and their role must be allowed to read (the
    /// template's `ToolSecretArns`).
    pub fn secret_arns(&self) -> Vec<&str> {
        let mut arns: Vec<&str> = self
            .entries
            .iter()
            .filter_map(|e| match &e.target {
                TargetKind::Http {
                    secret: Some(s), ..
                } => s.arn.as_deref(),
                _ => None,
            })
            .collect();
        arns.sort_unstable();
        arns.dedup();
        arns
    }

    /// Each entry as `name (kind of target)`, in file order: what `mcp-tasks serve` and
    /// `mcp-tasks tools check` print.
    pub fn summary(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| {
                let kind = match &e.target {
                    TargetKind::Lambda(_) => "lambda",
                    TargetKind::Http { .. } => "http",
                    TargetKind::Command { .. } => "command",
                    TargetKind::StepFunctions { .. } => "step_functions",
                };
                let plain = if e.limits.protocol == Wire::Plain {
                    ", plain"
                } else {
                    ""
                };
                format!("{} ({kind}{plain})", e.name)
            })
            .collect()
    }

    /// The state machines the entries name (what the worker's role must be allowed to start,
    /// describe and stop: the template's `ToolStateMachines`).
    pub fn state_machines(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter_map(|e| match &e.target {
                TargetKind::StepFunctions { machine, .. } => Some(machine.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The Lambda functions the entries name (what the worker's role must be allowed to
    /// invoke: the template's `ToolTargetFunctions`).
    pub fn lambda_functions(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter_map(|e| match &e.target {
                TargetKind::Lambda(f) => Some(f.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Checks one entry.
fn entry(e: Entry) -> Result<DeclaredEntry, String> {
    let valid_name = !e.name.is_empty()
        && e.name.len() <= 128
        && e.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid_name {
        return Err("name must be 1 to 128 of A-Z a-z 0-9 _ - .".into());
    }
    if e.description.trim().is_empty() || e.description.len() > 8192 {
        return Err("description must be 1 to 8192 bytes".into());
    }
    if e.title
        .as_ref()
        .is_some_and(|t| t.trim().is_empty() || t.len() > 256)
    {
        return Err("title must be 1 to 256 bytes".into());
    }
    let policy = match e.task.as_str() {
        "required" => Policy::TaskOnly,
        "optional" => Policy::Optional,
        "forbidden" => Policy::Sync,
        _ => return Err("task must be required, optional or forbidden".into()),
    };
    if e.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("input_schema must be an object schema (type = \"object\")".into());
    }
    let limits = Limits {
        step_timeout: Duration::from_secs(within(
            "step_timeout_seconds",
            e.step_timeout_seconds,
            bounds::STEP_TIMEOUT.0,
            1,
            bounds::STEP_TIMEOUT.1,
        )?),
        max_answer_bytes: within(
            "max_answer_bytes",
            e.max_answer_bytes,
            bounds::ANSWER_BYTES.0,
            bounds::ANSWER_BYTES.1,
            bounds::ANSWER_BYTES.2,
        )? as usize,
        max_retries: within(
            "max_retries",
            e.max_retries.map(u64::from),
            u64::from(bounds::RETRIES.0),
            0,
            u64::from(bounds::RETRIES.1),
        )? as u32,
        max_task_wall: match e.max_task_seconds {
            None => None,
            Some(s) => Some(Duration::from_secs(within(
                "max_task_seconds",
                Some(s),
                s,
                1,
                bounds::TASK_SECONDS,
            )?)),
        },
        pass_tenant: e.pass_tenant,
        protocol: match e.protocol.as_deref() {
            None | Some(super::step_protocol::PROTOCOL) => Wire::Step,
            Some("plain") => Wire::Plain,
            Some(_) => return Err("protocol must be \"mcp-tasks-step/1\" or \"plain\"".into()),
        },
    };
    Ok(DeclaredEntry {
        target: target(e.target)?,
        name: e.name,
        title: e.title,
        description: e.description,
        input_schema: e.input_schema,
        policy,
        limits,
    })
}

fn within(name: &str, v: Option<u64>, default: u64, min: u64, max: u64) -> Result<u64, String> {
    match v {
        None => Ok(default),
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(_) => Err(format!("{name} must be from {min} to {max}")),
    }
}

fn target(t: TargetSpec) -> Result<TargetKind, String> {
    let kinds = [
        t.lambda.is_some(),
        t.http.is_some(),
        t.command.is_some(),
        t.step_functions.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err("target must be exactly one of lambda, http, command or step_functions".into());
    }
    if t.sigv4.is_some() && t.http.is_none() {
        return Err("sigv4 signs the requests of an http target only".into());
    }
    let http_only = t.header.is_some() || t.secret_env.is_some() || t.secret_arn.is_some();
    if let Some(machine) = t.step_functions {
        if http_only || t.env.is_some() {
            return Err(
                "a step_functions target takes no header, secret_env, secret_arn or env".into(),
            );
        }
        if !super::workflow::is_state_machine_arn(&machine) {
            return Err(format!(
                "target.step_functions must be a state machine ARN \
                 (arn:aws:states:REGION:ACCOUNT:stateMachine:NAME): {}",
                crate::protocol::truncate(&machine, 64)
            ));
        }
        let (default, least, most) = super::workflow::POLL_SECONDS;
        let poll = within("poll_seconds", t.poll_seconds, default, least, most)?;
        return Ok(TargetKind::StepFunctions {
            machine,
            poll: Duration::from_secs(poll),
        });
    }
    if t.poll_seconds.is_some() {
        return Err("poll_seconds is for a step_functions target".into());
    }
    if let Some(function) = t.lambda {
        if http_only || t.env.is_some() {
            return Err("a lambda target takes no header, secret_env, secret_arn or env".into());
        }
        let ok = !function.is_empty()
            && function.len() <= 170
            && function
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':'));
        if !ok {
            return Err("target.lambda must be a function name or ARN".into());
        }
        return Ok(TargetKind::Lambda(function));
    }
    if let Some(url) = t.http {
        if t.env.is_some() {
            return Err("an http target takes no env".into());
        }
        if let Some(var) = t.secret_env.as_deref().filter(|v| !valid_var(v)) {
            return Err(format!(
                "secret_env is not a variable name: {}",
                crate::protocol::truncate(var, 64)
            ));
        }
        if let Some(arn) = t.secret_arn.as_deref().filter(|a| !secret_arn(a)) {
            return Err(format!(
                "secret_arn is not a Secrets Manager secret ARN \
                 (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME): {}",
                crate::protocol::truncate(arn, 64)
            ));
        }
        let secret = match (t.secret_env, t.secret_arn) {
            (None, None) if t.header.is_some() => {
                return Err(
                    "header needs secret_env or secret_arn (where its value comes from)".into(),
                );
            }
            (None, None) => None,
            (env, arn) => Some(HttpSecret {
                header: t.header.unwrap_or_else(|| "Authorization".into()),
                env,
                arn,
            }),
        };
        let sigv4 = t.sigv4.map(super::entry::sigv4_service).transpose()?;
        return Ok(TargetKind::Http { url, secret, sigv4 });
    }
    let argv = t.command.unwrap_or_default();
    if http_only {
        return Err("a command target takes no header, secret_env or secret_arn".into());
    }
    if argv.first().is_none_or(|p| p.is_empty()) || argv.iter().any(|a| a.contains('\0')) {
        return Err("target.command must be a program and its arguments".into());
    }
    let env = t.env.unwrap_or_default();
    if let Some(bad) = env.iter().find(|v| !valid_var(v)) {
        return Err(format!(
            "env names a variable that is not a variable name: {}",
            crate::protocol::truncate(bad, 64)
        ));
    }
    Ok(TargetKind::Command { argv, env })
}

/// Whether `arn` is a Secrets Manager secret's ARN, as IAM grants it (the full ARN, with the
/// six random characters Secrets Manager appends to the name).
fn secret_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(7, ':').collect();
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    arn.len() <= 2048
        && parts.len() == 7
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && word(parts[1])
        && parts[2] == "secretsmanager"
        && word(parts[3])
        && parts[4].len() == 12
        && parts[4].bytes().all(|b| b.is_ascii_digit())
        && parts[5] == "secret"
        && !parts[6].is_empty()
        && parts[6]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_+=.@-".contains(&b))
}

fn valid_var(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 128
        && !v.starts_with(|c: char| c.is_ascii_digit())
        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
