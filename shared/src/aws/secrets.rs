//! Secrets Manager: a secret's string value, fetched by ARN with a signed `GetSecretValue`
//! ([`super::signed`]: the SDK configuration's credentials, region and endpoint, with
//! [`Timeouts::SECRETS_MANAGER`]), no SDK client.
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

use std::time::Duration;

use super::Timeouts;
use super::signed::{AwsApi, CallError, Service};

/// The largest answer read: a secret holds at most 64 KiB, its answer a little more.
const MAX_ANSWER: usize = 256 * 1024;

/// The Secrets Manager client: signed requests with an SDK configuration's settings.
pub type SecretsClient = AwsApi;

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
/// `AWS_ENDPOINT_URL_SECRETS_MANAGER`), called with [`Timeouts::SECRETS_MANAGER`].
pub fn secretsmanager_client(sdk: &aws_config::SdkConfig) -> SecretsClient {
    AwsApi::new(sdk, Service::SECRETS_MANAGER)
}

/// The string value of the secret `arn`: its current value (`AWSCURRENT`), or the version
/// `version` names (a `VersionId`) when given. An attempt that times out, cannot connect, is
/// throttled or meets a 5xx is tried again, up to three attempts within the operation's bound.
pub async fn secret_string(
    client: &SecretsClient,
    arn: &str,
    version: Option<&str>,
) -> Result<SecretString, SecretError> {
    let unreadable = |reason: &str| SecretError::Unreadable {
        arn: arn.to_owned(),
        reason: reason.to_owned(),
    };
    let mut request = serde_json::json!({ "SecretId": arn });
    if let Some(v) = version {
        request["VersionId"] = v.into();
    }
    let body =
        serde_json::to_vec(&request).map_err(|_| unreadable("the request could not be built"))?;
    let t = Timeouts::SECRETS_MANAGER;
    let started = tokio::time::Instant::now();
    let mut attempt = 0u32;
    let answer = loop {
        attempt += 1;
        let left = t.operation.saturating_sub(started.elapsed());
        let result = client
            .post(
                "/",
                &[
                    ("x-amz-target", "secretsmanager.GetSecretValue"),
                    ("content-type", "application/x-amz-json-1.1"),
                ],
                &[],
                body.clone(),
                t.attempt.min(left),
                MAX_ANSWER,
            )
            .await;
        let again = match &result {
            Err(CallError::Timeout | CallError::Unreachable) => true,
            Ok(a) => {
                a.status >= 500
                    || a.status == 429
                    || a.error_code().as_deref() == Some("ThrottlingException")
            }
            Err(_) => false,
        };
        let pause = Duration::from_millis(100 << attempt);
        if !again || attempt >= 3 || started.elapsed() + pause >= t.operation {
            break result;
        }
        tokio::time::sleep(pause).await;
    };
    let answer = answer.map_err(|e| unreadable(&e.to_string()))?;
    if answer.status != 200 {
        let code = answer
            .error_code()
            .unwrap_or_else(|| format!("HTTP {}", answer.status));
        return Err(unreadable(&code));
    }
    #[derive(serde::Deserialize)]
    struct Value {
        #[serde(rename = "SecretString")]
        secret_string: Option<String>,
    }
    let value: Value =
        serde_json::from_slice(&answer.body).map_err(|_| unreadable("unreadable answer"))?;
    value
        .secret_string
        .map(SecretString)
        .ok_or_else(|| SecretError::NotAString {
            arn: arn.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::answering as stand_in;

    async fn client_at(endpoint: &str) -> SecretsClient {
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
