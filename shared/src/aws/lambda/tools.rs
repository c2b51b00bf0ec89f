//! The tools of the mcp and worker functions: the Rust tools their `main` passes in (from
//! `tools/`), then the declared tools of the manifest — the bundled `tools.toml`, or the file
//! `TOOLS_MANIFEST` names — over `lambda` and `http` targets. A manifest that cannot be served
//! here fails the cold start, naming the entry: a `command` target (never on Lambda), a Lambda
//! function the role may not invoke (not in `TOOL_TARGET_FUNCTIONS`), a secret it may not read
//! (not in `TOOL_SECRET_ARNS`), a bad entry. The `http` targets' secrets are read at the first
//! step that needs each, never here: a cold start makes no network call for them.

use std::collections::HashMap;
use std::sync::Arc;

use super::Config;
use crate::app::DuplicateTool;
use crate::declared::manifest::{HttpSecret, TargetKind};
use crate::declared::{LazySecrets, Manifest, ManifestError, SecretFetch, TargetHost};
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

/// What a Lambda function may do here: invoke functions (with the SDK, when the manifest names
/// any), read the secrets its `http` targets name (each at the first step that needs it,
/// [`crate::declared::LazySecrets`]), never start a program. Builds no client the manifest
/// does not need, and calls nothing.
async fn host(manifest: &Manifest) -> Result<TargetHost, ToolsError> {
    let (functions, arns) = (manifest.lambda_functions(), manifest.secret_arns());
    let sdk = match functions.is_empty() && arns.is_empty() {
        true => None,
        false => Some(crate::aws::sdk_config().await),
    };
    let lambda = match (functions.is_empty(), &sdk) {
        (false, Some(sdk)) => Some(Arc::new(crate::aws::invoke::SdkInvoker::new(sdk.clone()))
            as Arc<dyn crate::declared::LambdaInvoker>),
        _ => None,
    };
    let secrets = match (arns.is_empty(), sdk) {
        (false, Some(sdk)) => LazySecrets::new(secret_fetch(sdk)),
        _ => LazySecrets::fixed(HashMap::new()),
    };
    Ok(TargetHost {
        allow_commands: false,
        lambda,
        secrets: Some(secrets),
        ..TargetHost::default()
    })
}

/// Reads a secret's string value from Secrets Manager with `sdk`'s settings: what
/// [`LazySecrets`] calls at a secret's first need, and again after a failure.
fn secret_fetch(sdk: aws_config::SdkConfig) -> SecretFetch {
    Arc::new(move |arn: String| {
        let sdk = sdk.clone();
        Box::pin(async move {
            let client = crate::aws::secrets::secretsmanager_client(&sdk);
            crate::aws::secrets::secret_string(&client, &arn, None)
                .await
                .map(|v| v.expose().to_owned())
                .map_err(|e| e.to_string())
        })
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
