//! The `http` target: a `POST` of the request per step to an HTTPS endpoint (plain HTTP only to
//! loopback), with a header whose value comes from the server's environment or, deployed, from
//! Secrets Manager, never from the manifest; optionally signed with AWS Signature Version 4
//! (`sigv4`). Every request carries the task's trace (`traceparent`, and on AWS
//! `X-Amzn-Trace-Id`). The `200` body is the answer, read with a byte bound; redirects are not
//! followed.
//!
//! Proxies: a loopback target never goes through one. Any other (HTTPS) target goes through
//! the proxy `HTTPS_PROXY` (or `https_proxy`, else `ALL_PROXY` / `all_proxy`) names, unless
//! `NO_PROXY` (or `no_proxy`) names its host; `HTTP_PROXY` is never used. The variables are
//! read through [`TargetHost::var`] when the manifest's tools are built.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};

use super::entry::HttpSecret;
use super::target::{CallLimits, LazySecrets, RequestSigner, Target, TargetError, TargetHost};

/// An HTTPS endpoint.
pub struct HttpTarget {
    url: reqwest::Url,
    secret: Option<(HeaderName, HeaderSource)>,
    sigv4: Option<(String, Arc<dyn RequestSigner>)>,
    xray: Option<fn() -> Option<String>>,
    /// The proxy this target goes through (never one for loopback).
    proxy: Option<reqwest::Proxy>,
    /// Built at the first call, not when the manifest loads: building one loads the trusted
    /// roots (~18 M instructions, 90 % of a cold start with a manifest naming an `http`
    /// target), which a function that never calls the target should not pay.
    client: OnceLock<reqwest::Client>,
}

/// Where the secret header's value comes from.
enum HeaderSource {
    /// Known when the target was built (`secret_env`).
    Known(HeaderValue),
    /// The secret `secret_arn` names, read at the first call that needs it.
    Secret { arn: String, secrets: LazySecrets },
}

impl HttpTarget {
    /// The target for `url`, sending `secret`'s header with its value (see [`header_source`]),
    /// each request signed for the service `sigv4` names when given.
    pub fn new(
        url: &str,
        secret: Option<&HttpSecret>,
        sigv4: Option<&str>,
        host: &TargetHost,
    ) -> Result<Self, String> {
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
        let sigv4 = match (sigv4, &host.signer) {
            (None, _) => None,
            (Some(service), Some(signer)) => Some((service.to_owned(), signer.clone())),
            (Some(_), None) => {
                return Err(
                    "sigv4 needs AWS credentials support (this build or host has none)".into(),
                );
            }
        };
        let proxy = match loopback {
            true => None,
            false => proxy(host)?,
        };
        Ok(Self {
            url,
            secret,
            sigv4,
            xray: host.xray,
            proxy,
            client: OnceLock::new(),
        })
    }

    /// The client, built at the first call; a failure to build one (the TLS roots could not be
    /// loaded) fails this call, retried, and is tried again at the next.
    fn client(&self) -> Result<&reqwest::Client, TargetError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // Never the system's proxy settings as reqwest reads them (HTTP_PROXY for plain
            // http, macOS and Windows settings): only the one chosen here.
            .no_proxy();
        if let Some(proxy) = &self.proxy {
            builder = builder.proxy(proxy.clone());
        }
        let built = builder.build().map_err(|e| {
            tracing::error!(error = %e, "the HTTP client of an http target could not be built");
            TargetError::Unreachable
        })?;
        Ok(self.client.get_or_init(|| built))
    }
}

/// The proxy for an HTTPS target (see the module's doc), from `host`'s environment.
fn proxy(host: &TargetHost) -> Result<Option<reqwest::Proxy>, String> {
    let var = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| host.var(n).filter(|v| !v.trim().is_empty()))
    };
    let Some(url) = var(&["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]) else {
        return Ok(None);
    };
    let proxy = reqwest::Proxy::https(url.trim())
        .map_err(|_| "HTTPS_PROXY (or ALL_PROXY) is not a proxy URL".to_owned())?;
    let except = var(&["NO_PROXY", "no_proxy"]).and_then(|v| reqwest::NoProxy::from_string(&v));
    Ok(Some(proxy.no_proxy(except)))
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

/// The trace headers of one step: a W3C `traceparent` and, when the host has an X-Ray trace,
/// the X-Ray header as it is. In an X-Ray trace the `traceparent` continues it (its trace id
/// is the X-Ray root's 32 hex digits, its parent the header's, sampled as it says); else its
/// trace id is the task's ([`super::TraceId::of_task`]), or a fresh one for a synchronous
/// call, with a fresh parent id per step, and sampled.
fn trace_headers(limits: &CallLimits, xray: Option<String>) -> (String, Option<String>) {
    let hex = |n: usize| {
        let mut b = vec![0u8; n];
        crate::clock::random_bytes(&mut b);
        b.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    if let Some((trace, parent, sampled)) = xray.as_deref().and_then(xray_parts) {
        let parent = parent.unwrap_or_else(|| hex(8));
        let flags = if sampled { "01" } else { "00" };
        return (format!("00-{trace}-{parent}-{flags}"), xray);
    }
    let trace = limits.trace.map_or_else(|| hex(16), |t| t.hex());
    (format!("00-{trace}-{}-01", hex(8)), None)
}

/// The W3C trace id (the root's 32 hex digits, lowercase), the parent id and whether sampled,
/// of a well-formed X-Ray header (`Root=1-xxxxxxxx-yyyyyyyyyyyyyyyyyyyyyyyy;Parent=…;Sampled=…`).
fn xray_parts(header: &str) -> Option<(String, Option<String>, bool)> {
    let (mut root, mut parent, mut sampled) = (None, None, false);
    for field in header.split(';') {
        match field.trim().split_once('=') {
            Some(("Root", v)) => root = Some(v),
            Some(("Parent", v)) => parent = Some(v),
            Some(("Sampled", v)) => sampled = v == "1",
            _ => {}
        }
    }
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut parts = root?.split('-');
    let (one, time, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if one != "1" || !hex(time, 8) || !hex(rest, 24) || parts.next().is_some() {
        return None;
    }
    let trace = format!("{time}{rest}").to_ascii_lowercase();
    let parent = parent
        .filter(|p| hex(p, 16) && *p != "0000000000000000")
        .map(str::to_ascii_lowercase);
    (trace != "0".repeat(32)).then_some((trace, parent, sampled))
}

#[async_trait]
impl Target for HttpTarget {
    async fn call(&self, request: Vec<u8>, limits: CallLimits) -> Result<Vec<u8>, TargetError> {
        let client = self.client()?;
        let mut post = client
            .post(self.url.clone())
            .timeout(limits.timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(request);
        if let Some((name, source)) = &self.secret {
            post = post.header(name, source.value().await?);
        }
        let mut post = post.build().map_err(|_| TargetError::Unreachable)?;
        if let Some((service, signer)) = &self.sigv4 {
            signer
                .sign(service, &mut post)
                .await
                .map_err(TargetError::Unsigned)?;
        }
        // After signing: a proxy or gateway may rewrite them.
        let (traceparent, xray) = trace_headers(&limits, self.xray.and_then(|f| f()));
        for (name, value) in [
            ("traceparent", Some(traceparent)),
            ("x-amzn-trace-id", xray),
        ] {
            if let Some(v) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
                post.headers_mut().insert(name, v);
            }
        }
        let resp = client
            .execute(post)
            .await
            .map_err(|e| match e.is_timeout() {
                true => TargetError::Timeout,
                false => TargetError::Unreachable,
            })?;
        match resp.status().as_u16() {
            200 => {}
            429 => return Err(TargetError::Throttled),
            other => return Err(TargetError::Status(other)),
        }
        let max = limits.max_answer_bytes;
        read_bounded(resp, max).await.map_err(|cut| match cut {
            Cut::TooLarge => TargetError::TooLarge(max),
            Cut::Timeout => TargetError::Timeout,
            Cut::Broken => TargetError::Unreachable,
        })
    }
}

/// Why a body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// It was longer than the bound (announced, or found while reading).
    TooLarge,
    /// It did not arrive in time.
    Timeout,
    /// The connection broke.
    Broken,
}

/// `response`'s body, at most `max` bytes: one announced longer is refused before a byte is
/// read, and reading stops (the connection dropped) at the first chunk past `max`, so no more
/// than `max` plus one chunk is ever held.
pub async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, Cut> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(Cut::TooLarge);
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max {
                    return Err(Cut::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) if e.is_timeout() => return Err(Cut::Timeout),
            Err(_) => return Err(Cut::Broken),
        }
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
