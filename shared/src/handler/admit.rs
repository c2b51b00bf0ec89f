//! Admission: everything decided from a request's line and headers before its body is read
//! (the metadata, the path, `Host`/`Origin`, the method, the bearer token, the declared type
//! and length).

use http::{HeaderMap, Method};

use super::hosts::check_host;
use super::{McpService, Reply};
use crate::auth::{AuthFailure, challenge};
use crate::metrics::{self, name as metric};
use crate::protocol::McpError;
use crate::tenant::Tenant;

/// A request that passed [`McpService::admit`]: the caller is known, the body not read yet.
#[derive(Debug)]
#[must_use]
pub struct Admitted {
    pub(super) tenant: Tenant,
    /// When the caller's bearer token expires, in seconds since the Unix epoch (`None`: auth
    /// is off). An answer streamed to this caller ends then.
    pub(super) expires_at: Option<u64>,
}

impl Admitted {
    /// The caller's tenant.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }
}

impl McpService {
    /// Everything that can be decided from the request line and headers alone, in this order:
    /// Protected Resource Metadata (public: it is how a client learns where to get a token),
    /// `404` for another path (reveals nothing), `403` for a `Host` or `Origin` not allowed
    /// (DNS rebinding is refused whoever asks), `405` for a method other than POST, then the
    /// bearer token (`401`/`403`, or `503` while the issuer's keys are unavailable), `415` for
    /// a body that is not JSON and `413` for a declared `Content-Length` over the limit.
    ///
    /// The HTTP edge ([`crate::http`]) runs this before reading a byte of the body, so a
    /// client without a valid token is answered at once and makes the server buffer nothing.
    pub async fn admit(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Admitted, Reply> {
        if let Some(reply) = self.resource_metadata(method, path) {
            return Err(reply);
        }
        if path != self.config.endpoint_path {
            return Err(Reply::error(
                None,
                &McpError::invalid_request("No MCP endpoint at this path").with_status(404),
            ));
        }
        if let Err(e) = self.check_host(headers) {
            return Err(Reply::error(None, &e));
        }
        if method != Method::POST {
            let mut r = Reply::error(
                None,
                &McpError::invalid_request("Only POST is supported on this endpoint")
                    .with_status(405),
            );
            r.headers.push(("allow", "POST".into()));
            return Err(r);
        }
        let caller = self.caller(headers).await?;
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !content_type
            .split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        {
            return Err(Reply::error(
                None,
                &McpError::invalid_request("Content-Type must be application/json")
                    .with_status(415),
            ));
        }
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.config.max_body_bytes as u64) {
            return Err(Reply::error(
                None,
                &McpError::too_large(self.config.max_body_bytes),
            ));
        }
        Ok(caller)
    }

    /// Serves Protected Resource Metadata (RFC 9728), when auth is on, at
    /// `/.well-known/oauth-protected-resource` followed by nothing, by the endpoint path, or by
    /// the path of the resource URI — the last being exactly the path the
    /// `401` challenge names ([`crate::auth::resource_metadata_url`]), whatever prefix the
    /// resource URI has (`https://api.example.com/v1/mcp` → `…/oauth-protected-resource/v1/mcp`).
    fn resource_metadata(&self, method: &Method, path: &str) -> Option<Reply> {
        use crate::auth::{WELL_KNOWN_PRM, resource_metadata_path};
        let auth = self.auth.as_ref()?;
        let suffix = path.strip_prefix(WELL_KNOWN_PRM)?;
        if !(suffix.is_empty()
            || suffix == self.config.endpoint_path
            || path == resource_metadata_path(&auth.settings().resource))
        {
            return None;
        }
        if method != Method::GET {
            let mut r = Reply::empty(405);
            r.headers.push(("allow", "GET".into()));
            return Some(r);
        }
        Some(Reply::json(
            200,
            crate::auth::resource_metadata(auth.settings()),
        ))
    }

    /// The caller: the local tenant without auth (no expiry), else the verified token's tenant
    /// claim and expiry. A refusal is `401` (or `403` for a missing scope) with a `WWW-Authenticate` challenge;
    /// when the issuer's keys cannot be had it is `503` with `Retry-After` and a JSON-RPC error
    /// (`-32603`), with no challenge: the token is not known to be bad.
    async fn caller(&self, headers: &HeaderMap) -> Result<Admitted, Reply> {
        let Some(auth) = &self.auth else {
            return Ok(Admitted {
                tenant: self.config.tenant.clone(),
                expires_at: None,
            });
        };
        let header = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match auth.authenticate(header).await {
            Ok(p) => Ok(Admitted {
                tenant: p.tenant,
                expires_at: Some(p.expires_at),
            }),
            Err(AuthFailure::Unavailable { retry_after_secs }) => {
                metrics::global().count(metric::AUTH_REFUSALS, &[("reason", "unavailable")], 1);
                tracing::warn!(
                    retry_after_secs,
                    "request refused: the authorization server's keys are unavailable"
                );
                let mut r = Reply::error(
                    None,
                    &McpError::internal_with(
                        "The authorization server's signing keys are unavailable; retry later",
                    )
                    .with_status(503),
                );
                r.headers
                    .push(("retry-after", retry_after_secs.to_string()));
                Err(r)
            }
            Err(failure) => {
                // The reason is logged; the token never is.
                tracing::info!(reason = %failure, "request refused by auth");
                let reason = match failure {
                    AuthFailure::Missing => "missing",
                    AuthFailure::InsufficientScope => "scope",
                    _ => "invalid",
                };
                metrics::global().count(metric::AUTH_REFUSALS, &[("reason", reason)], 1);
                let status = match failure {
                    AuthFailure::InsufficientScope => 403,
                    _ => 401,
                };
                let mut r = Reply::empty(status);
                r.headers
                    .push(("www-authenticate", challenge(auth.settings(), &failure)));
                Err(r)
            }
        }
    }

    /// DNS-rebinding protection ([`check_host`]) against the configured hosts.
    fn check_host(&self, headers: &HeaderMap) -> Result<(), McpError> {
        check_host(&self.config.allowed_hosts, headers)
    }
}
