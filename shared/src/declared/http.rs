//! The `http` target: a `POST` of the request per step to an HTTPS endpoint (plain HTTP only to
//! loopback), with a header whose value comes from the server's environment or, deployed, from
//! Secrets Manager, never from the manifest. The `200` body is the answer; redirects are not followed.

use std::net::IpAddr;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};

use super::entry::HttpSecret;
use super::target::{CallLimits, Target, TargetError, TargetHost};

/// An HTTPS endpoint.
pub struct HttpTarget {
    url: reqwest::Url,
    secret: Option<(HeaderName, HeaderValue)>,
    client: reqwest::Client,
}

impl HttpTarget {
    /// The target for `url`, sending `secret`'s header with its value (see [`secret_value`]).
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
                let (value, source) = secret_value(secret, host)?;
                let mut value = HeaderValue::from_str(&value)
                    .map_err(|_| format!("{source} is not a valid header value"))?;
                value.set_sensitive(true);
                Some((name, value))
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

/// The secret header's value and where it came from (for messages, never the value): the
/// secret `secret_arn` names where the host fetched secrets (Lambda), else the variable
/// `secret_env` names. An entry with only a `secret_arn` cannot be served locally.
fn secret_value(secret: &HttpSecret, host: &TargetHost) -> Result<(String, String), String> {
    if let (Some(arn), Some(fetched)) = (&secret.arn, &host.secrets) {
        let value = fetched
            .get(arn)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("secret_arn {arn} has no value"))?;
        return Ok((value.clone(), format!("secret_arn {arn}")));
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
    Ok((value, format!("secret_env {var}")))
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
        if let Some((name, value)) = &self.secret {
            post = post.header(name, value);
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
