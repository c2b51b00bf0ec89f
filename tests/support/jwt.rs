//! Bearer tokens for the black-box tests: the fixture issuer's keys, claims and server flags.

use std::time::Duration;

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

/// A JWKS endpoint on 127.0.0.1 serving the fixture keys (after `delay_ms`, 0 at first),
/// counting its requests in `hits`: a provider's `jwks_uri` for the tests.
pub struct Issuer {
    pub url: String,
    pub delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    pub hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Issuer {
    pub async fn start() -> Self {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        let body = std::fs::read_to_string(jwks_file()).unwrap();
        let issuer = Issuer {
            url,
            delay_ms: Default::default(),
            hits: Default::default(),
        };
        let (delay, hits) = (issuer.delay_ms.clone(), issuer.hits.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (delay, hits, body) = (delay.clone(), hits.clone(), body.clone());
                tokio::spawn(async move {
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
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        issuer
    }
}
