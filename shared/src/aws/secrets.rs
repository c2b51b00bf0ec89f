//! Secrets Manager: a secret's string value, fetched by ARN with the SDK's client (built as
//! every client here is, [`secretsmanager_client`]: the process's HTTPS client and
//! [`Timeouts::SECRETS_MANAGER`]).
//!
//! What it is for: a value that must not sit in a function's configuration, where whoever may
//! read that configuration (`lambda:GetFunctionConfiguration`) reads it too — the mcp
//! function's `requestState` key (`STATE_KEY_SECRET_ARN`, [`crate::aws::lambda::Config`]),
//! and next the header secrets of declared tools' HTTP targets. Fetch once per process (at
//! cold start), never per request: each fetch is a billed API call and a network round trip.
//!
//! The value never reaches a log or an error: [`SecretString`]'s `Debug` shows no value, and a
//! [`SecretError`] names the secret (its ARN, which is no secret) and the service's error
//! code or the transport's failure, never anything the answer carried.

use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};

use super::Timeouts;

/// A secret's value. Read it with [`SecretString::expose`]; `Debug` prints no value, and there
/// is no `Display`, so that a `{}` or `{:?}` never leaks it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a value read elsewhere (a local run's environment variable, a test's).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: for the one place that uses it (a key derivation, a header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretString(<redacted>)")
    }
}

/// Why a secret could not be read. Names the secret and what failed, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The call failed: the service's error code (`AccessDeniedException`,
    /// `ResourceNotFoundException`, `DecryptionFailure`, …) or the transport's failure
    /// (`timeout`, `connection failed`, …).
    #[error("secret {arn} could not be read: {reason}")]
    Unreadable {
        /// The secret asked for.
        arn: String,
        /// What failed (never the answer's content).
        reason: String,
    },
    /// The secret holds binary data, not a string.
    #[error("secret {arn} has no string value (SecretString)")]
    NotAString {
        /// The secret asked for.
        arn: String,
    },
}

impl Timeouts {
    /// Secrets Manager `GetSecretValue`: a small answer, tens of milliseconds when healthy;
    /// the same reasoning as [`Timeouts::SQS`]. A cold start waits at most the operation's
    /// 10 s for it before failing, which Lambda then retries.
    pub const SECRETS_MANAGER: Timeouts = Timeouts {
        connect: std::time::Duration::from_secs(3),
        attempt: std::time::Duration::from_secs(3),
        operation: std::time::Duration::from_secs(10),
    };
}

/// The Secrets Manager client: `sdk`'s settings (endpoint overrides included:
/// `AWS_ENDPOINT_URL_SECRETS_MANAGER`) with [`Timeouts::SECRETS_MANAGER`].
pub fn secretsmanager_client(sdk: &aws_config::SdkConfig) -> aws_sdk_secretsmanager::Client {
    let config = aws_sdk_secretsmanager::config::Builder::from(sdk)
        .timeout_config(Timeouts::SECRETS_MANAGER.config())
        .build();
    aws_sdk_secretsmanager::Client::from_conf(config)
}

/// The string value of the secret `arn`: its current value (`AWSCURRENT`), or the version
/// `version` names (a `VersionId`) when given.
pub async fn secret_string(
    client: &aws_sdk_secretsmanager::Client,
    arn: &str,
    version: Option<&str>,
) -> Result<SecretString, SecretError> {
    let answer = client
        .get_secret_value()
        .secret_id(arn)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .map_err(|e| SecretError::Unreadable {
            arn: arn.to_owned(),
            reason: failure(&e),
        })?;
    answer
        .secret_string
        .map(SecretString)
        .ok_or_else(|| SecretError::NotAString {
            arn: arn.to_owned(),
        })
}

/// What failed, in words that cannot carry the answer's content: the service's error code
/// (not its message), or the kind of transport failure.
fn failure<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> String {
    match e {
        SdkError::ServiceError(s) => s
            .err()
            .code()
            .unwrap_or("an unnamed service error")
            .to_owned(),
        SdkError::TimeoutError(_) => "timeout".into(),
        SdkError::DispatchFailure(d) if d.is_timeout() => "timeout".into(),
        SdkError::DispatchFailure(_) => "connection failed".into(),
        SdkError::ResponseError(_) => "unreadable answer".into(),
        SdkError::ConstructionFailure(_) => "the request could not be built".into(),
        _ => "unknown failure".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::answering as stand_in;

    async fn client_at(endpoint: &str) -> aws_sdk_secretsmanager::Client {
        secretsmanager_client(&crate::aws::testing::sdk_at(endpoint).await)
    }

    const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:state-key-AbCdEf";

    #[tokio::test]
    async fn a_secret_string_is_fetched_by_arn_and_version_and_never_printed() {
        let (url, seen) = stand_in(
            200,
            r#"{"ARN":"arn","Name":"state-key","SecretString":"s3cr3t-value-never-printed","VersionId":"v"}"#,
        )
        .await;
        let client = client_at(&url).await;
        let got = secret_string(&client, ARN, Some("EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE"))
            .await
            .unwrap();
        assert_eq!(got.expose(), "s3cr3t-value-never-printed");
        assert!(!format!("{got:?}").contains("s3cr3t"), "{got:?}");
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 1, "{requests:?}");
        let request = requests[0].to_ascii_lowercase();
        assert!(
            request.contains("x-amz-target: secretsmanager.getsecretvalue"),
            "{request}"
        );
        assert!(
            request.contains("authorization: aws4-hmac-sha256"),
            "signed: {request}"
        );
        assert!(requests[0].contains(ARN), "{}", requests[0]);
        assert!(
            requests[0].contains("EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE"),
            "the version asked for: {}",
            requests[0]
        );
    }

    /// A refusal names the secret and the service's code, not the message the service sent
    /// (which could echo anything), and a binary secret is refused as such.
    #[tokio::test]
    async fn a_refusal_names_the_secret_and_the_code_only() {
        let (url, _) = stand_in(
            400,
            r#"{"__type":"AccessDeniedException","message":"echo-of-something-secret"}"#,
        )
        .await;
        let err = secret_string(&client_at(&url).await, ARN, None)
            .await
            .unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(
            text.contains(ARN) && text.contains("AccessDeniedException"),
            "{text}"
        );
        assert!(!text.contains("echo-of-something-secret"), "{text}");

        let (url, _) = stand_in(200, r#"{"ARN":"arn","SecretBinary":"AAEC"}"#).await;
        let err = secret_string(&client_at(&url).await, ARN, None)
            .await
            .unwrap_err();
        assert_eq!(err, SecretError::NotAString { arn: ARN.into() });
    }
}
