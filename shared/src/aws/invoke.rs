//! The `lambda` target's invoker: a synchronous `Invoke` (`RequestResponse`) per step, a
//! signed `POST /2015-03-31/functions/{name}/invocations` ([`super::signed`]), its answer read
//! with the step's `max_answer_bytes` as the bound (a longer answer is cut off while it
//! arrives, never held whole). The step protocol retries (with its own back-off, parked
//! between tries), so nothing is retried here: a throttle is reported at once. Endpoints follow
//! the SDK's settings (`AWS_ENDPOINT_URL_LAMBDA`), which is how the tests' emulated Invoke API
//! is reached. The request carries the task's X-Ray trace header (`X-Amzn-Trace-Id`) when
//! there is one, as the SDK's client would.

use async_trait::async_trait;

use super::signed::{AwsApi, CallError, Service, path_segment};
use crate::declared::{CallLimits, LambdaInvoker, TargetError};

/// Invokes functions with signed requests to the Lambda API.
#[derive(Debug)]
pub struct SdkInvoker {
    api: AwsApi,
}

impl SdkInvoker {
    /// An invoker over `sdk`'s settings (credentials, region, endpoint); nothing is connected
    /// or asked for until the first invocation.
    pub fn new(sdk: aws_config::SdkConfig) -> Self {
        Self {
            api: AwsApi::new(&sdk, Service::LAMBDA),
        }
    }
}

#[async_trait]
impl LambdaInvoker for SdkInvoker {
    async fn invoke(
        &self,
        function: &str,
        payload: Vec<u8>,
        limits: CallLimits,
    ) -> Result<Vec<u8>, TargetError> {
        let path = format!(
            "2015-03-31/functions/{}/invocations",
            path_segment(function)
        );
        let trace = super::trace_header();
        let trailing: Vec<(&'static str, &str)> = trace
            .as_deref()
            .map(|t| ("x-amzn-trace-id", t))
            .into_iter()
            .collect();
        let answer = self
            .api
            .post(
                &path,
                &[
                    ("x-amz-invocation-type", "RequestResponse"),
                    ("content-type", "application/json"),
                ],
                &trailing,
                payload,
                limits.timeout,
                limits.max_answer_bytes,
            )
            .await
            .map_err(|e| match e {
                CallError::Timeout => TargetError::Timeout,
                CallError::Unreachable => TargetError::Unreachable,
                CallError::TooLarge(_) => TargetError::TooLarge(limits.max_answer_bytes),
                CallError::NoEndpoint => TargetError::InvokeRefused("no Lambda endpoint"),
                CallError::Sign(super::signed::SignError::NoRegion) => {
                    TargetError::InvokeRefused("no AWS region")
                }
                CallError::Sign(super::signed::SignError::NoCredentials) => {
                    TargetError::InvokeRefused("no AWS credentials")
                }
                CallError::Sign(_) => TargetError::InvokeRefused("unsignable request"),
            })?;
        if answer.status != 200 {
            return Err(refusal(&answer));
        }
        if answer.headers.contains_key("x-amz-function-error") {
            return Err(TargetError::FunctionError);
        }
        Ok(answer.body)
    }
}

/// What an `Invoke` refusal means for the step (docs/step-protocol.md, "Transports"):
/// throttles and the service's 5xx are retried; the rest are the deployment's mistakes (no
/// such function, no permission, a payload too large) and fail the task at once.
fn refusal(answer: &super::signed::Answer) -> TargetError {
    let code = answer.error_code();
    match (code.as_deref(), answer.status) {
        (Some("TooManyRequestsException" | "EC2ThrottledException"), _) | (_, 429) => {
            TargetError::Throttled
        }
        (Some("ResourceNotFoundException"), _) => TargetError::InvokeRefused("no such function"),
        (Some("RequestTooLargeException"), _) | (_, 413) => {
            TargetError::InvokeRefused("request too large")
        }
        (_, 403) => TargetError::InvokeRefused("access denied"),
        (_, s) if s >= 500 => TargetError::Unreachable,
        _ => TargetError::InvokeRefused("refused"),
    }
}

#[cfg(test)]
#[path = "invoke_tests.rs"]
mod tests;
