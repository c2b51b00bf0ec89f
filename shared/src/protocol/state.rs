//! Sealed `requestState` for multi-round-trip requests (SEP-2322).
//!
//! The server keeps no state between rounds: everything a retried `tools/call` needs (the
//! job checkpoint, the answers so far, the keys still outstanding) travels in `requestState`,
//! encrypted and authenticated under a server key (AES-256-GCM) and bound to the tenant, the
//! tool and a digest of the arguments, so a client can neither read, forge nor replay it
//! against another call. Format: `base64url(salt ‖ ciphertext ‖ tag)`, where the 16-byte
//! random `salt` picks a key of its own for this one state (HMAC-SHA256 of the salt under the
//! server key), so no key ever encrypts twice and the all-zero nonce is safe.
//!
//! The server key may be had lazily ([`StateSealer::lazy`]): the Lambda function reads it
//! from Secrets Manager the first time a request seals or opens a state, not at cold start.
//! Until it is had, sealing and opening answer [`KeyUnavailable`], and the next use tries again.

use std::sync::Arc;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use futures_util::future::BoxFuture;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::tenant::Tenant;

/// Largest `requestState` accepted back from a client.
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// Bytes of the random salt that starts a sealed state.
const SALT_LEN: usize = 16;
/// Bytes of the AES-GCM tag that ends it.
const TAG_LEN: usize = 16;
/// What a state's own key is derived with (the salt follows), and its additional data: a
/// state of another format or purpose never opens as this one.
const LABEL: &[u8] = b"mcp-tasks requestState v2";

/// What a sealed state carries between rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundState {
    /// Tenant the state was issued to.
    pub tenant: Tenant,
    /// Tool name.
    pub tool: String,
    /// SHA-256 of the serialized arguments.
    pub args: String,
    /// The job checkpoint.
    pub checkpoint: Value,
    /// Answers received in earlier rounds.
    pub answers: serde_json::Map<String, Value>,
    /// Keys asked in the last round and not yet answered.
    pub outstanding: Vec<String>,
    /// When the state was sealed (epoch ms), so old states can be refused.
    pub issued_at_ms: u64,
}

/// The server key could not be had (its source failed; it said why in the log). The request
/// that needed it fails; the next one tries again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the server's requestState key is unavailable; try again")]
pub struct KeyUnavailable;

/// Fetches the server key, for [`StateSealer::lazy`]: called at the first seal or open, and
/// again after a failure, never once it has answered.
pub type KeyFetch =
    Arc<dyn Fn() -> BoxFuture<'static, Result<[u8; 32], KeyUnavailable>> + Send + Sync>;

/// Seals and opens round states with one server key.
#[derive(Clone)]
pub struct StateSealer {
    key: Arc<tokio::sync::OnceCell<[u8; 32]>>,
    fetch: Option<KeyFetch>,
}

impl std::fmt::Debug for StateSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateSealer(..)")
    }
}

/// Digest of a tool's arguments, to bind a state to one call.
pub fn args_digest(arguments: &Value) -> String {
    let bytes = serde_json::to_vec(arguments).unwrap_or_default();
    B64.encode(Sha256::digest(&bytes))
}

impl StateSealer {
    /// A sealer with the given 32-byte key.
    pub fn new(key: [u8; 32]) -> Self {
        Self {
            key: Arc::new(tokio::sync::OnceCell::new_with(Some(key))),
            fetch: None,
        }
    }

    /// A sealer with a fresh random key (states do not survive a restart).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        crate::clock::random_bytes(&mut key);
        Self::new(key)
    }

    /// A sealer whose key `fetch` gives, at the first seal or open that needs it (concurrent
    /// ones wait for the same fetch); a failed fetch fails that use and is tried again at the
    /// next, a key had is kept.
    pub fn lazy(fetch: KeyFetch) -> Self {
        Self {
            key: Arc::new(tokio::sync::OnceCell::new()),
            fetch: Some(fetch),
        }
    }

    async fn key(&self) -> Result<&[u8; 32], KeyUnavailable> {
        self.key
            .get_or_try_init(|| async {
                match &self.fetch {
                    Some(fetch) => fetch().await,
                    None => Err(KeyUnavailable),
                }
            })
            .await
    }

    /// Seals a state.
    pub async fn seal(&self, state: &RoundState) -> Result<String, KeyUnavailable> {
        let key = self.key().await?;
        let mut salt = [0u8; SALT_LEN];
        crate::clock::random_bytes(&mut salt);
        let mut out = salt.to_vec();
        let mut sealed = serde_json::to_vec(state).unwrap_or_default();
        state_key(key, &salt)
            .seal_in_place_append_tag(nonce(), Aad::from(LABEL), &mut sealed)
            .map_err(|_| KeyUnavailable)?;
        out.extend_from_slice(&sealed);
        Ok(B64.encode(out))
    }

    /// Opens a state: `Ok(None)` if it was altered, forged or is not ours. What cannot be a
    /// sealed state at all is refused without asking for the key.
    pub async fn open(&self, sealed: &str) -> Result<Option<RoundState>, KeyUnavailable> {
        if sealed.len() > MAX_STATE_BYTES {
            return Ok(None);
        }
        let Some(mut bytes) = B64
            .decode(sealed)
            .ok()
            .filter(|b| b.len() > SALT_LEN + TAG_LEN)
        else {
            return Ok(None);
        };
        let key = self.key().await?;
        let (salt, rest) = bytes.split_at_mut(SALT_LEN);
        let Ok(plain) = state_key(key, salt).open_in_place(nonce(), Aad::from(LABEL), rest) else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(plain).ok())
    }
}

/// The AES-256-GCM key of the one state `salt` starts: HMAC-SHA256 of the label and the salt
/// under the server key.
fn state_key(key: &[u8; 32], salt: &[u8]) -> LessSafeKey {
    // HMAC accepts keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(LABEL);
    mac.update(salt);
    let derived = mac.finalize().into_bytes();
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &derived).expect("a 32-byte AES-256 key"))
}

/// Each state has a key of its own, used once: a fixed nonce never repeats under one key.
fn nonce() -> Nonce {
    Nonce::assume_unique_for_key([0u8; NONCE_LEN])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> RoundState {
        RoundState {
            tenant: "t".into(),
            tool: "x".into(),
            args: args_digest(&json!({})),
            checkpoint: json!({"round": 1}),
            answers: Default::default(),
            outstanding: vec!["step1".into()],
            issued_at_ms: 1,
        }
    }

    #[tokio::test]
    async fn sealed_state_opens_unchanged() {
        let s = StateSealer::random();
        let sealed = s.seal(&state()).await.unwrap();
        assert_eq!(s.open(&sealed).await, Ok(Some(state())));
        assert_ne!(
            sealed,
            s.seal(&state()).await.unwrap(),
            "a fresh salt each time"
        );
    }

    /// A client decoding the state it holds, every way it could, sees nothing of what it
    /// carries: not the checkpoint, not an answer, not the tenant.
    #[tokio::test]
    async fn a_sealed_state_shows_nothing_of_what_it_carries() {
        let mut carried = state();
        carried.checkpoint = json!({"upstream_token": "tok-SECRET-42"});
        carried
            .answers
            .insert("confirm".into(), json!("answer-SECRET-7"));
        carried.tenant = "tenant-SECRET-9".into();
        let sealed = StateSealer::random().seal(&carried).await.unwrap();
        let mut seen = vec![sealed.clone().into_bytes()];
        for part in sealed.split('.') {
            for engine in [
                base64::engine::general_purpose::URL_SAFE_NO_PAD,
                base64::engine::general_purpose::GeneralPurpose::new(
                    &base64::alphabet::URL_SAFE,
                    base64::engine::general_purpose::PAD,
                ),
            ] {
                seen.extend(engine.decode(part).ok());
            }
        }
        assert!(seen.len() >= 2, "the state decodes as base64url: {sealed}");
        for bytes in &seen {
            let text = String::from_utf8_lossy(bytes);
            for secret in [
                "SECRET",
                "upstream_token",
                "confirm",
                "checkpoint",
                "tenant",
            ] {
                assert!(!text.contains(secret), "{secret:?} readable in {text:?}");
            }
        }
    }

    #[tokio::test]
    async fn tampered_or_foreign_states_are_refused() {
        let s = StateSealer::random();
        let sealed = s.seal(&state()).await.unwrap();
        assert_eq!(s.open(&format!("{sealed}-TAMPERED")).await, Ok(None));
        // Every byte position matters: flip one in the salt, the ciphertext and the tag.
        let bytes = B64.decode(&sealed).unwrap();
        for at in [0, SALT_LEN + 1, bytes.len() - 1] {
            let mut b = bytes.clone();
            b[at] ^= 1;
            assert_eq!(s.open(&B64.encode(&b)).await, Ok(None), "byte {at} flipped");
        }
        assert_eq!(
            s.open(&B64.encode(&bytes[..bytes.len() - 1])).await,
            Ok(None)
        );
        assert_eq!(StateSealer::random().open(&sealed).await, Ok(None));
        assert_eq!(s.open("garbage").await, Ok(None));
        assert_eq!(s.open("").await, Ok(None));
    }

    /// A lazy key is fetched at the first use that needs it, once; a failed fetch fails that
    /// use only, and the next tries again. What cannot be a state is refused without a fetch.
    #[tokio::test]
    async fn a_lazy_key_is_fetched_at_first_need_kept_and_retried_after_a_failure() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let fetch: KeyFetch = {
            let calls = calls.clone();
            Arc::new(move || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    match n {
                        0 => Err(KeyUnavailable),
                        _ => Ok([7u8; 32]),
                    }
                })
            })
        };
        let s = StateSealer::lazy(fetch);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "nothing fetched when built"
        );
        assert_eq!(s.open("not-a-state").await, Ok(None));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "no fetch for what is no state"
        );
        assert_eq!(s.seal(&state()).await, Err(KeyUnavailable));
        let sealed = s.seal(&state()).await.expect("the retry fetches the key");
        assert_eq!(s.clone().open(&sealed).await, Ok(Some(state())));
        assert_eq!(calls.load(Ordering::SeqCst), 2, "kept once had");
        // The key fetched is the key given: a sealer built with it opens the state.
        assert_eq!(
            StateSealer::new([7u8; 32]).open(&sealed).await,
            Ok(Some(state()))
        );
    }
}
