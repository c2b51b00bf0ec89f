//! The tools of the mcp and worker functions: the Rust tools their `main` passes in (from
//! `tools/`), then the declared tools of the manifest — the bundled `tools.toml`, or the file
//! `TOOLS_MANIFEST` names — over `lambda` and `http` targets. A manifest that cannot be served
//! here fails the cold start, naming the entry: a `command` target (never on Lambda), a Lambda
//! function the role may not invoke (not in `TOOL_TARGET_FUNCTIONS`), a secret it may not read
//! (not in `TOOL_SECRET_ARNS`) or cannot fetch, a bad entry. The `http` targets' secrets are
//! fetched here, once per cold start.

use std::collections::HashMap;
use std::sync::Arc;

use super::Config;
use crate::app::DuplicateTool;
use crate::declared::manifest::{HttpSecret, TargetKind};
use crate::declared::{Manifest, ManifestError, TargetHost};
use crate::tools::{Registry, Tool};

/// Why a function's tools cannot be served (shown as its sentence: a main returns it and the
/// runtime prints it with `{:?}` as the cold start's failure).
#[derive(thiserror::Error)]
pub enum ToolsError {
    /// The manifest, or one of its entries.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Two tools of one name.
    #[error(transparent)]
    Duplicate(#[from] DuplicateTool),
    /// A `lambda` target the role is not allowed to invoke.
    #[error(
        "{origin}: {entry} invokes {function}, which ToolTargetFunctions \
         (TOOL_TARGET_FUNCTIONS) does not list: the role may not invoke it"
    )]
    NotGranted {
        /// The manifest.
        origin: String,
        /// The tool.
        entry: String,
        /// The function.
        function: String,
    },
    /// A `step_functions` target the role may not start.
    #[error(
        "{origin}: {entry} runs state machine {machine}, which ToolStateMachines \
         (TOOL_STATE_MACHINES) does not list: the role may not start it"
    )]
    MachineNotGranted {
        /// The manifest.
        origin: String,
        /// The tool.
        entry: String,
        /// The state machine.
        machine: String,
    },
    /// An `http` target's `secret_arn` the role is not allowed to read.
    #[error(
        "{origin}: {entry} reads secret {arn}, which ToolSecretArns (TOOL_SECRET_ARNS) does \
         not list: the role may not read it"
    )]
    SecretNotGranted {
        /// The manifest.
        origin: String,
        /// The tool.
        entry: String,
        /// The secret.
        arn: String,
    },
    /// A granted secret could not be fetched (its ARN and the service's code, never a value).
    #[error("{origin}: {source}")]
    Secret {
        /// The manifest.
        origin: String,
        /// What failed.
        source: crate::aws::secrets::SecretError,
    },
}

impl std::fmt::Debug for ToolsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The registry of the mcp function: `rust` and the manifest's tools, every input schema
/// compiled (a schema that does not compile fails the cold start), arguments checked.
pub async fn serving_tools(
    config: &Config,
    rust: Vec<Arc<dyn Tool>>,
    bundled: &str,
) -> Result<Arc<Registry>, ToolsError> {
    let manifest = manifest(config, bundled)?;
    manifest.check_schemas()?;
    let declared = manifest.tools(&host(&manifest).await?)?;
    Ok(crate::app::serving_registry(crate::app::all_tools(
        rust, declared,
    )?))
}

/// The registry of the worker function: the same tools, without the argument checker (the
/// worker never takes a call, so the checker stays out of its binary).
pub async fn running_tools(
    config: &Config,
    rust: Vec<Arc<dyn Tool>>,
    bundled: &str,
) -> Result<Arc<Registry>, ToolsError> {
    let manifest = manifest(config, bundled)?;
    let declared = manifest.tools(&host(&manifest).await?)?;
    Ok(Arc::new(Registry::new(crate::app::all_tools(
        rust, declared,
    )?)))
}

/// The manifest this function serves, its Lambda targets checked against the grant.
fn manifest(config: &Config, bundled: &str) -> Result<Manifest, ToolsError> {
    let manifest = match &config.tools_manifest {
        Some(path) => Manifest::read(path)?,
        None => Manifest::parse(bundled, "the bundled tools.toml")?,
    };
    for e in &manifest.entries {
        match &e.target {
            TargetKind::Lambda(f)
                if !config.tool_target_functions.iter().any(|g| granted(g, f)) =>
            {
                return Err(ToolsError::NotGranted {
                    origin: manifest.origin.clone(),
                    entry: format!("tool {}", e.name),
                    function: f.clone(),
                });
            }
            TargetKind::StepFunctions { machine, .. }
                if !config.tool_state_machines.contains(machine) =>
            {
                return Err(ToolsError::MachineNotGranted {
                    origin: manifest.origin.clone(),
                    entry: format!("tool {}", e.name),
                    machine: machine.clone(),
                });
            }
            TargetKind::Http {
                secret: Some(HttpSecret { arn: Some(arn), .. }),
                ..
            } if !config.tool_secret_arns.contains(arn) => {
                return Err(ToolsError::SecretNotGranted {
                    origin: manifest.origin.clone(),
                    entry: format!("tool {}", e.name),
                    arn: arn.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(manifest)
}

/// What a Lambda function may do here: invoke functions (when the manifest names any), read
/// the secrets its `http` targets name (fetched now, all at once), sign the requests of its
/// `sigv4` targets, carry the X-Ray trace into HTTP steps, never start a program. Builds no
/// client the manifest does not need.
async fn host(manifest: &Manifest) -> Result<TargetHost, ToolsError> {
    let (functions, arns) = (manifest.lambda_functions(), manifest.secret_arns());
    let signs = manifest
        .entries
        .iter()
        .any(|e| matches!(&e.target, TargetKind::Http { sigv4: Some(_), .. }));
    let workflows = !manifest.state_machines().is_empty();
    let sdk = match functions.is_empty() && arns.is_empty() && !signs && !workflows {
        true => None,
        false => Some(crate::aws::sdk_config().await),
    };
    let lambda = match (functions.is_empty(), &sdk) {
        (false, Some(sdk)) => Some(Arc::new(crate::aws::invoke::SdkInvoker::new(sdk.clone()))
            as Arc<dyn crate::declared::LambdaInvoker>),
        _ => None,
    };
    let mut secrets = HashMap::new();
    if let (false, Some(sdk)) = (arns.is_empty(), &sdk) {
        let client = crate::aws::secrets::secretsmanager_client(sdk);
        let values = futures_util::future::join_all(
            arns.iter()
                .map(|arn| crate::aws::secrets::secret_string(&client, arn, None)),
        )
        .await;
        for (arn, value) in arns.iter().zip(values) {
            let value = value.map_err(|source| ToolsError::Secret {
                origin: manifest.origin.clone(),
                source,
            })?;
            secrets.insert((*arn).to_owned(), value.expose().to_owned());
        }
    }
    let signer = match (signs, &sdk) {
        (true, Some(sdk)) => Some(Arc::new(crate::aws::signed::Signer::new(sdk))
            as Arc<dyn crate::declared::RequestSigner>),
        _ => None,
    };
    let states = match (workflows, &sdk) {
        (true, Some(sdk)) => Some(Arc::new(crate::aws::states::SignedStates::new(sdk))
            as Arc<dyn crate::declared::StatesApi>),
        _ => None,
    };
    Ok(TargetHost {
        allow_commands: false,
        lambda,
        states,
        secrets: Some(secrets),
        signer,
        xray: Some(crate::aws::trace_header),
        ..TargetHost::default()
    })
}

/// Whether granting `grant` (an ARN, as IAM takes it) covers invoking `function` (a name or an
/// ARN, as the manifest names it): the same ARN, or the same function name.
fn granted(grant: &str, function: &str) -> bool {
    let name = |f: &str| -> String {
        match f.split_once(":function:") {
            Some((_, rest)) => rest.split(':').next().unwrap_or("").to_owned(),
            None => f.split(':').next().unwrap_or("").to_owned(),
        }
    };
    grant == function || (!function.contains(":function:") && name(grant) == name(function))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_covers_its_arn_or_its_name() {
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function:report";
        assert!(granted(arn, arn));
        assert!(granted(arn, "report"));
        assert!(!granted(arn, "reports"));
        assert!(!granted(
            arn,
            "arn:aws:lambda:eu-west-1:999999999999:function:report"
        ));
        assert!(!granted(
            "arn:aws:lambda:eu-west-1:123456789012:function:other",
            "report"
        ));
    }
}
