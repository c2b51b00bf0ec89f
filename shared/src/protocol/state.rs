//! Integrity-protected `requestState` for multi-round-trip requests (SEP-2322).
//!
//! The server keeps no state between rounds: everything a retried `tools/call` needs (the
//! job checkpoint, the answers so far, the keys still outstanding) travels in `requestState`,
//! sealed with HMAC-SHA256 under a server key and bound to the tenant, the tool and a digest of
//! the arguments, so a client can neither forge nor replay it against another call.
//! Format: `base64url(payload JSON) "." base64url(tag)`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Largest `requestState` accepted back from a client.
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// What a sealed state carries between rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundState {
    /// Tenant the state was issued to.
    pub tenant: String,
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

/// Seals and opens round states with one server key.
#[derive(Clone)]
pub struct StateSealer {
    key: [u8; 32],
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
        Self { key }
    }

    /// A sealer with a fresh random key (states do not survive a restart).
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        crate::clock::random_bytes(&mut key);
        Self { key }
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length.
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length")
    }

    /// Seals a state.
    pub fn seal(&self, state: &RoundState) -> String {
        let payload = serde_json::to_vec(state).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&payload);
        let tag = mac.finalize().into_bytes();
        format!("{}.{}", B64.encode(&payload), B64.encode(tag))
    }

    /// Opens a state; `None` if it was altered, forged or is not ours.
    pub fn open(&self, sealed: &str) -> Option<RoundState> {
        if sealed.len() > MAX_STATE_BYTES {
            return None;
        }
        let (payload, tag) = sealed.split_once('.')?;
        let payload = B64.decode(payload).ok()?;
        let tag = B64.decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&tag).ok()?;
        serde_json::from_slice(&payload).ok()
    }
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

    #[test]
    fn sealed_state_opens_unchanged() {
        let s = StateSealer::random();
        assert_eq!(s.open(&s.seal(&state())), Some(state()));
    }

    #[test]
    fn tampered_or_foreign_states_are_refused() {
        let s = StateSealer::random();
        let sealed = s.seal(&state());
        assert_eq!(s.open(&format!("{sealed}-TAMPERED")), None);
        assert_eq!(s.open(&sealed.replacen('e', "f", 1)), None);
        assert_eq!(StateSealer::random().open(&sealed), None);
        assert_eq!(s.open("garbage"), None);
    }
}
