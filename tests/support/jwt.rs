//! Bearer tokens for the black-box tests: the fixture issuer's keys, claims and server flags.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use super::{Server, data_dir};

/// The fixture keys and JWKS (`jwks.json`, EdDSA keys `test-signing-key.pem` as `test-key-1`
/// and `other-signing-key.pem`).
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/auth");
/// The audience (resource URI) of the test servers.
pub const AUDIENCE: &str = "http://mcp.test/mcp";
/// The issuer of the test tokens.
pub const ISSUER: &str = "https://issuer.test";

/// `serve` flags for `--auth jwt` with this audience and `--jwks-file` or `--jwks-url`.
pub fn args(audience: &str, jwks_flag: &str, jwks: &str) -> Vec<String> {
    [
        "--auth",
        "jwt",
        "--issuer",
        ISSUER,
        "--audience",
        audience,
        jwks_flag,
        jwks,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The fixture JWKS file.
pub fn jwks_file() -> String {
    format!("{FIXTURES}/jwks.json")
}

/// A server with `--auth jwt` over the fixture keys, plus `extra` flags.
pub fn start(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let dir = data_dir();
    let mut all = args(AUDIENCE, "--jwks-file", &jwks_file());
    all.extend(extra.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let s = Server::start(dir.path(), &all);
    (s, dir)
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Valid claims for `tenant`, ten minutes to live.
pub fn claims(tenant: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": tenant, "exp": now() + 600})
}

/// `claims` signed with a fixture key under `kid`.
pub fn sign(claims: &Value, key_file: &str, kid: &str) -> String {
    let pem = std::fs::read(format!("{FIXTURES}/{key_file}")).unwrap();
    let mut h = Header::new(Algorithm::EdDSA);
    h.kid = Some(kid.into());
    encode(&h, claims, &EncodingKey::from_ed_pem(&pem).unwrap()).unwrap()
}

/// A valid token of `tenant`.
pub fn token(tenant: &str) -> String {
    sign(&claims(tenant), "test-signing-key.pem", "test-key-1")
}
