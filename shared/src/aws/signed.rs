//! AWS APIs called without a service SDK: requests signed with Signature Version 4
//! (`aws-sigv4`, the SDK's own signer) from the credentials and region of the process's
//! [`aws_config::SdkConfig`], sent with `reqwest`, their answers read with a byte bound.
//!
//! # Why not the service SDKs
//!
//! The functions call two small JSON APIs besides DynamoDB and SQS: Lambda `Invoke`
//! ([`super::invoke`]) and Secrets Manager `GetSecretValue` ([`super::secrets`]). Their SDK
//! clients cost ~3 MB of the arm64 mcp function, and the Lambda client reads an answer whole
//! before anyone may look at its size: a 200 MiB `Invoke` answer took the server from 18 to
//! 656 MiB before `max_answer_bytes` failed the task. Here an answer is read while counting
//! and abandoned (its connection dropped) at the first byte past the bound.
//!
//! # What it keeps of the SDK's behaviour
//!
//! - Credentials: the SDK configuration's provider (the environment on Lambda, the default
//!   chain elsewhere), asked once and kept until five minutes before they expire.
//! - Region: the SDK configuration's.
//! - Endpoint: as a service client resolves it — the configuration's own endpoint when the
//!   program set one, else the service's setting (`AWS_ENDPOINT_URL_LAMBDA`,
//!   `AWS_ENDPOINT_URL_SECRETS_MANAGER`, or the profile's `services` section), else
//!   `AWS_ENDPOINT_URL`, else `https://{prefix}.{region}.amazonaws.com` (`.com.cn` in the China
//!   regions). FIPS and dual-stack endpoints are not chosen for you: name one in the setting.
//! - No proxy (as [`super::https`]), no redirect followed, TCP_NODELAY, idle connections
//!   pooled.
//!
//! Nothing here logs or returns a credential: [`SignError`] says which part failed, and the
//! `Authorization` and `X-Amz-Security-Token` headers are marked sensitive (hidden from
//! `reqwest`'s and `http`'s `Debug`).

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials as _, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use reqwest::header::{HeaderName, HeaderValue};

use crate::declared::http::{Cut, read_bounded};

/// Credentials are asked for again this long before they expire.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// The largest refusal body read (its error code is all that is used of it); a longer one
/// is dropped, and the code then comes from the `x-amzn-ErrorType` header alone.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How long a connection (TCP and TLS) may take to set up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a request could not be signed. Never carries a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The configuration has no credentials, or its provider failed to give them.
    #[error("no AWS credentials")]
    NoCredentials,
    /// The configuration names no region.
    #[error("no AWS region")]
    NoRegion,
    /// The request cannot be signed (a header value that is not text, a URL it rejects).
    #[error("the request cannot be signed")]
    Unsignable,
}

/// Signs requests with the credentials and region of one SDK configuration.
pub struct Signer {
    region: Option<String>,
    provider: Option<SharedCredentialsProvider>,
    cached: Mutex<Option<Credentials>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer with `sdk`'s credentials provider and region. Asks for no credentials yet.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            region: sdk.region().map(|r| r.as_ref().to_owned()),
            provider: sdk.credentials_provider(),
            cached: Mutex::new(None),
        }
    }

    /// The region requests are signed for.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The credentials: the ones kept, unless they expire within [`REFRESH_BEFORE`].
    async fn credentials(&self) -> Result<Credentials, SignError> {
        let fresh = |c: &Credentials| {
            c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE)
        };
        if let Some(c) = self.lock().as_ref().filter(|c| fresh(c)) {
            return Ok(c.clone());
        }
        let provider = self.provider.as_ref().ok_or(SignError::NoCredentials)?;
        let got = provider.provide_credentials().await.map_err(|e| {
            tracing::warn!(error = %e, "AWS credentials could not be had");
            SignError::NoCredentials
        })?;
        *self.lock() = Some(got.clone());
        Ok(got)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Credentials>> {
        self.cached.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Signs `request` (its method, URL, headers and body as they are now) for `service`,
    /// adding `Authorization`, `X-Amz-Date` and, with temporary credentials,
    /// `X-Amz-Security-Token`. Headers added afterwards are not signed.
    pub async fn sign(
        &self,
        service: &str,
        request: &mut reqwest::Request,
    ) -> Result<(), SignError> {
        let region = self.region.as_deref().ok_or(SignError::NoRegion)?;
        let identity = self.credentials().await?.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|_| SignError::Unsignable)?
            .into();
        let headers = request
            .headers()
            .iter()
            .map(|(k, v)| Ok((k.as_str(), v.to_str().map_err(|_| SignError::Unsignable)?)))
            .collect::<Result<Vec<_>, SignError>>()?;
        let body = match request.body() {
            None => SignableBody::Bytes(&[]),
            Some(b) => SignableBody::Bytes(b.as_bytes().ok_or(SignError::Unsignable)?),
        };
        let signable = SignableRequest::new(
            request.method().as_str(),
            request.url().as_str(),
            headers.into_iter(),
            body,
        )
        .map_err(|_| SignError::Unsignable)?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|_| SignError::Unsignable)?
            .into_parts();
        let (add, _) = instructions.into_parts();
        for header in add {
            let mut value =
                HeaderValue::from_str(header.value()).map_err(|_| SignError::Unsignable)?;
            value.set_sensitive(
                header.sensitive()
                    || matches!(header.name(), "authorization" | "x-amz-security-token"),
            );
            request
                .headers_mut()
                .insert(HeaderName::from_static(header.name()), value);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl crate::declared::RequestSigner for Signer {
    async fn sign(
        &self,
        service: &str,
        request: &mut reqwest::Request,
    ) -> Result<(), &'static str> {
        Signer::sign(self, service, request)
            .await
            .map_err(|e| match e {
                SignError::NoCredentials => "no AWS credentials",
                SignError::NoRegion => "no AWS region",
                SignError::Unsignable => "a header or URL it cannot sign",
            })
    }
}

/// One AWS service as this module calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// The SDK's service id, which names its endpoint setting (`Lambda`:
    /// `AWS_ENDPOINT_URL_LAMBDA`; `Secrets Manager`: `AWS_ENDPOINT_URL_SECRETS_MANAGER`).
    pub id: &'static str,
    /// The name requests are signed for, also the default endpoint's first label.
    pub signing_name: &'static str,
}

impl Service {
    /// AWS Lambda.
    pub const LAMBDA: Service = Service {
        id: "Lambda",
        signing_name: "lambda",
    };
    /// AWS Secrets Manager.
    pub const SECRETS_MANAGER: Service = Service {
        id: "Secrets Manager",
        signing_name: "secretsmanager",
    };
}

/// Why a call gave no answer. Carries nothing the answer held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The request could not be signed.
    #[error("{0}")]
    Sign(#[from] SignError),
    /// No endpoint: neither a setting nor a region to make one from, or one that is no URL.
    #[error("no usable endpoint")]
    NoEndpoint,
    /// No answer (or not all of it) within the call's timeout.
    #[error("timeout")]
    Timeout,
    /// The connection failed or broke.
    #[error("connection failed")]
    Unreachable,
    /// The answer's body was longer than the call allows.
    #[error("an answer over {0} bytes")]
    TooLarge(usize),
}

/// An answer: its status, headers and body (at most the call's bound).
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The service's error code of a refusal (`TooManyRequestsException`, …): the
    /// `x-amzn-ErrorType` header, else the body's `__type` or `code`, without the namespace
    /// (`…#Code`) or the documentation URL (`Code:http…`) some services add. Never the
    /// message.
    pub fn error_code(&self) -> Option<String> {
        let raw = match self.headers.get("x-amzn-errortype") {
            Some(v) => v.to_str().ok()?.to_owned(),
            None => {
                let body: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
                ["__type", "code", "Code"]
                    .iter()
                    .find_map(|k| body.get(k)?.as_str().map(str::to_owned))?
            }
        };
        let code = raw.split(':').next()?;
        let code = code.rsplit('#').next()?;
        (!code.is_empty() && code.len() <= 128 && code.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| code.to_owned())
    }
}

/// A caller of one AWS service's API.
pub struct AwsApi {
    service: Service,
    endpoint: Option<reqwest::Url>,
    signer: Signer,
    http: super::FirstUse<Option<reqwest::Client>>,
}

impl std::fmt::Debug for AwsApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsApi")
            .field("service", &self.service.id)
            .field(
                "endpoint",
                &self.endpoint.as_ref().map(reqwest::Url::as_str),
            )
            .finish_non_exhaustive()
    }
}

impl AwsApi {
    /// A caller of `service` with `sdk`'s settings. Builds no HTTP client and asks for no
    /// credentials until its first call.
    pub fn new(sdk: &aws_config::SdkConfig, service: Service) -> Self {
        let endpoint = endpoint(sdk, service).and_then(|e| reqwest::Url::parse(&e).ok());
        Self {
            service,
            endpoint,
            signer: Signer::new(sdk),
            http: super::FirstUse::new(|| {
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .tcp_nodelay(true)
                    .connect_timeout(CONNECT_TIMEOUT)
                    .pool_idle_timeout(Duration::from_secs(90))
                    .build()
                    .inspect_err(
                        |e| tracing::error!(error = %e, "an AWS API client cannot be built"),
                    )
                    .ok()
            }),
        }
    }

    /// The endpoint calls go to.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_ref().map(reqwest::Url::as_str)
    }

    /// A signed `POST` of `body` to `path` (already percent-encoded) with `headers`, then
    /// unsigned `trailing` headers (a trace header); the whole call within `timeout`. A
    /// success's body is at most `max_body` bytes (more is [`CallError::TooLarge`], cut off
    /// while it arrives); a refusal's body is read up to 64 KiB and otherwise left empty.
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&'static str, &str)],
        trailing: &[(&'static str, &str)],
        body: Vec<u8>,
        timeout: Duration,
        max_body: usize,
    ) -> Result<Answer, CallError> {
        let base = self.endpoint.as_ref().ok_or(CallError::NoEndpoint)?;
        let url = base
            .join(path.trim_start_matches('/'))
            .map_err(|_| CallError::NoEndpoint)?;
        let http = self.http.as_ref().ok_or(CallError::Unreachable)?;
        let mut request = http.post(url).timeout(timeout);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let mut request = request
            .body(body)
            .build()
            .map_err(|_| CallError::NoEndpoint)?;
        self.signer
            .sign(self.service.signing_name, &mut request)
            .await?;
        for (k, v) in trailing {
            if let Ok(v) = HeaderValue::from_str(v) {
                request.headers_mut().insert(*k, v);
            }
        }
        let response = http
            .execute(request)
            .await
            .map_err(|e| match e.is_timeout() {
                true => CallError::Timeout,
                false => CallError::Unreachable,
            })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if !(200..300).contains(&status) {
            // A refusal: only its code is used, from the header or a small body.
            let body = read_bounded(response, MAX_ERROR_BODY)
                .await
                .unwrap_or_default();
            return Ok(Answer {
                status,
                headers,
                body,
            });
        }
        let body = read_bounded(response, max_body)
            .await
            .map_err(|e| match e {
                Cut::TooLarge => CallError::TooLarge(max_body),
                Cut::Timeout => CallError::Timeout,
                Cut::Broken => CallError::Unreachable,
            })?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

/// The endpoint of `service`, resolved as the SDK's clients resolve it (see the module's doc).
fn endpoint(sdk: &aws_config::SdkConfig, service: Service) -> Option<String> {
    if sdk.get_origin("endpoint_url").is_client_config() {
        if let Some(url) = sdk.endpoint_url() {
            return Some(url.to_owned());
        }
    } else {
        let key = aws_types::service_config::ServiceConfigKey::builder()
            .service_id(service.id)
            .env("AWS_ENDPOINT_URL")
            .profile("endpoint_url")
            .build()
            .ok()?;
        if let Some(url) = sdk.service_config().and_then(|c| c.load_config(key)) {
            return Some(url);
        }
        if let Some(url) = sdk.endpoint_url() {
            return Some(url.to_owned());
        }
    }
    let region = sdk.region()?.as_ref();
    let valid = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let suffix = match region.starts_with("cn-") {
        true => "amazonaws.com.cn",
        false => "amazonaws.com",
    };
    valid.then(|| format!("https://{}.{region}.{suffix}", service.signing_name))
}

/// `s` percent-encoded as one path segment (all but the unreserved characters).
pub fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "signed_tests.rs"]
mod tests;
