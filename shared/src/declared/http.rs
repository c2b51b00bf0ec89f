//! The `http` target: a `POST` of the request per step to an HTTPS endpoint (plain HTTP only to
//! loopback), with a header whose value comes from the server's environment or, deployed, from
//! Secrets Manager, never from the manifest. The `200` body is the answer; redirects are not followed.

use std::net::IpAddr;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};

use super::entry::HttpSecret;
use super::target::{CallLimits, LazySecrets, Target, TargetError, TargetHost};

/// An HTTPS endpoint.
pub struct HttpTarget {
    url: reqwest::Url,
    secret: Option<(HeaderName, HeaderSource)>,
    client: reqwest::Client,
}

/// Where the secret header's value comes from.
enum HeaderSource {
    /// Known when the target was built (`secret_env`).
    Known(HeaderValue),
    /// The secret `secret_arn` names, read at the first call that needs it.
    Secret { arn: String, secrets: LazySecrets },
}

impl HttpTarget {
    /// The target for `url`, sending `secret`'s header with its value (see [`header_source`]).
    pub fn new(url: &str, secret: Option<&HttpSecret>, host: &TargetHost) -> Result<Self, String> {
        let url = reqwest::Url::parse(url).map_err(|_| "target.http is not a URL".to_owned())?;
        let host_name = url.host_str().unwrap_or("");
        let loopback = host_name.eq_ignore_ascii_case("localhost")
            || host_name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match url.scheme() {
            "https" => {}
            "http" if loopback => {}
            "http" => return Err("target.http must be https (plain http only to loopback)".into()),
            _ => return Err("target.http must be an https URL".into()),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("target.http must not carry credentials (use secret_env)".into());
        }
        let secret = match secret {
            None => None,
            Some(secret) => {
                let name = HeaderName::from_bytes(secret.header.as_bytes())
                    .map_err(|_| "header is not an HTTP header name".to_owned())?;
                Some((name, header_source(secret, host)?))
            }
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| "the HTTP client could not be built".to_owned())?;
        Ok(Self {
            url,
            secret,
            client,
        })
    }
}

/// Where the secret header's value comes from: the secret `secret_arn` names where the host
/// reads secrets (Lambda: at the first call, [`LazySecrets`]), else the variable `secret_env`
/// names, read now. An entry with only a `secret_arn` cannot be served locally.
fn header_source(secret: &HttpSecret, host: &TargetHost) -> Result<HeaderSource, String> {
    if let (Some(arn), Some(secrets)) = (&secret.arn, &host.secrets) {
        return Ok(HeaderSource::Secret {
            arn: arn.clone(),
            secrets: secrets.clone(),
        });
    }
    let Some(var) = &secret.env else {
        return Err(
            "secret_arn is read on AWS only: give secret_env too for the local server".into(),
        );
    };
    let value = host
        .var(var)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("secret_env {var} is not set"))?;
    Ok(HeaderSource::Known(sensitive(&value).ok_or_else(|| {
        format!("secret_env {var} is not a valid header value")
    })?))
}

/// `value` as a header value never logged.
fn sensitive(value: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some(value)
}

impl HeaderSource {
    /// The value to send: a secret is read now if it was not yet; one that cannot be read (or
    /// is no header value) fails this call, logged with its ARN and the reason, never a value.
    async fn value(&self) -> Result<HeaderValue, TargetError> {
        match self {
            HeaderSource::Known(value) => Ok(value.clone()),
            HeaderSource::Secret { arn, secrets } => {
                let read = secrets.value(arn).await.and_then(|v| {
                    sensitive(&v).ok_or_else(|| format!("secret {arn} is not a valid header value"))
                });
                read.map_err(|reason| {
                    tracing::error!(%reason, "target_secret_unavailable: an http target's secret_arn could not be read; the step is retried");
                    TargetError::SecretUnavailable
                })
            }
        }
    }
}

#[async_trait]
impl Target for HttpTarget {
    async fn call(&self, request: Vec<u8>, limits: CallLimits) -> Result<Vec<u8>, TargetError> {
        let mut post = self
            .client
            .post(self.url.clone())
            .timeout(limits.timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(request);
        if let Some((name, source)) = &self.secret {
            post = post.header(name, source.value().await?);
        }
        let mut resp = post.send().await.map_err(|e| match e.is_timeout() {
            true => TargetError::Timeout,
            false => TargetError::Unreachable,
        })?;
        match resp.status().as_u16() {
            200 => {}
            429 => return Err(TargetError::Throttled),
            other => return Err(TargetError::Status(other)),
        }
        let max = limits.max_answer_bytes;
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(TargetError::TooLarge(max));
        }
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > max {
                        return Err(TargetError::TooLarge(max));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body),
                Err(e) if e.is_timeout() => return Err(TargetError::Timeout),
                Err(_) => return Err(TargetError::Unreachable),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:target-key-AbCdEf";

    /// A target on loopback answering `{}` to every step; returns its URL and the secret
    /// header of each request it received.
    async fn target() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let app = axum::Router::new().fallback(move |h: http::HeaderMap| {
            let log = log.clone();
            async move {
                let key = h
                    .get("x-key")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                log.lock().unwrap().push(key);
                "{}"
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/step", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, seen)
    }

    /// A `secret_arn` is read at the first call, not when the target is built, then kept; a
    /// read that fails fails that call (retried as a step is) without reaching the target,
    /// and the next call reads again.
    #[tokio::test]
    async fn a_secret_arn_is_read_at_the_first_call_kept_and_read_again_after_a_failure() {
        let reads = Arc::new(AtomicUsize::new(0));
        let fetch: crate::declared::SecretFetch = {
            let reads = reads.clone();
            Arc::new(move |arn: String| {
                let n = reads.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    assert_eq!(arn, ARN);
                    match n {
                        0 => Err(format!("secret {arn} could not be read: timeout")),
                        _ => Ok("key-from-secrets".to_owned()),
                    }
                })
            })
        };
        let host = TargetHost {
            secrets: Some(LazySecrets::new(fetch)),
            ..TargetHost::default()
        };
        let (url, seen) = target().await;
        let secret = HttpSecret {
            header: "x-key".into(),
            env: None,
            arn: Some(ARN.into()),
        };
        let t = HttpTarget::new(&url, Some(&secret), &host).unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 0, "nothing read when built");
        let limits = CallLimits {
            timeout: Duration::from_secs(5),
            max_answer_bytes: 1024,
        };
        let err = t.call(b"{}".to_vec(), limits).await.unwrap_err();
        assert_eq!(err, TargetError::SecretUnavailable);
        assert!(err.retried());
        assert!(
            seen.lock().unwrap().is_empty(),
            "no step sent without its secret"
        );
        for _ in 0..2 {
            assert_eq!(t.call(b"{}".to_vec(), limits).await.unwrap(), b"{}");
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "read again once, then kept"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [
                Some("key-from-secrets".to_owned()),
                Some("key-from-secrets".to_owned())
            ]
        );
        // An empty value is no value.
        let empty = TargetHost {
            secrets: Some(LazySecrets::fixed(HashMap::from([(
                ARN.into(),
                String::new(),
            )]))),
            ..TargetHost::default()
        };
        let t = HttpTarget::new(&url, Some(&secret), &empty).unwrap();
        assert_eq!(
            t.call(b"{}".to_vec(), limits).await.unwrap_err(),
            TargetError::SecretUnavailable
        );
    }
}
