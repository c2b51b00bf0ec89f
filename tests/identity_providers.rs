//! The identity providers organisations sign in with, black-box: for Amazon Cognito, Microsoft
//! Entra ID, Okta, Auth0 and Keycloak, a `serve` started with the recipe's flags
//! (docs/identity-providers.md) accepts an access token shaped like the provider's documented
//! ones (their claim names and types, signed RS256 by the test key `provider-rsa-1`), names the
//! tenant by the recipe's claim, and refuses the near misses: another client, an ID token, a
//! wrong `aud` with an allowed client, a scope without the required one, no `aud` without an
//! allowed client; and every check that makes any token valid (signature, `iss`, `exp`, `nbf`,
//! algorithm, `kid`) still holds for each shape.

mod support;

use serde_json::{Value, json};
use support::jwt::{jwks_file, now};
use support::providers::{RESOURCE, Recipe, recipes, sign, token, with};
use support::{Client, Server, data_dir};

fn start(r: &Recipe) -> (Server, tempfile::TempDir) {
    let dir = data_dir();
    let jwks = jwks_file();
    let mut args = vec!["--auth", "jwt", "--issuer", r.issuer, "--jwks-file", &jwks];
    args.extend(r.flags.iter().copied());
    let s = Server::start(dir.path(), &args);
    (s, dir)
}

/// A `tools/list` with `token` (or none): the status and the `WWW-Authenticate` header.
async fn probe(c: &Client, token: Option<&str>) -> (u16, Option<String>) {
    let body = c.body("tools/list", json!({}));
    let mut rb = reqwest::Client::new().post(&c.url).body(body.to_string());
    for (k, v) in Client::headers(&body) {
        rb = rb.header(k, v);
    }
    if let Some(t) = token {
        rb = rb.header("authorization", format!("Bearer {t}"));
    }
    let resp = rb.send().await.unwrap();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status().as_u16(), challenge)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_providers_access_tokens_pass_under_its_recipe() {
    for r in recipes() {
        let (s, _d) = start(&r);
        let c = s.client();
        let (status, _) = probe(&c, Some(&token(&r.user_a))).await;
        assert_eq!(
            status,
            200,
            "{}: a valid access token\n{}",
            r.name,
            s.kill()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_providers_near_misses_are_refused() {
    for r in recipes() {
        let (s, _d) = start(&r);
        let c = s.client();
        for (what, claims, want) in &r.near_misses {
            let (status, challenge) = probe(&c, Some(&token(claims))).await;
            assert_eq!(status, *want, "{}: {what}", r.name);
            let challenge = challenge.unwrap_or_default();
            let error = if *want == 403 {
                "insufficient_scope"
            } else {
                "invalid_token"
            };
            assert!(
                challenge.contains(&format!("error=\"{error}\"")),
                "{}: {what}: {challenge}",
                r.name
            );
        }
    }
}

/// Signature, `iss`, `exp`, `nbf`, algorithm and `kid`: every check holds for every shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checks_every_token_passes_hold_for_every_providers_shape() {
    use jsonwebtoken::Algorithm::{EdDSA, HS256, RS256};
    for r in recipes() {
        let (s, _d) = start(&r);
        let c = s.client();
        let a = &r.user_a;
        let t = now();
        let bad = [
            ("expired", token(&with(a, json!({"exp": t - 3600})))),
            ("not yet valid", token(&with(a, json!({"nbf": t + 3600})))),
            ("no exp", token(&with(a, json!({"exp": null})))),
            (
                "another issuer",
                token(&with(a, json!({"iss": "https://evil.example.com/"}))),
            ),
            (
                "signed by another key under the same kid",
                sign(a, EdDSA, "other-signing-key.pem", "provider-rsa-1"),
            ),
            (
                "HS256 keyed with the public key (algorithm confusion)",
                sign(a, HS256, "provider-rsa-key.pem", "provider-rsa-1"),
            ),
            (
                "an unknown kid",
                sign(a, RS256, "provider-rsa-key.pem", "rotated-away"),
            ),
        ];
        for (what, tok) in bad {
            let (status, _) = probe(&c, Some(&tok)).await;
            assert_eq!(status, 401, "{}: {what}", r.name);
        }
        let mut tampered = token(a);
        let mid = tampered.rfind('.').unwrap() - 3;
        tampered.replace_range(mid..mid + 1, "A");
        let (status, _) = probe(&c, Some(&tampered)).await;
        assert_eq!(status, 401, "{}: a tampered payload", r.name);
    }
}

/// The recipe's tenant claim names the tenant: user B never sees user A's task, and the
/// metadata and the challenge advertise the recipe's scopes at the recipe's resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipes_tenant_claim_and_metadata_are_what_the_docs_say() {
    for r in recipes() {
        let (s, _d) = start(&r);
        let base = s.client().with_tasks();
        let a = base.with_bearer(&token(&r.user_a));
        let b = base.with_bearer(&token(&r.user_b));
        assert_ne!(
            r.user_a[r.tenant_claim], r.user_b[r.tenant_claim],
            "{}: two tenants",
            r.name
        );
        let created = a
            .tool(
                "confirm_action",
                json!({"action": "Archive", "target": "Q3 notes"}),
            )
            .await;
        let id = created["taskId"].as_str().unwrap().to_owned();
        let mine = a.send("tasks/get", json!({"taskId": id})).await.json();
        assert!(mine["result"].is_object(), "{}: {mine}", r.name);
        let theirs = b.send("tasks/get", json!({"taskId": id})).await.json();
        assert_eq!(theirs["error"]["code"], -32602, "{}: {theirs}", r.name);

        let origin = s.url.trim_end_matches("/mcp").to_owned();
        let doc: Value = reqwest::get(format!("{origin}/.well-known/oauth-protected-resource/mcp"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], RESOURCE, "{}", r.name);
        assert_eq!(
            doc["authorization_servers"],
            json!([r.issuer]),
            "{}",
            r.name
        );
        assert_eq!(doc["scopes_supported"], json!(r.advertised), "{}", r.name);
        let (status, challenge) = probe(&base, None).await;
        assert_eq!(status, 401);
        assert_eq!(
            challenge.unwrap(),
            format!(
                "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"{}\"",
                r.advertised.join(" ")
            ),
            "{}",
            r.name
        );
    }
}

/// Settings that would let the wrong tokens in are refused before the server listens.
#[test]
fn a_server_that_would_take_tokens_without_aud_on_client_id_alone_does_not_start() {
    let dir = data_dir();
    let jwks = jwks_file();
    let refused = [
        (
            vec!["--resource", RESOURCE, "--allowed-client-id", "app-client"],
            "--required-scope",
        ),
        (vec!["--audience", "api://default"], "absolute http(s) URI"),
        (vec!["--resource", "not a url"], "absolute http(s) URI"),
        (
            vec!["--resource", RESOURCE, "--audience", ""],
            "empty audience",
        ),
    ];
    for (flags, says) in refused {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(["--auth", "jwt", "--issuer", "https://issuer.example"])
            .args(["--jwks-file", &jwks])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?} started");
        assert!(
            String::from_utf8_lossy(&out.stdout).is_empty(),
            "{flags:?}: nothing listened"
        );
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}
