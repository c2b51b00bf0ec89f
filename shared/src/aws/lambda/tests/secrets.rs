//! The state key read from Secrets Manager (a stand-in on loopback), at its first need.

use super::*;

use crate::aws::testing::sdk_at;
use crate::protocol::state::{KeyUnavailable, RoundState, StateSealer};

/// A stand-in Secrets Manager that answers every request with `body` (status 200); returns
/// its URL and what it received.
async fn secrets_stand_in(
    body: &'static str,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    crate::aws::testing::answering(200, body).await
}

fn round() -> RoundState {
    RoundState {
        tenant: "t".into(),
        tool: "x".into(),
        args: String::new(),
        checkpoint: serde_json::json!({"step": 1}),
        answers: Default::default(),
        outstanding: vec!["k".into()],
        issued_at_ms: 1,
    }
}

/// The key read from the secret is the key the same text in `STATE_KEY` gives (a stack
/// upgraded from the environment variable keeps opening the `requestState`s it sealed); it is
/// read at the first seal, not when the sealer is built, and once. A secret too short is
/// refused at each use, and read again at the next.
#[tokio::test]
async fn a_state_key_is_read_at_first_need_once_and_is_the_key_the_same_text_gives() {
    let key = "0123456789abcdef0123456789abcdef-from-the-secret";
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", key));
    let from_env = StateSealer::new(env(Role::Mcp, &vars).unwrap().state_key.unwrap());

    let (url, seen) = secrets_stand_in(
        r#"{"ARN":"a","Name":"n","SecretString":"0123456789abcdef0123456789abcdef-from-the-secret"}"#,
    )
    .await;
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY_SECRET_ARN", SECRET_ARN));
    let c = env(Role::Mcp, &vars)
        .unwrap()
        .reading_secrets_with(&sdk_at(&url).await);
    let sealer = c.state_sealer();
    assert_eq!(seen.lock().unwrap().len(), 0, "nothing read before a need");
    let sealed = sealer.seal(&round()).await.unwrap();
    assert_eq!(from_env.open(&sealed).await, Ok(Some(round())));
    assert_eq!(sealer.open(&sealed).await, Ok(Some(round())));
    assert_eq!(seen.lock().unwrap().len(), 1, "read once");
    assert!(seen.lock().unwrap()[0].contains(SECRET_ARN));

    let (url, seen) =
        secrets_stand_in(r#"{"ARN":"a","Name":"n","SecretString":"short-secret"}"#).await;
    let sealer = env(Role::Mcp, &vars)
        .unwrap()
        .reading_secrets_with(&sdk_at(&url).await)
        .state_sealer();
    assert_eq!(sealer.seal(&round()).await, Err(KeyUnavailable));
    assert_eq!(sealer.seal(&round()).await, Err(KeyUnavailable));
    assert_eq!(seen.lock().unwrap().len(), 2, "read again at each need");
    assert!(!KeyUnavailable.to_string().contains("short-secret"));
}

/// With the key in the environment, nothing is read: the SDK's endpoint here is a closed
/// port, so any call would fail; and the tasks function (no key, no secret) seals with a
/// throw-away key without a call.
#[tokio::test]
async fn no_secret_named_no_call() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let c = env(Role::Mcp, &vars).unwrap();
    let key = c.state_key.unwrap();
    let sealer = c
        .reading_secrets_with(&sdk_at("http://127.0.0.1:1").await)
        .state_sealer();
    let sealed = sealer.seal(&round()).await.unwrap();
    assert_eq!(StateSealer::new(key).open(&sealed).await, Ok(Some(round())));
    let c = env(Role::Tasks, &BASE).unwrap();
    assert_eq!(c.state_key, None);
    let sealer = c
        .reading_secrets_with(&sdk_at("http://127.0.0.1:1").await)
        .state_sealer();
    assert!(sealer.seal(&round()).await.is_ok());
}
