//! The OAuth 2.1 resource server: every request's bearer JWT is checked here — signature
//! against the issuer's JWKS (cached, refreshed on an unknown key id), issuer, audience (this
//! server's resource URI), expiry and not-before with a small clock skew — and the tenant is
//! read from a configurable claim of the verified token.
//!
//! The verdicts map to the wire in [`crate::handler`]: missing or bad token → `401` with
//! `WWW-Authenticate: Bearer resource_metadata="…"`; missing scope → `403`
//! `error="insufficient_scope"`; the issuer's keys unreachable while no cached key fits the
//! token → `503` with `Retry-After` (not the client's fault, so no `invalid_token`). Tokens are
//! never logged.
//!
//! # The key cache under abuse
//!
//! No lock is ever held across I/O: the keys are a snapshot behind a short-lived mutex, and a
//! refresh runs as its own task. So a token whose `kid` is cached is checked at once, even
//! while a refresh is slow or hanging. Refreshes are single-flight: every request that needs
//! one while it runs waits for that same fetch. When to fetch:
//! - an unknown `kid` while the last fetch succeeded: at most once per [`REFRESH_COOLDOWN`]
//!   (30 s), so random key ids cannot turn into a request flood at the issuer;
//! - no keys yet, or the last fetch failed: after a backoff of 1 s doubling up to the
//!   cooldown, so a recovered issuer is seen within a second or two of a short outage;
//! - a failed fetch keeps the keys we had: tokens signed with them keep working.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
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
/// How often an unknown `kid` may trigger a JWKS refetch while the last fetch succeeded.
pub const REFRESH_COOLDOWN: Duration = Duration::from_secs(30);
/// The first wait after a failed fetch; it doubles with each further failure, up to
/// [`REFRESH_COOLDOWN`].
pub const FAILURE_BACKOFF: Duration = Duration::from_secs(1);
/// How long one JWKS fetch may take (one attempt per refresh: the backoff is the retry).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest JWKS document read. Real ones are a few KB (Cognito, Auth0, Entra: 1–10 keys); a
/// misconfigured or hostile endpoint must not make every instance buffer an endless body.
const MAX_JWKS_BYTES: usize = 256 * 1024;

/// Signing keys by `kid`.
type Keys = HashMap<String, (DecodingKey, Algorithm)>;

/// When refreshes may run (the constants above; tests shorten them).
#[derive(Debug, Clone, Copy)]
struct RefreshTiming {
    cooldown: Duration,
    backoff: Duration,
}

impl RefreshTiming {
    /// The wait after the `failures`-th failed fetch in a row: `backoff` doubling, capped at
    /// the cooldown.
    fn after_failures(&self, failures: u32) -> Duration {
        let doubled = self
            .backoff
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16));
        doubled.min(self.cooldown.max(self.backoff))
    }
}

struct KeyState {
    /// The last keys fetched successfully (a failed fetch never clears them).
    keys: Keys,
    /// Failed fetches in a row since the last success (or since start).
    failures: u32,
    /// Earliest time a fetch may start (`None`: now).
    next_fetch: Option<Instant>,
    /// The fetch under way: turns `true` once it has updated this state.
    in_flight: Option<watch::Receiver<bool>>,
}

impl KeyState {
    /// Why a token whose `kid` is not among the keys is refused at `now`.
    fn miss(&self, now: Instant) -> AuthFailure {
        if self.failures == 0 && !self.keys.is_empty() {
            return AuthFailure::Invalid("unknown key id");
        }
        let wait = self
            .next_fetch
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        AuthFailure::Unavailable {
            retry_after_secs: secs.max(1),
        }
    }
}

/// The issuer's keys, shared by every request and by the refresh task.
struct KeyCache {
    source: JwksSource,
    http: reqwest::Client,
    timing: RefreshTiming,
    state: Mutex<KeyState>,
}

/// One refresh, run as its own task so that a caller going away cannot cancel it half-way:
/// whatever happens (even a panic or a runtime shutdown), dropping it records the outcome and
/// wakes the waiters.
struct Flight {
    cache: Arc<KeyCache>,
    result: Option<Result<Keys, String>>,
    done: watch::Sender<bool>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err("the refresh was cancelled".into()));
        self.cache.record(result);
        let _ = self.done.send(true);
    }
}

/// Verifies bearer tokens; built once per process, shared by every request.
pub struct Authenticator {
    settings: AuthSettings,
    cache: Arc<KeyCache>,
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
        Self::with_timing(
            settings,
            RefreshTiming {
                cooldown: REFRESH_COOLDOWN,
                backoff: FAILURE_BACKOFF,
            },
        )
    }

    fn with_timing(settings: AuthSettings, timing: RefreshTiming) -> Self {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .unwrap_or_default();
        let cache = Arc::new(KeyCache {
            source: settings.jwks.clone(),
            http,
            timing,
            state: Mutex::new(KeyState {
                keys: HashMap::new(),
                failures: 0,
                next_fetch: None,
                in_flight: None,
            }),
        });
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

    /// The key for `kid`. A cached key is answered from the snapshot at once; otherwise the
    /// JWKS is refetched when the schedule allows (see the module docs), joining a refresh
    /// already under way rather than starting another, so a rotated key is picked up without a
    /// restart.
    async fn key(&self, kid: &str) -> Result<(DecodingKey, Algorithm), AuthFailure> {
        let mut done = {
            let mut st = self.cache.lock();
            if let Some(k) = st.keys.get(kid) {
                return Ok(k.clone());
            }
            match &st.in_flight {
                Some(rx) => rx.clone(),
                None => {
                    let now = Instant::now();
                    if st.next_fetch.is_some_and(|at| now < at) {
                        return Err(st.miss(now));
                    }
                    let (tx, rx) = watch::channel(false);
                    st.in_flight = Some(rx.clone());
                    let flight = Flight {
                        cache: self.cache.clone(),
                        result: None,
                        done: tx,
                    };
                    tokio::spawn(async move {
                        let mut flight = flight;
                        flight.result = Some(flight.cache.fetch().await);
                    });
                    rx
                }
            }
        };
        // An error means the flight is gone, which also means it has recorded its outcome.
        let _ = done.wait_for(|finished| *finished).await;
        let st = self.cache.lock();
        match st.keys.get(kid) {
            Some(k) => Ok(k.clone()),
            None => Err(st.miss(Instant::now())),
        }
    }
}

impl KeyCache {
    /// The state; never held across an `.await`.
    fn lock(&self) -> MutexGuard<'_, KeyState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a fetch's outcome and schedules the next one.
    fn record(&self, result: Result<Keys, String>) {
        let mut st = self.lock();
        let now = Instant::now();
        match result {
            Ok(keys) => {
                st.keys = keys;
                st.failures = 0;
                st.next_fetch = Some(now + self.timing.cooldown);
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                let wait = self.timing.after_failures(st.failures);
                st.next_fetch = Some(now + wait);
                tracing::warn!(
                    error = %e,
                    failures = st.failures,
                    kept_keys = st.keys.len(),
                    retry_in_ms = wait.as_millis() as u64,
                    "fetching the JWKS failed"
                );
            }
        }
        st.in_flight = None;
    }

    async fn fetch(&self) -> Result<Keys, String> {
        let text = match &self.source {
            JwksSource::File(p) => std::fs::read_to_string(p).map_err(|e| e.to_string())?,
            JwksSource::Url(u) => {
                let resp = self
                    .http
                    .get(u)
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .map_err(|e| e.to_string())?;
                read_capped(resp, MAX_JWKS_BYTES).await?
            }
        };
        parse_jwks(&text)
    }
}

/// The body of `resp` as text, refused past `max` bytes (announced or found while reading).
async fn read_capped(mut resp: reqwest::Response, max: usize) -> Result<String, String> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(format!("JWKS larger than {max} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(format!("JWKS larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "JWKS is not UTF-8".to_owned())
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
    let meta = resource_metadata_url(&settings.audience);
    let scope = if settings.required_scopes.is_empty() {
        String::new()
    } else {
        format!(", scope=\"{}\"", settings.required_scopes.join(" "))
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
        assert_eq!(
            resource_metadata_url("https://api.example.com/v1/mcp"),
            "https://api.example.com/.well-known/oauth-protected-resource/v1/mcp"
        );
        assert_eq!(
            resource_metadata_url("https://api.example.com/"),
            "https://api.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            resource_metadata_url("https://api.example.com"),
            "https://api.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            resource_metadata_url("https://api.example.com/mcp?x=1#f"),
            "https://api.example.com/.well-known/oauth-protected-resource/mcp?x=1"
        );
    }

    #[test]
    fn the_served_path_is_the_challenge_path() {
        for resource in [
            "https://api.example.com/v1/mcp",
            "http://mcp.test/mcp",
            "https://api.example.com",
            "https://api.example.com/a/b/?q",
        ] {
            let url = resource_metadata_url(resource);
            let path = resource_metadata_path(resource);
            let after_origin = &url[url.find("/.well-known").unwrap()..];
            assert_eq!(after_origin.split('?').next().unwrap(), path, "{resource}");
        }
        assert_eq!(
            resource_metadata_path("https://api.example.com/v1/mcp"),
            "/.well-known/oauth-protected-resource/v1/mcp"
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
        use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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

        /// A JWKS endpoint on 127.0.0.1 (the fixtures' `jwks.json`) that counts its requests
        /// and can be made slow or failing.
        struct FakeIssuer {
            jwks_url: String,
            hits: Arc<AtomicUsize>,
            delay_ms: Arc<AtomicU64>,
            fail_next: Arc<AtomicUsize>,
            /// Every request fails (`503`) until then.
            down_until: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
        }

        impl FakeIssuer {
            async fn start() -> Self {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let jwks_url = format!("http://{}/jwks", listener.local_addr().unwrap());
                let body = std::fs::read_to_string(format!("{FIXTURES}/jwks.json")).unwrap();
                let issuer = Self {
                    jwks_url,
                    hits: Arc::default(),
                    delay_ms: Arc::default(),
                    fail_next: Arc::default(),
                    down_until: Arc::default(),
                };
                let (hits, delay, fail, down) = (
                    issuer.hits.clone(),
                    issuer.delay_ms.clone(),
                    issuer.fail_next.clone(),
                    issuer.down_until.clone(),
                );
                tokio::spawn(async move {
                    while let Ok((mut conn, _)) = listener.accept().await {
                        let (hits, delay, fail, down, body) = (
                            hits.clone(),
                            delay.clone(),
                            fail.clone(),
                            down.clone(),
                            body.clone(),
                        );
                        tokio::spawn(async move {
                            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                            let mut head = Vec::new();
                            let mut buf = [0u8; 1024];
                            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                                match conn.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => head.extend_from_slice(&buf[..n]),
                                }
                            }
                            hits.fetch_add(1, Ordering::SeqCst);
                            let ms = delay.load(Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            let down = down
                                .lock()
                                .unwrap()
                                .is_some_and(|t| std::time::Instant::now() < t);
                            let failing = down
                                || fail
                                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                        n.checked_sub(1)
                                    })
                                    .is_ok();
                            let (status, body) = if failing {
                                ("503 Service Unavailable", "down")
                            } else {
                                ("200 OK", body.as_str())
                            };
                            let reply = format!(
                                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = conn.write_all(reply.as_bytes()).await;
                        });
                    }
                });
                issuer
            }

            fn settings(&self) -> AuthSettings {
                AuthSettings {
                    jwks: JwksSource::Url(self.jwks_url.clone()),
                    ..settings(&[])
                }
            }

            fn hits(&self) -> usize {
                self.hits.load(Ordering::SeqCst)
            }
        }

        fn valid() -> String {
            sign(claims(json!({})), "test-signing-key.pem", "test-key-1")
        }

        fn with_kid(kid: &str) -> String {
            sign(claims(json!({})), "test-signing-key.pem", kid)
        }

        /// Refreshes allowed at any time (no cooldown), so an unknown kid always refetches.
        fn eager(s: AuthSettings) -> Authenticator {
            Authenticator::with_timing(
                s,
                RefreshTiming {
                    cooldown: Duration::ZERO,
                    backoff: FAILURE_BACKOFF,
                },
            )
        }

        /// An endless or huge JWKS is cut off at MAX_JWKS_BYTES, announced or not: the
        /// authenticator answers "keys unavailable" (503) instead of buffering it.
        #[tokio::test]
        async fn an_oversized_jwks_is_refused_not_buffered() {
            for announced in [true, false] {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let url = format!("http://{}/jwks", listener.local_addr().unwrap());
                let sent = Arc::new(AtomicUsize::new(0));
                let counter = sent.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                    let (mut conn, _) = listener.accept().await.unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let head = if announced {
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 64 << 20)
                    } else {
                        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_owned()
                    };
                    if conn.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    // An endless document: a JSON prefix, then blanks for ever (64 MiB).
                    let chunk = vec![b' '; 64 * 1024];
                    for _ in 0..1024 {
                        let piece = if announced {
                            chunk.clone()
                        } else {
                            [
                                format!("{:x}\r\n", chunk.len()).into_bytes(),
                                chunk.clone(),
                                b"\r\n".to_vec(),
                            ]
                            .concat()
                        };
                        if conn.write_all(&piece).await.is_err() {
                            return;
                        }
                        counter.fetch_add(chunk.len(), Ordering::SeqCst);
                    }
                });
                let a = Authenticator::new(AuthSettings {
                    jwks: JwksSource::Url(url),
                    ..settings(&[])
                });
                let got = check(&a, &valid()).await;
                assert!(
                    matches!(got, Err(AuthFailure::Unavailable { .. })),
                    "announced={announced}: {got:?}"
                );
                assert!(
                    sent.load(Ordering::SeqCst) < 8 << 20,
                    "announced={announced}: read {} bytes",
                    sent.load(Ordering::SeqCst)
                );
            }
        }

        #[tokio::test]
        async fn a_cached_key_is_answered_while_a_refresh_hangs() {
            let issuer = FakeIssuer::start().await;
            let a = Arc::new(eager(issuer.settings()));
            assert!(check(&a, &valid()).await.is_ok());
            assert_eq!(issuer.hits(), 1);
            issuer.delay_ms.store(3000, Ordering::SeqCst);
            let random = {
                let a = a.clone();
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    (check(&a, &with_kid("random-kid")).await, started.elapsed())
                })
            };
            let waited = std::time::Instant::now();
            while issuer.hits() < 2 {
                assert!(
                    waited.elapsed() < Duration::from_secs(2),
                    "no refresh started"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The refresh is now stuck at the issuer for 3 s.
            let started = std::time::Instant::now();
            assert!(check(&a, &valid()).await.is_ok());
            let took = started.elapsed();
            assert!(
                took < Duration::from_secs(1),
                "a cached key waited {took:?} for an unrelated refresh"
            );
            let (verdict, took) = random.await.unwrap();
            assert_eq!(verdict, Err(AuthFailure::Invalid("unknown key id")));
            assert!(
                took >= Duration::from_millis(2500),
                "the refresh was slow: {took:?}"
            );
        }

        #[tokio::test]
        async fn an_outage_is_unavailable_and_recovery_is_seen_within_two_seconds() {
            let issuer = FakeIssuer::start().await;
            // Down for 2 s: longer than one fetch and its first retry, far short of a cooldown.
            let recovery = std::time::Instant::now() + Duration::from_millis(2000);
            *issuer.down_until.lock().unwrap() = Some(recovery);
            let a = Authenticator::new(issuer.settings());
            assert_eq!(
                check(&a, &valid()).await,
                Err(AuthFailure::Unavailable {
                    retry_after_secs: 1
                })
            );
            // Within the backoff nobody refetches.
            assert!(matches!(
                check(&a, &valid()).await,
                Err(AuthFailure::Unavailable { .. })
            ));
            assert_eq!(issuer.hits(), 1);
            loop {
                match check(&a, &valid()).await {
                    Ok(_) => break,
                    Err(AuthFailure::Unavailable { .. }) => {}
                    Err(other) => panic!("during the outage: {other:?}"),
                }
                assert!(
                    std::time::Instant::now() < recovery + Duration::from_secs(2),
                    "recovery not seen within 2 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let late = std::time::Instant::now().saturating_duration_since(recovery);
            println!("recovery seen {late:?} after the issuer came back");
            // Fetches at about 0 s (down), 1 s (down) and 3 s (back): backoff 1 s, then 2 s.
            assert_eq!(issuer.hits(), 3);
        }

        #[tokio::test]
        async fn concurrent_unknown_kids_share_one_fetch() {
            let issuer = FakeIssuer::start().await;
            issuer.delay_ms.store(300, Ordering::SeqCst);
            let a = Arc::new(Authenticator::new(issuer.settings()));
            let calls: Vec<_> = (0..20)
                .map(|i| {
                    let a = a.clone();
                    tokio::spawn(async move { check(&a, &with_kid(&format!("nope-{i}"))).await })
                })
                .collect();
            for c in calls {
                assert_eq!(
                    c.await.unwrap(),
                    Err(AuthFailure::Invalid("unknown key id"))
                );
            }
            assert_eq!(issuer.hits(), 1, "one fetch for all of them");
            // Within the cooldown, more unknown kids fetch nothing; cached keys just work.
            assert_eq!(
                check(&a, &with_kid("nope-again")).await,
                Err(AuthFailure::Invalid("unknown key id"))
            );
            assert!(check(&a, &valid()).await.is_ok());
            assert_eq!(issuer.hits(), 1);
        }

        #[tokio::test]
        async fn a_failed_refresh_keeps_the_keys_we_had() {
            let issuer = FakeIssuer::start().await;
            let a = eager(issuer.settings());
            assert!(check(&a, &valid()).await.is_ok());
            issuer.fail_next.store(100, Ordering::SeqCst);
            assert!(matches!(
                check(&a, &with_kid("rotated-in")).await,
                Err(AuthFailure::Unavailable { .. })
            ));
            assert_eq!(issuer.hits(), 2);
            assert!(check(&a, &valid()).await.is_ok(), "the old keys still work");
        }

        #[test]
        fn failures_back_off_from_one_second_to_the_cooldown() {
            let t = RefreshTiming {
                cooldown: REFRESH_COOLDOWN,
                backoff: FAILURE_BACKOFF,
            };
            let secs: Vec<u64> = (1..=7).map(|n| t.after_failures(n).as_secs()).collect();
            assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
            assert_eq!(t.after_failures(u32::MAX), REFRESH_COOLDOWN);
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
