//! The OAuth 2.1 resource server: every request's bearer JWT is checked here — signature
//! against the issuer's JWKS (cached, refreshed on an unknown key id), issuer, expiry and
//! not-before with a small clock skew, that it is an access token meant for this server (one
//! of its audiences, or no `aud` and an allowed client: [`AuthSettings`]) and carries the
//! required scopes — and the tenant is read from a configurable claim of the verified token.
//!
//! The verdicts map to the wire in [`crate::handler`]: missing or bad token → `401` with
//! `WWW-Authenticate: Bearer resource_metadata="…"`; missing scope → `403`
//! `error="insufficient_scope"`; the issuer's keys unreachable while no cached key fits the
//! token → `503` with `Retry-After` (not the client's fault, so no `invalid_token`). Tokens are
//! never logged.
//!
//! The issuer's keys, and how they are fetched and cached under abuse, are in `keys`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Validation, decode, decode_header};
use serde_json::{Map, Value, json};

use crate::tenant::Tenant;

mod keys;

pub use keys::{FAILURE_BACKOFF, REFRESH_COOLDOWN, parse_jwks};
use keys::{KeyCache, RefreshTiming};

/// Where the issuer's signing keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// A JWKS document on disk (tests, air-gapped setups).
    File(PathBuf),
    /// The issuer's `jwks_uri`.
    Url(String),
}

/// Resource-server settings.
///
/// Which tokens are this server's is the operator's provider's business: the `aud` values it
/// puts in them ([`audiences`](Self::audiences)), or for a provider whose access tokens carry
/// no `aud` at all (Amazon Cognito) the app clients they were issued to
/// ([`allowed_client_ids`](Self::allowed_client_ids)), and where the scopes are (`scope` or
/// `scp`, a string or an array). The checks that make a token valid (signature, `iss`, `exp`,
/// `nbf`, the key's algorithm, a known `kid`) hold whatever the provider;
/// `docs/identity-providers.md` has a recipe per provider.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Expected `iss`.
    pub issuer: String,
    /// The resource this server is (e.g. `https://api.example.com/mcp`): the Protected
    /// Resource Metadata's `resource`, and where a challenge points for that metadata.
    pub resource: String,
    /// The `aud` values accepted (one match is enough; a token's `aud` may be a string or an
    /// array). Never empty once [`AuthSettings::check`] passed: the resource when none is set.
    pub audiences: Vec<String>,
    /// App clients whose tokens **without** an `aud` claim are accepted (Cognito access tokens
    /// name theirs in `client_id` and say `token_use: access`). Empty: a token without `aud`
    /// is refused. A token whose `aud` is present but wrong is refused whatever its client.
    pub allowed_client_ids: Vec<String>,
    /// Signing keys.
    pub jwks: JwksSource,
    /// Claim that names the tenant (`sub`, or an organisation claim).
    pub tenant_claim: String,
    /// Scopes every request must carry (empty: none).
    pub required_scopes: Vec<String>,
    /// Scopes named in the metadata's `scopes_supported` and in a challenge's `scope`, which a
    /// client asks its authorization server for. Empty: the required scopes. They may differ
    /// from the required ones: Entra ID is asked for `api://…/tasks.run` and grants `tasks.run`.
    pub advertised_scopes: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
}

/// A combination of settings that would accept tokens it should not, or name no resource:
/// the server refuses to start with it. The messages name the `serve` flag and the Lambda
/// variable alike.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// Accepting tokens without `aud` by client id alone would let a Cognito ID token of that
    /// app client in: a required scope, which only access tokens carry, must go with it.
    #[error(
        "--allowed-client-id (AUTH_ALLOWED_CLIENT_IDS) needs --required-scope \
         (AUTH_REQUIRED_SCOPES): a token without `aud` is told apart from an ID token or \
         another API's token by the scope it carries"
    )]
    ClientIdsWithoutScope,
    /// No resource and no audience.
    #[error("the resource is required: --resource or --audience (AUTH_RESOURCE or AUTH_AUDIENCE)")]
    NoResource,
    /// The resource is not an absolute `http(s)` URI without a fragment.
    #[error(
        "the resource (--resource, AUTH_RESOURCE, or else the first audience) must be an absolute http(s) URI without a fragment"
    )]
    BadResource,
    /// An empty (or blank) value in a list.
    #[error("an empty {0} is not allowed")]
    Empty(&'static str),
}

impl AuthSettings {
    /// Settings where one resource is also the one accepted audience (what `--audience` alone
    /// has always meant), with no client ids and no scopes.
    pub fn for_resource(issuer: &str, resource: &str, jwks: JwksSource) -> Self {
        Self {
            issuer: issuer.to_owned(),
            resource: resource.to_owned(),
            audiences: vec![resource.to_owned()],
            allowed_client_ids: Vec::new(),
            jwks,
            tenant_claim: "sub".into(),
            required_scopes: Vec::new(),
            advertised_scopes: Vec::new(),
            leeway: Duration::from_secs(60),
        }
    }

    /// The resource and the audiences from the settings as given: the resource when set, else
    /// the first audience; the audiences when any, else the resource.
    pub fn resolve_resource(
        resource: Option<String>,
        audiences: Vec<String>,
    ) -> Result<(String, Vec<String>), AuthConfigError> {
        let resource = match (resource, audiences.first()) {
            (Some(r), _) => r,
            (None, Some(first)) => first.clone(),
            (None, None) => return Err(AuthConfigError::NoResource),
        };
        let audiences = if audiences.is_empty() {
            vec![resource.clone()]
        } else {
            audiences
        };
        Ok((resource, audiences))
    }

    /// Refuses settings that would let the wrong tokens in (see [`AuthConfigError`]).
    pub fn check(&self) -> Result<(), AuthConfigError> {
        let lists: [(&'static str, &Vec<String>); 4] = [
            ("audience", &self.audiences),
            ("allowed client id", &self.allowed_client_ids),
            ("required scope", &self.required_scopes),
            ("advertised scope", &self.advertised_scopes),
        ];
        for (name, list) in lists {
            if list.iter().any(|v| v.trim().is_empty()) {
                return Err(AuthConfigError::Empty(name));
            }
        }
        if self.resource.trim().is_empty() {
            return Err(AuthConfigError::NoResource);
        }
        let absolute = ["https://", "http://"]
            .iter()
            .any(|scheme| self.resource.len() > scheme.len() && self.resource.starts_with(scheme));
        if !absolute || self.resource.contains('#') {
            return Err(AuthConfigError::BadResource);
        }
        if self.audiences.is_empty() {
            return Err(AuthConfigError::Empty("audience"));
        }
        if !self.allowed_client_ids.is_empty() && self.required_scopes.is_empty() {
            return Err(AuthConfigError::ClientIdsWithoutScope);
        }
        Ok(())
    }

    /// The scopes a client is told to ask for: the advertised ones, else the required ones.
    pub fn scopes_to_advertise(&self) -> &[String] {
        if self.advertised_scopes.is_empty() {
            &self.required_scopes
        } else {
            &self.advertised_scopes
        }
    }
}

/// Who is calling, once the token checks out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant: every task key starts with it.
    pub tenant: Tenant,
    /// When the token expires (its `exp`), in seconds since the Unix epoch: an answer streamed
    /// to this caller ends then ([`crate::handler`]), however long its own budget.
    pub expires_at: u64,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// No bearer token.
    #[error("no bearer token")]
    Missing,
    /// The token is not valid for this server (the reason is for logs only).
    #[error("invalid token: {0}")]
    Invalid(&'static str),
    /// Valid, but without a required scope.
    #[error("insufficient scope")]
    InsufficientScope,
    /// No cached key fits the token and the issuer's keys could not be fetched: the token may
    /// well be valid, so this is the server's trouble (`503`), not the client's (`401`).
    #[error("signing keys unavailable (retry in {retry_after_secs} s)")]
    Unavailable {
        /// When the next fetch may run, in whole seconds (at least 1): the `Retry-After`.
        retry_after_secs: u64,
    },
}

/// Most characters a tenant id may have.
const MAX_TENANT_LEN: usize = 256;

/// Verifies bearer tokens; built once per process, shared by every request.
pub struct Authenticator {
    settings: AuthSettings,
    cache: Arc<KeyCache>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("issuer", &self.settings.issuer)
            .field("resource", &self.settings.resource)
            .finish_non_exhaustive()
    }
}

/// Reads the bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let h = header?.trim();
    let (scheme, token) = h.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Authenticator {
    /// An authenticator; keys are fetched on first use.
    pub fn new(settings: AuthSettings) -> Self {
        Self::with_timing(
            settings,
            RefreshTiming {
                cooldown: REFRESH_COOLDOWN,
                backoff: FAILURE_BACKOFF,
            },
        )
    }

    fn with_timing(settings: AuthSettings, timing: RefreshTiming) -> Self {
        let cache = KeyCache::new(settings.jwks.clone(), timing);
        Self { settings, cache }
    }

    /// The settings.
    pub fn settings(&self) -> &AuthSettings {
        &self.settings
    }

    /// Checks a request's `Authorization` header value.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<Principal, AuthFailure> {
        let token = bearer(authorization).ok_or(AuthFailure::Missing)?;
        let header = decode_header(token).map_err(|_| AuthFailure::Invalid("malformed token"))?;
        let kid = header.kid.ok_or(AuthFailure::Invalid("token has no kid"))?;
        let (key, alg) = self.cache.key(&kid).await?;
        if header.alg != alg {
            return Err(AuthFailure::Invalid("algorithm does not match the key"));
        }
        let mut v = Validation::new(alg);
        v.set_issuer(&[&self.settings.issuer]);
        // `aud` is checked below, where a token without one may still be an allowed client's.
        v.validate_aud = false;
        v.set_required_spec_claims(&["exp", "iss"]);
        v.leeway = self.settings.leeway.as_secs();
        v.validate_nbf = true;
        let claims = decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                AuthFailure::Invalid(match e.kind() {
                    K::ExpiredSignature => "token expired",
                    K::ImmatureSignature => "token not yet valid",
                    K::InvalidIssuer => "wrong issuer",
                    K::InvalidSignature => "bad signature",
                    K::MissingRequiredClaim(_) => "missing claim",
                    _ => "token rejected",
                })
            })?
            .claims;
        self.check_audience(&claims)?;
        // Present and a number: the validation above requires and checks it.
        let expires_at = claims
            .get("exp")
            .and_then(numeric_date)
            .ok_or(AuthFailure::Invalid("missing claim"))?;
        let tenant = match claims.get(&self.settings.tenant_claim) {
            Some(Value::String(t)) if valid_tenant(t) => Tenant::new(t.as_str()),
            _ => return Err(AuthFailure::Invalid("no usable tenant claim")),
        };
        if !self.settings.required_scopes.is_empty() {
            let granted = scopes(&claims);
            if !self
                .settings
                .required_scopes
                .iter()
                .all(|s| granted.contains(&s.as_str()))
            {
                return Err(AuthFailure::InsufficientScope);
            }
        }
        Ok(Principal { tenant, expires_at })
    }

    /// Whether the token is meant for this server: an access token (no provider's mark of an
    /// ID or refresh token) whose `aud` names one of the audiences, or which has no `aud` and
    /// was issued to an allowed client.
    fn check_audience(&self, claims: &Map<String, Value>) -> Result<(), AuthFailure> {
        // Cognito marks its tokens `token_use: access` or `id`; Keycloak `typ: Bearer`, `ID`,
        // `Refresh` or `Logout`. Whoever marks them, only access tokens pass.
        match claims.get("token_use") {
            None => {}
            Some(Value::String(u)) if u == "access" => {}
            Some(_) => return Err(AuthFailure::Invalid("not an access token")),
        }
        if let Some(Value::String(t)) = claims.get("typ")
            && ["id", "refresh", "logout", "offline"]
                .iter()
                .any(|k| t.eq_ignore_ascii_case(k))
        {
            return Err(AuthFailure::Invalid("not an access token"));
        }
        let ours = |a: &Value| {
            a.as_str()
                .is_some_and(|a| self.settings.audiences.iter().any(|ours| ours == a))
        };
        match claims.get("aud") {
            Some(Value::Array(list)) if list.iter().any(ours) => Ok(()),
            Some(one @ Value::String(_)) if ours(one) => Ok(()),
            Some(_) => Err(AuthFailure::Invalid("wrong audience")),
            None if self.settings.allowed_client_ids.is_empty() => {
                Err(AuthFailure::Invalid("missing claim"))
            }
            None => match claims.get("client_id") {
                Some(Value::String(c)) if self.settings.allowed_client_ids.contains(c) => Ok(()),
                _ => Err(AuthFailure::Invalid("client not allowed")),
            },
        }
    }
}

/// A JWT `NumericDate` (seconds since the epoch, possibly with a fraction), in whole seconds.
fn numeric_date(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| s as u64)
    })
}

fn valid_tenant(t: &str) -> bool {
    !t.is_empty() && t.len() <= MAX_TENANT_LEN && !t.chars().any(char::is_control)
}

/// Granted scopes, from `scope` and `scp`, each a space-separated string (OAuth's `scope`:
/// Cognito, Auth0, Keycloak; Entra ID's `scp`) or an array of strings (Okta's `scp`).
fn scopes(claims: &Map<String, Value>) -> Vec<&str> {
    let mut granted = Vec::new();
    for name in ["scope", "scp"] {
        match claims.get(name) {
            Some(Value::String(s)) => granted.extend(s.split_whitespace()),
            Some(Value::Array(a)) => granted.extend(a.iter().filter_map(Value::as_str)),
            _ => {}
        }
    }
    granted
}

/// The Protected Resource Metadata document (RFC 9728).
pub fn resource_metadata(settings: &AuthSettings) -> Value {
    let mut doc = json!({
        "resource": settings.resource,
        "authorization_servers": [settings.issuer],
        "bearer_methods_supported": ["header"],
    });
    let advertised = settings.scopes_to_advertise();
    if !advertised.is_empty() {
        doc["scopes_supported"] = json!(advertised);
    }
    doc
}

/// Where Protected Resource Metadata lives (RFC 9728 §3).
pub const WELL_KNOWN_PRM: &str = "/.well-known/oauth-protected-resource";

/// A resource URI cut into origin (`scheme://authority`), path and `?query` (the fragment,
/// which a resource URI must not have, is dropped).
fn split_resource(resource: &str) -> (&str, &str, &str) {
    let resource = resource.split('#').next().unwrap_or(resource);
    let (origin, rest) = match resource.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            resource.split_at(scheme.len() + 3 + end)
        }
        None => ("", resource),
    };
    let (path, query) = rest.split_at(rest.find('?').unwrap_or(rest.len()));
    // RFC 9728 §3.1: a terminating slash right after the host is removed.
    let path = if path == "/" { "" } else { path };
    (origin, path, query)
}

/// The request path the metadata for `resource` is served at: the well-known prefix followed
/// by the resource's path (`/.well-known/oauth-protected-resource/v1/mcp` for
/// `https://host/v1/mcp`). [`resource_metadata_url`] names the same path, so a challenge
/// always points at something [`crate::handler`] serves.
pub fn resource_metadata_path(resource: &str) -> String {
    let (_, path, _) = split_resource(resource);
    format!("{WELL_KNOWN_PRM}{path}")
}

/// The metadata URL for a resource URI: `https://host/.well-known/oauth-protected-resource/mcp`
/// for `https://host/mcp` (the path-suffixed form clients try first; a query is kept after
/// it, as RFC 9728 §3.1 says).
pub fn resource_metadata_url(resource: &str) -> String {
    let (origin, _, query) = split_resource(resource);
    format!("{origin}{}{query}", resource_metadata_path(resource))
}

/// The `WWW-Authenticate` value for a refusal.
pub fn challenge(settings: &AuthSettings, failure: &AuthFailure) -> String {
    let meta = resource_metadata_url(&settings.resource);
    let advertised = settings.scopes_to_advertise();
    let scope = if advertised.is_empty() {
        String::new()
    } else {
        format!(", scope=\"{}\"", advertised.join(" "))
    };
    match failure {
        // `Unavailable` is answered with `503` and no challenge; should a caller ask anyway,
        // it is the plain one (the token was not found wrong).
        AuthFailure::Missing | AuthFailure::Unavailable { .. } => {
            format!("Bearer resource_metadata=\"{meta}\"{scope}")
        }
        AuthFailure::Invalid(_) => {
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{meta}\"{scope}")
        }
        AuthFailure::InsufficientScope => {
            format!("Bearer error=\"insufficient_scope\", resource_metadata=\"{meta}\"{scope}")
        }
    }
}

#[cfg(test)]
mod tests;
