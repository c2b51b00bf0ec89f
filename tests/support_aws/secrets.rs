//! [`SecretsStandIn`]: a stand-in Secrets Manager on loopback for the function binaries
//! (`AWS_ENDPOINT_URL_SECRETS_MANAGER`): it answers `GetSecretValue` with one secret, or with
//! one service error (which a test may change between requests, [`SecretsStandIn::answer_with`]),
//! after a delay when asked ([`SecretsStandIn::start_after`]: an in-region round trip), and
//! keeps every request it received.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

/// What the stand-in answers every request with.
#[derive(Clone)]
pub enum SecretAnswer {
    /// `GetSecretValue`'s answer: this `SecretString`.
    Value(String),
    /// A service error with this `__type` (e.g. `AccessDeniedException`) and message.
    Error(&'static str, &'static str),
}

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct SecretRequest {
    /// `X-Amz-Target` (`secretsmanager.GetSecretValue`).
    pub target: String,
    /// Whether it was SigV4-signed.
    pub signed: bool,
    /// The JSON body (`SecretId`, `VersionId`).
    pub body: serde_json::Value,
}

/// A stand-in Secrets Manager; stopped on drop.
pub struct SecretsStandIn {
    /// Its URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// What it received, in order.
    pub requests: Arc<Mutex<Vec<SecretRequest>>>,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

struct Shared {
    answer: Mutex<SecretAnswer>,
    delay: std::time::Duration,
    requests: Arc<Mutex<Vec<SecretRequest>>>,
}

async fn answer(State(s): State<Arc<Shared>>, headers: HeaderMap, body: String) -> Response {
    let header = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    s.requests.lock().unwrap().push(SecretRequest {
        target: header("x-amz-target"),
        signed: header("authorization").starts_with("AWS4-HMAC-SHA256 "),
        body: serde_json::from_str(&body).unwrap_or_default(),
    });
    tokio::time::sleep(s.delay).await;
    let json = [("content-type", "application/x-amz-json-1.1")];
    let answer = s.answer.lock().unwrap().clone();
    match &answer {
        SecretAnswer::Value(v) => (
            StatusCode::OK,
            json,
            serde_json::json!({
                "ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:stand-in",
                "Name": "stand-in",
                "SecretString": v,
                "VersionId": "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE",
                "VersionStages": ["AWSCURRENT"],
            })
            .to_string(),
        )
            .into_response(),
        SecretAnswer::Error(kind, message) => (
            StatusCode::BAD_REQUEST,
            json,
            serde_json::json!({"__type": kind, "message": message}).to_string(),
        )
            .into_response(),
    }
}

impl SecretsStandIn {
    /// Starts one answering every request with `answer`, at once.
    pub async fn start(answer: SecretAnswer) -> SecretsStandIn {
        Self::start_after(answer, std::time::Duration::ZERO).await
    }

    /// Starts one answering every request with `answer`, `delay` after it has read it.
    pub async fn start_after(answer: SecretAnswer, delay: std::time::Duration) -> SecretsStandIn {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared {
            answer: Mutex::new(answer),
            delay,
            requests: requests.clone(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(axum::routing::post(self::answer))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        SecretsStandIn {
            url,
            requests,
            shared,
            server,
        }
    }

    /// Answers the requests from now on with `answer`.
    pub fn answer_with(&self, answer: SecretAnswer) {
        *self.shared.answer.lock().unwrap() = answer;
    }
}

impl Drop for SecretsStandIn {
    fn drop(&mut self) {
        self.server.abort();
    }
}
