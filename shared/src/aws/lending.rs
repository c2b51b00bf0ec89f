//! What AWS lends declared tools' targets ([`crate::app::Lending::clients`]): a Lambda
//! invoker for `lambda` targets, a SigV4 signer for `http` targets with `sigv4`, the Step
//! Functions API for `step_functions` targets, and on Lambda the Secrets Manager reads of
//! `secret_arn` (each at the first step that needs it) and the X-Ray trace header HTTP steps
//! carry on. The SDK configuration is loaded only when the manifest needs a client, and no
//! client calls anything here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::app::ClientLender;
use crate::declared::manifest::TargetKind;
use crate::declared::{LazySecrets, Manifest, SecretFetch, TargetHost};

/// The AWS clients a host lends.
#[derive(Debug, Clone, Copy)]
pub struct AwsLending {
    /// Read `secret_arn` from Secrets Manager and carry the X-Ray trace (the Lambda
    /// functions); the local server reads `secret_env` only and has no trace.
    on_lambda: bool,
}

impl AwsLending {
    /// What the local server lends: invoker, signer, Step Functions.
    pub fn local() -> Self {
        Self { on_lambda: false }
    }

    /// What a Lambda function lends: the same, secrets and the trace header too.
    pub fn lambda() -> Self {
        Self { on_lambda: true }
    }
}

#[async_trait::async_trait]
impl ClientLender for AwsLending {
    async fn lend(&self, manifest: &Manifest, host: &mut TargetHost) {
        let (functions, arns) = (manifest.lambda_functions(), manifest.secret_arns());
        let arns = match self.on_lambda {
            true => arns,
            false => Default::default(),
        };
        let signs = manifest
            .entries
            .iter()
            .any(|e| matches!(&e.target, TargetKind::Http { sigv4: Some(_), .. }));
        let workflows = !manifest.state_machines().is_empty();
        if self.on_lambda {
            host.xray = Some(super::trace_header);
            host.secrets = Some(LazySecrets::fixed(HashMap::new()));
        }
        if functions.is_empty() && arns.is_empty() && !signs && !workflows {
            return;
        }
        let sdk = super::sdk_config().await;
        if !functions.is_empty() {
            host.lambda = Some(Arc::new(super::invoke::SdkInvoker::new(sdk.clone())));
        }
        if !arns.is_empty() {
            host.secrets = Some(LazySecrets::new(secret_fetch(sdk.clone())));
        }
        if signs {
            host.signer = Some(Arc::new(super::signed::Signer::new(&sdk)));
        }
        if workflows {
            host.states = Some(Arc::new(super::states::SignedStates::new(&sdk)));
        }
    }
}

/// Reads a secret's string value from Secrets Manager with `sdk`'s settings: what
/// [`LazySecrets`] calls at a secret's first need, and again after a failure.
fn secret_fetch(sdk: aws_config::SdkConfig) -> SecretFetch {
    Arc::new(move |arn: String| {
        let sdk = sdk.clone();
        Box::pin(async move {
            let client = super::secrets::secretsmanager_client(&sdk);
            super::secrets::secret_string(&client, &arn, None)
                .await
                .map(|v| v.expose().to_owned())
                .map_err(|e| e.to_string())
        })
    })
}
