//! AWS adapters of the ports: [`dynamo::DynamoStore`] (the [`crate::store::TaskStore`]) and
//! [`sqs::SqsQueue`] (the [`crate::queue::WorkQueue`]). Nothing outside this module imports
//! the AWS SDK. Endpoints follow the SDK's standard settings (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`), which is how the local emulators and
//! LocalStack are reached.

pub mod dynamo;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod sqs;

/// Loads the shared SDK configuration once (region, credentials, endpoint overrides). Build
/// clients from it at cold start, never per request.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}
