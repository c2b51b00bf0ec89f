//! The `step_functions` target's caller: the Step Functions API (AWS JSON 1.0,
//! `X-Amz-Target: AWSStepFunctions.ACTION`) as signed requests ([`super::signed`]), no service
//! SDK. Endpoints follow the SDK's settings (`AWS_ENDPOINT_URL_SFN`, then `AWS_ENDPOINT_URL`),
//! which is how the tests' stand-in is reached. Nothing is connected or asked for until the
//! first call, and the caller is built only when a manifest names a `step_functions` target.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::signed::{AwsApi, CallError, Service};
use crate::declared::workflow::MAX_API_ANSWER;
use crate::declared::{StatesApi, StatesError};

/// AWS Step Functions as the signer and the endpoint settings name it.
const STATES: Service = Service {
    id: "SFN",
    signing_name: "states",
};

/// Calls the Step Functions API with signed requests.
#[derive(Debug)]
pub struct SignedStates {
    api: AwsApi,
}

impl SignedStates {
    /// A caller over `sdk`'s settings (credentials, region, endpoint).
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            api: AwsApi::new(sdk, STATES),
        }
    }
}

#[async_trait]
impl StatesApi for SignedStates {
    async fn call(
        &self,
        action: &'static str,
        body: Value,
        timeout: Duration,
    ) -> Result<Value, StatesError> {
        let target = format!("AWSStepFunctions.{action}");
        let answer = self
            .api
            .post(
                "/",
                &[
                    ("x-amz-target", target.as_str()),
                    ("content-type", "application/x-amz-json-1.0"),
                ],
                &[],
                body.to_string().into_bytes(),
                timeout,
                MAX_API_ANSWER,
            )
            .await
            .map_err(|e| match e {
                CallError::Timeout => StatesError::Timeout,
                CallError::Unreachable | CallError::TooLarge(_) => StatesError::Unreachable,
                CallError::NoEndpoint => StatesError::Refused("NoEndpoint".into()),
                CallError::Sign(_) => StatesError::Refused("NoCredentials".into()),
            })?;
        match answer.status {
            200..=299 => serde_json::from_slice(&answer.body)
                .map_err(|_| StatesError::Refused("NotJson".into())),
            429 => Err(StatesError::Throttled),
            s if s >= 500 => Err(StatesError::Unreachable),
            _ => match answer.error_code() {
                Some(code) if code == "ThrottlingException" => Err(StatesError::Throttled),
                Some(code) => Err(StatesError::Refused(code)),
                None => Err(StatesError::Refused(format!("HTTP{}", answer.status))),
            },
        }
    }
}
