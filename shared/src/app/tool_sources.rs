//! A server's tools: the Rust tools its host passes in (this crate knows none) and the
//! declared tools of a manifest, whose targets run on what the host lends them ([`Lending`]).
//! One builder makes the declared tools' [`TargetHost`] for every host — the local server and
//! the Lambda functions alike — so that what a target may use is decided in one place.

use std::path::PathBuf;
use std::sync::Arc;

use crate::declared::{Manifest, ManifestError, TargetHost};
use crate::tools::{Registry, Tool};

/// Two tools of one name (a Rust tool and a declared one, say): the server refuses to start
/// rather than serve one of them silently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "two tools are named {0}: tool names must be unique across the Rust tools and the manifest"
)]
pub struct DuplicateTool(pub String);

/// `rust` then `declared`, in that order, refusing a name given twice.
pub fn all_tools(
    rust: Vec<Arc<dyn Tool>>,
    declared: Vec<Arc<dyn Tool>>,
) -> Result<Vec<Arc<dyn Tool>>, DuplicateTool> {
    let mut seen = std::collections::HashSet::new();
    let all: Vec<Arc<dyn Tool>> = rust.into_iter().chain(declared).collect();
    for t in &all {
        if !seen.insert(t.name()) {
            return Err(DuplicateTool(t.name().to_owned()));
        }
    }
    Ok(all)
}

/// The registry a host that serves `tools/call` builds: checking each call's arguments against
/// the tool's schema ([`Registry::checking_arguments`]). A worker alone, which never takes a
/// call, builds `Registry::new(tools)`, without the schema engine.
pub fn serving_registry(tools: Vec<Arc<dyn Tool>>) -> Arc<Registry> {
    Arc::new(Registry::new(tools).checking_arguments())
}

/// Why a server's tools cannot be served: a manifest entry its host cannot run, or two tools
/// of one name.
#[derive(Debug, thiserror::Error)]
pub enum ToolSourcesError {
    /// The manifest, or one of its entries.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Two tools of one name.
    #[error(transparent)]
    Duplicate(#[from] DuplicateTool),
}

/// Where a server's tools come from.
#[derive(Clone, Default)]
pub struct ToolSources {
    /// The Rust tools, in `tools/list` order (the host's: `tools/src/lib.rs`).
    pub rust: Vec<Arc<dyn Tool>>,
    /// Declared tools, served after the Rust ones.
    pub manifest: Option<Manifest>,
}

impl ToolSources {
    /// The Rust tools only.
    pub fn rust(tools: Vec<Arc<dyn Tool>>) -> Self {
        Self {
            rust: tools,
            manifest: None,
        }
    }

    /// With the declared tools of `manifest`.
    pub fn with_manifest(mut self, manifest: Manifest) -> Self {
        self.manifest = Some(manifest);
        self
    }

    /// The registry of a server that takes `tools/call`: every declared input schema
    /// compiled (one that does not compile refuses to start), arguments checked.
    pub async fn serving(&self, lending: &Lending) -> Result<Arc<Registry>, ToolSourcesError> {
        if let Some(m) = &self.manifest {
            m.check_schemas()?;
        }
        Ok(serving_registry(self.all(lending).await?))
    }

    /// The registry of a worker alone: the same tools, without the argument checker (so
    /// that it stays out of the worker function's binary).
    pub async fn running(&self, lending: &Lending) -> Result<Arc<Registry>, ToolSourcesError> {
        Ok(Arc::new(Registry::new(self.all(lending).await?)))
    }

    async fn all(&self, lending: &Lending) -> Result<Vec<Arc<dyn Tool>>, ToolSourcesError> {
        let declared = match &self.manifest {
            Some(m) => m.tools(&lending.target_host(m).await)?,
            None => Vec::new(),
        };
        Ok(all_tools(self.rust.clone(), declared)?)
    }
}

/// What a host lends its declared tools' targets.
#[derive(Clone, Default)]
pub struct Lending {
    /// Whether `command` targets may run (the local server: yes; Lambda: never).
    pub allow_commands: bool,
    /// Where a relative command path, and a command's working directory, are taken from: the
    /// manifest file's directory.
    pub base_dir: Option<PathBuf>,
    /// The scope that marks `command` steps' processes (the local server's data directory's,
    /// so that a server starting there kills what they left).
    pub step_scope: Option<String>,
    /// The cloud clients the targets call through (on AWS: `aws::lending`); `None`: a
    /// manifest naming a target that needs one refuses to load.
    pub clients: Option<Arc<dyn ClientLender>>,
}

/// Lends a manifest's targets the clients they need (a Lambda invoker, a request signer, a
/// workflow API, secrets, a trace header), building none the manifest does not need and
/// calling nothing.
#[async_trait::async_trait]
pub trait ClientLender: Send + Sync {
    /// Fills in `host`'s clients for `manifest`.
    async fn lend(&self, manifest: &Manifest, host: &mut TargetHost);
}

impl Lending {
    /// The one target host builder: what the declared tools of `manifest` run on here.
    pub async fn target_host(&self, manifest: &Manifest) -> TargetHost {
        let mut host = TargetHost {
            allow_commands: self.allow_commands,
            base_dir: self.base_dir.clone(),
            step_scope: self.step_scope.clone(),
            ..TargetHost::default()
        };
        if let Some(clients) = &self.clients {
            clients.lend(manifest, &mut host).await;
        }
        host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest of one tool, `name`, on `target`.
    fn one_tool(name: &str, target: &str) -> Manifest {
        let text = format!(
            "[[tool]]\nname = \"{name}\"\ndescription = \"x\"\n\
             input_schema = {{ type = \"object\" }}\ntarget = {target}\n"
        );
        Manifest::parse(&text, "test.toml").expect("a valid manifest")
    }

    #[tokio::test]
    async fn a_declared_tool_named_as_a_rust_tool_refuses_to_start() {
        let manifest = one_tool("wait", r#"{ command = ["true"] }"#);
        let sources =
            ToolSources::rust(vec![crate::tools::doubles::wait()]).with_manifest(manifest);
        let lending = Lending {
            allow_commands: true,
            ..Lending::default()
        };
        let err = sources.serving(&lending).await.err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "two tools are named wait: tool names must be unique across the Rust tools and \
                 the manifest"
            )
        );
    }

    #[tokio::test]
    async fn without_a_lender_a_lambda_target_refuses_to_load() {
        let manifest = one_tool("report", r#"{ lambda = "report" }"#);
        let sources = ToolSources::default().with_manifest(manifest);
        assert!(sources.running(&Lending::default()).await.is_err());
    }
}
