//! The OAuth 2.1 resource server: every request's bearer JWT is checked here — signature
//! against the issuer's JWKS (cached, refreshed on an unknown key id), issuer, audience (this
//! server's resource URI), expiry and not-before with a small clock skew — and the tenant is
//! read from a configurable claim of the verified token.
//!
//! The verdicts map to the wire in [`crate::handler`]: missing or bad token → `401` with
//! `WWW-Authenticate: Bearer resource_metadata="…"`; missing scope → `403`
//! `error="insufficient_scope"`. Tokens are never logged.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value, json};
use tokio::sync::RwLock;
use tokio::time::Instant;

/// Where the issuer's signing keys come from.
#[derive(Debug, Clone)]
pub enum JwksSource {
    /// A JWKS document on disk (tests, air-gapped setups).
    File(PathBuf),
    /// The issuer's `jwks_uri`.
    Url(String),
}

/// Resource-server settings.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Expected `iss`.
    pub issuer: String,
    /// Expected `aud`: this server's canonical resource URI (e.g. `https://api.example.com/mcp`).
    pub audience: String,
    /// Signing keys.
    pub jwks: JwksSource,
    /// Claim that names the tenant (`sub`, or an organisation claim).
    pub tenant_claim: String,
    /// Scopes every request must carry (empty: none).
    pub required_scopes: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
}

/// Who is calling, once the token checks out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant: every task key starts with it.
    pub tenant: String,
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
}

/// Most characters a tenant id may have.
const MAX_TENANT_LEN: usize = 256;
/// How often an unknown `kid` may trigger a JWKS refetch.
const REFRESH_COOLDOWN: Duration = Duration::from_secs(30);
/// Fetch attempts per refresh.
const FETCH_ATTEMPTS: u32 = 3;

struct KeyCache {
    keys: HashMap<String, (DecodingKey, Algorithm)>,
    fetched_at: Option<Instant>,
}

/// Verifies bearer tokens; built once per process, shared by every request.
pub struct Authenticator {
    settings: AuthSettings,
    cache: RwLock<KeyCache>,
    http: reqwest::Client,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("issuer", &self.settings.issuer)
            .field("audience", &self.settings.audience)
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
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        Self {
            settings,
            cache: RwLock::new(KeyCache {
                keys: HashMap::new(),
                fetched_at: None,
            }),
            http,
        }
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
        let (key, alg) = self.key(&kid).await?;
        if header.alg != alg {
            return Err(AuthFailure::Invalid("algorithm does not match the key"));
        }
        let mut v = Validation::new(alg);
        v.set_issuer(&[&self.settings.issuer]);
        v.set_audience(&[&self.settings.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v.leeway = self.settings.leeway.as_secs();
        v.validate_nbf = true;
        let claims = decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                AuthFailure::Invalid(match e.kind() {
                    K::ExpiredSignature => "token expired",
                    K::ImmatureSignature => "token not yet valid",
                    K::InvalidAudience => "wrong audience",
                    K::InvalidIssuer => "wrong issuer",
                    K::InvalidSignature => "bad signature",
                    K::MissingRequiredClaim(_) => "missing claim",
                    _ => "token rejected",
                })
            })?
            .claims;
        let tenant = match claims.get(&self.settings.tenant_claim) {
            Some(Value::String(t)) if valid_tenant(t) => t.clone(),
            _ => return Err(AuthFailure::Invalid("no usable tenant claim")),
        };
        if !self.settings.required_scopes.is_empty() {
            let granted = scopes(&claims);
            if !self
                .settings
                .required_scopes
                .iter()
                .all(|s| granted.iter().any(|g| g == s))
            {
                return Err(AuthFailure::InsufficientScope);
            }
        }
        Ok(Principal { tenant })
    }

    /// The key for `kid`, refetching the JWKS once (rate limited) when it is unknown, so a
    /// rotated key is picked up without a restart.
    async fn key(&self, kid: &str) -> Result<(DecodingKey, Algorithm), AuthFailure> {
        {
            let cache = self.cache.read().await;
            if let Some(k) = cache.keys.get(kid) {
                return Ok(k.clone());
            }
            if cache
                .fetched_at
                .is_some_and(|at| at.elapsed() < REFRESH_COOLDOWN)
            {
                return Err(AuthFailure::Invalid("unknown key id"));
            }
        }
        let mut cache = self.cache.write().await;
        // Another request may have refreshed while we waited for the lock.
        if let Some(k) = cache.keys.get(kid) {
            return Ok(k.clone());
        }
        if cache
            .fetched_at
            .is_some_and(|at| at.elapsed() < REFRESH_COOLDOWN)
        {
            return Err(AuthFailure::Invalid("unknown key id"));
        }
        cache.fetched_at = Some(Instant::now());
        match self.fetch().await {
            Ok(keys) => cache.keys = keys,
            Err(e) => {
                tracing::warn!(error = %e, "fetching the JWKS failed");
                return Err(AuthFailure::Invalid("signing keys unavailable"));
            }
        }
        cache
            .keys
            .get(kid)
            .cloned()
            .ok_or(AuthFailure::Invalid("unknown key id"))
    }

    async fn fetch(&self) -> Result<HashMap<String, (DecodingKey, Algorithm)>, String> {
        let text = match &self.settings.jwks {
            JwksSource::File(p) => std::fs::read_to_string(p).map_err(|e| e.to_string())?,
            JwksSource::Url(u) => {
                let mut last = String::new();
                let mut body = None;
                for attempt in 0..FETCH_ATTEMPTS {
                    if attempt > 0 {
                        tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                    }
                    match self
                        .http
                        .get(u)
                        .send()
                        .await
                        .and_then(|r| r.error_for_status())
                    {
                        Ok(r) => match r.text().await {
                            Ok(t) => {
                                body = Some(t);
                                break;
                            }
                            Err(e) => last = e.to_string(),
                        },
                        Err(e) => last = e.to_string(),
                    }
                }
                body.ok_or(last)?
            }
        };
        parse_jwks(&text)
    }
}

/// The usable signing keys of a JWKS document, by `kid` (keys without a `kid` or of an
/// unsupported type are skipped).
pub fn parse_jwks(text: &str) -> Result<HashMap<String, (DecodingKey, Algorithm)>, String> {
    let set: JwkSet = serde_json::from_str(text).map_err(|e| format!("bad JWKS: {e}"))?;
    let mut keys = HashMap::new();
    for jwk in &set.keys {
        let Some(kid) = jwk.common.key_id.clone() else {
            continue;
        };
        let alg = match jwk.common.key_algorithm.map(|a| a.to_string()) {
            Some(a) => match a.parse::<Algorithm>() {
                Ok(alg) => alg,
                Err(_) => continue,
            },
            None => match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
                _ => continue,
            },
        };
        if let Ok(key) = DecodingKey::from_jwk(jwk) {
            keys.insert(kid, (key, alg));
        }
    }
    if keys.is_empty() {
        return Err("JWKS has no usable signing key".into());
    }
    Ok(keys)
}

fn valid_tenant(t: &str) -> bool {
    !t.is_empty() && t.len() <= MAX_TENANT_LEN && !t.chars().any(char::is_control)
}

/// Granted scopes: OAuth's space-separated `scope`, or an `scp` array.
fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) => s.split_whitespace().map(str::to_owned).collect(),
        (_, Some(Value::Array(a))) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// The Protected Resource Metadata document (RFC 9728).
pub fn resource_metadata(settings: &AuthSettings) -> Value {
    let mut doc = json!({
        "resource": settings.audience,
        "authorization_servers": [settings.issuer],
        "bearer_methods_supported": ["header"],
    });
    if !settings.required_scopes.is_empty() {
        doc["scopes_supported"] = json!(settings.required_scopes);
    }
    doc
}

/// The metadata URL for a resource URI: `https://host/.well-known/oauth-protected-resource/mcp`
/// for `https://host/mcp` (the path-suffixed form clients try first).
pub fn resource_metadata_url(resource: &str) -> String {
    let (origin, path) = match resource.split_once("://") {
        Some((scheme, rest)) => match rest.find('/') {
            Some(i) => (format!("{scheme}://{}", &rest[..i]), &rest[i..]),
            None => (resource.to_owned(), ""),
        },
        None => (String::new(), resource),
    };
    format!("{origin}/.well-known/oauth-protected-resource{path}")
}

/// The `WWW-Authenticate` value for a refusal.
pub fn challenge(settings: &AuthSettings, failure: &AuthFailure) -> String {
    let meta = resource_metadata_url(&settings.audience);
    let scope = if settings.required_scopes.is_empty() {
        String::new()
    } else {
        format!(", scope=\"{}\"", settings.required_scopes.join(" "))
    };
    match failure {
        AuthFailure::Missing => format!("Bearer resource_metadata=\"{meta}\"{scope}"),
        AuthFailure::Invalid(_) => {
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{meta}\"{scope}")
        }
        AuthFailure::InsufficientScope => {
            format!("Bearer error=\"insufficient_scope\", resource_metadata=\"{meta}\"{scope}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_case_insensitively() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn metadata_url_is_path_suffixed() {
        assert_eq!(
            resource_metadata_url("https://api.example.com/mcp"),
            "https://api.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            resource_metadata_url("http://127.0.0.1:8787/mcp"),
            "http://127.0.0.1:8787/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let a = json!({"scope": "tasks:read tasks:write"});
        assert_eq!(
            scopes(a.as_object().unwrap()),
            ["tasks:read", "tasks:write"]
        );
        let b = json!({"scp": ["x"]});
        assert_eq!(scopes(b.as_object().unwrap()), ["x"]);
    }

    #[test]
    fn a_jwks_without_usable_keys_is_refused() {
        assert!(parse_jwks(r#"{"keys": []}"#).is_err());
        assert!(parse_jwks("nope").is_err());
    }

    mod tokens {
        use super::*;
        use jsonwebtoken::{EncodingKey, Header, encode};

        const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/auth");

        fn settings(scopes: &[&str]) -> AuthSettings {
            AuthSettings {
                issuer: "https://issuer.test".into(),
                audience: "http://127.0.0.1:8787/mcp".into(),
                jwks: JwksSource::File(format!("{FIXTURES}/jwks.json").into()),
                tenant_claim: "sub".into(),
                required_scopes: scopes.iter().map(|s| s.to_string()).collect(),
                leeway: Duration::from_secs(30),
            }
        }

        fn sign(claims: Value, key_file: &str, kid: &str) -> String {
            let pem = std::fs::read(format!("{FIXTURES}/{key_file}")).unwrap();
            let mut h = Header::new(Algorithm::EdDSA);
            h.kid = Some(kid.into());
            encode(&h, &claims, &EncodingKey::from_ed_pem(&pem).unwrap()).unwrap()
        }

        fn claims(extra: Value) -> Value {
            let now = crate::clock::now_ms() / 1000;
            let mut c = json!({"iss": "https://issuer.test", "aud": "http://127.0.0.1:8787/mcp",
                "sub": "tenant-a", "exp": now + 600, "iat": now});
            for (k, v) in extra.as_object().unwrap() {
                c[k] = v.clone();
            }
            c
        }

        async fn check(a: &Authenticator, token: &str) -> Result<Principal, AuthFailure> {
            a.authenticate(Some(&format!("Bearer {token}"))).await
        }

        #[tokio::test]
        async fn a_valid_token_names_its_tenant() {
            let a = Authenticator::new(settings(&[]));
            let t = sign(claims(json!({})), "test-signing-key.pem", "test-key-1");
            assert_eq!(
                check(&a, &t).await,
                Ok(Principal {
                    tenant: "tenant-a".into()
                })
            );
        }

        #[tokio::test]
        async fn every_kind_of_bad_token_is_refused() {
            let a = Authenticator::new(settings(&[]));
            let now = crate::clock::now_ms() / 1000;
            assert_eq!(a.authenticate(None).await, Err(AuthFailure::Missing));
            let cases = [
                (
                    claims(json!({"exp": now - 600})),
                    "test-signing-key.pem",
                    "test-key-1",
                    "token expired",
                ),
                (
                    claims(json!({"aud": "https://other/mcp"})),
                    "test-signing-key.pem",
                    "test-key-1",
                    "wrong audience",
                ),
                (
                    claims(json!({"iss": "https://evil.test"})),
                    "test-signing-key.pem",
                    "test-key-1",
                    "wrong issuer",
                ),
                (
                    claims(json!({"nbf": now + 600})),
                    "test-signing-key.pem",
                    "test-key-1",
                    "token not yet valid",
                ),
                (
                    claims(json!({})),
                    "other-signing-key.pem",
                    "test-key-1",
                    "bad signature",
                ),
                (
                    claims(json!({"sub": 5})),
                    "test-signing-key.pem",
                    "test-key-1",
                    "no usable tenant claim",
                ),
            ];
            for (c, key, kid, why) in cases {
                let t = sign(c, key, kid);
                assert_eq!(check(&a, &t).await, Err(AuthFailure::Invalid(why)));
            }
            let t = sign(claims(json!({})), "test-signing-key.pem", "rotated-away");
            assert_eq!(
                check(&a, &t).await,
                Err(AuthFailure::Invalid("unknown key id"))
            );
            assert_eq!(
                check(&a, "not.a.jwt").await,
                Err(AuthFailure::Invalid("malformed token"))
            );
        }

        #[tokio::test]
        async fn a_missing_scope_is_insufficient_scope() {
            let a = Authenticator::new(settings(&["tasks"]));
            let t = sign(
                claims(json!({"scope": "other"})),
                "test-signing-key.pem",
                "test-key-1",
            );
            assert_eq!(check(&a, &t).await, Err(AuthFailure::InsufficientScope));
            let t = sign(
                claims(json!({"scope": "other tasks"})),
                "test-signing-key.pem",
                "test-key-1",
            );
            assert!(check(&a, &t).await.is_ok());
        }

        #[test]
        fn challenges_point_at_the_metadata() {
            let s = settings(&["tasks"]);
            assert_eq!(
                challenge(&s, &AuthFailure::Missing),
                "Bearer resource_metadata=\"http://127.0.0.1:8787/.well-known/oauth-protected-resource/mcp\", scope=\"tasks\""
            );
            assert!(
                challenge(&s, &AuthFailure::InsufficientScope)
                    .contains("error=\"insufficient_scope\"")
            );
            let doc = resource_metadata(&s);
            assert_eq!(doc["resource"], "http://127.0.0.1:8787/mcp");
            assert_eq!(doc["authorization_servers"], json!(["https://issuer.test"]));
        }
    }
}
