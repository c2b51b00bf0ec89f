//! The state key fetched from Secrets Manager (a stand-in on loopback).

use super::*;

use crate::aws::testing::sdk_at;

/// A stand-in Secrets Manager that answers every request with `body` (status 200).
async fn secrets_stand_in(body: &'static str) -> String {
    crate::aws::testing::answering(200, body).await.0
}

/// The key read from the secret is the key the same text in `STATE_KEY` gives (a stack
/// upgraded from the environment variable keeps opening the `requestState`s it sealed), and a
/// secret too short is refused without its value.
#[tokio::test]
async fn a_fetched_state_key_is_the_key_the_same_text_gives_and_a_short_one_is_refused() {
    let key = "0123456789abcdef0123456789abcdef-from-the-secret";
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", key));
    let from_env = env(Role::Mcp, &vars).unwrap().state_key;

    let url = secrets_stand_in(
        r#"{"ARN":"a","Name":"n","SecretString":"0123456789abcdef0123456789abcdef-from-the-secret"}"#,
    )
    .await;
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY_SECRET_ARN", SECRET_ARN));
    let c = env(Role::Mcp, &vars)
        .unwrap()
        .fetch_secrets(&sdk_at(&url).await)
        .await
        .unwrap();
    assert!(from_env.is_some());
    assert_eq!(c.state_key, from_env);
    assert_eq!(c.state_key_secret, None, "read, and not kept");

    let url = secrets_stand_in(r#"{"ARN":"a","Name":"n","SecretString":"short-secret"}"#).await;
    let err = env(Role::Mcp, &vars)
        .unwrap()
        .fetch_secrets(&sdk_at(&url).await)
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains("STATE_KEY_SECRET_ARN"), "{text}");
    assert!(!text.contains("short-secret"), "{text}");
}

/// Without a secret named, nothing is fetched: the SDK's endpoint here is a closed port, so
/// any call would fail.
#[tokio::test]
async fn no_secret_named_no_call() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let c = env(Role::Mcp, &vars).unwrap();
    let key = c.state_key;
    let c = c
        .fetch_secrets(&sdk_at("http://127.0.0.1:1").await)
        .await
        .unwrap();
    assert_eq!(c.state_key, key);
    let c = env(Role::Tasks, &BASE).unwrap();
    assert_eq!(
        c.fetch_secrets(&sdk_at("http://127.0.0.1:1").await)
            .await
            .unwrap()
            .state_key,
        None
    );
}
