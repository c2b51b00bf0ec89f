//! The issuer's signing keys: fetched from its JWKS, cached by `kid`, refreshed when a token
//! names a key we do not have.
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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{AuthFailure, JwksSource};

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
pub(super) struct RefreshTiming {
    pub(super) cooldown: Duration,
    pub(super) backoff: Duration,
}

impl RefreshTiming {
    /// The wait after the `failures`-th failed fetch in a row: `backoff` doubling, capped at
    /// the cooldown.
    pub(super) fn after_failures(&self, failures: u32) -> Duration {
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
pub(super) struct KeyCache {
    source: JwksSource,
    /// Built at the first fetch from a URL, not at start-up: building it loads the system's
    /// root certificates (~2.4 ms of a cold start, measured by `tests/cold_start.rs`), which a
    /// cold instance answering `server/discover` or refusing a request without a token never
    /// needs; the first fetch pays it beside its own TLS handshake.
    http: std::sync::OnceLock<reqwest::Client>,
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

impl KeyCache {
    /// An empty cache over `source`; the first token that needs a key fetches them.
    pub(super) fn new(source: JwksSource, timing: RefreshTiming) -> Arc<Self> {
        Arc::new(Self {
            source,
            http: std::sync::OnceLock::new(),
            timing,
            state: Mutex::new(KeyState {
                keys: HashMap::new(),
                failures: 0,
                next_fetch: None,
                in_flight: None,
            }),
        })
    }

    /// The key for `kid`. A cached key is answered from the snapshot at once; otherwise the
    /// JWKS is refetched when the schedule allows (see the module docs), joining a refresh
    /// already under way rather than starting another, so a rotated key is picked up without a
    /// restart.
    pub(super) async fn key(
        self: &Arc<Self>,
        kid: &str,
    ) -> Result<(DecodingKey, Algorithm), AuthFailure> {
        let mut done = {
            let mut st = self.lock();
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
                        cache: self.clone(),
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
        let st = self.lock();
        match st.keys.get(kid) {
            Some(k) => Ok(k.clone()),
            None => Err(st.miss(Instant::now())),
        }
    }

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
                let http = self.http.get_or_init(|| {
                    reqwest::Client::builder()
                        .timeout(FETCH_TIMEOUT)
                        .build()
                        .unwrap_or_default()
                });
                let resp = http
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
