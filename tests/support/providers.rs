//! Access tokens shaped like five identity providers' documented ones (Cognito, Entra ID,
//! Okta, Auth0, Keycloak: their claim names and types), signed RS256 by the test key
//! `provider-rsa-1`, with each recipe's settings (docs/identity-providers.md) and near misses.
//! Used by tests/identity_providers.rs (the local server) and tests/aws_identity.rs (the
//! Lambda functions, through the template's parameters).

use serde_json::{Map, Value, json};

use super::jwt::{FIXTURES, now};

/// The resource every recipe deploys as (the PRM `resource`).
pub const RESOURCE: &str = "https://mcp.example.com/mcp";

/// `claims` signed with `alg` under `kid` by a fixture key (`provider-rsa-key.pem` unless
/// another file is named).
pub fn sign(claims: &Value, alg: jsonwebtoken::Algorithm, key_file: &str, kid: &str) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let pem = std::fs::read(format!("{FIXTURES}/{key_file}")).unwrap();
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem).unwrap(),
        // Algorithm confusion: what the server publishes (its JWKS), used as an HMAC secret.
        Algorithm::HS256 => {
            EncodingKey::from_secret(&std::fs::read(format!("{FIXTURES}/jwks.json")).unwrap())
                .unwrap()
        }
        other => panic!("{other:?}"),
    };
    let mut h = Header::new(alg);
    h.kid = Some(kid.into());
    encode(&h, claims, &key).unwrap()
}

/// An RS256 token of `claims`, as every one of these providers signs.
pub fn token(claims: &Value) -> String {
    sign(
        claims,
        jsonwebtoken::Algorithm::RS256,
        "provider-rsa-key.pem",
        "provider-rsa-1",
    )
}

/// `base` with `changes` applied (`null` removes a claim).
pub fn with(base: &Value, changes: Value) -> Value {
    let mut out: Map<String, Value> = base.as_object().unwrap().clone();
    for (k, v) in changes.as_object().unwrap() {
        if v.is_null() {
            out.remove(k);
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// One provider: the recipe's flags, a valid access token's claims for two users, and the
/// near misses with the status each must get.
pub struct Recipe {
    pub name: &'static str,
    pub issuer: &'static str,
    pub flags: Vec<&'static str>,
    /// The claim the recipe names the tenant by.
    pub tenant_claim: &'static str,
    /// A valid access token of user A, and of user B (another tenant).
    pub user_a: Value,
    pub user_b: Value,
    /// (what it is, its claims, the status: 401 or 403).
    pub near_misses: Vec<(&'static str, Value, u16)>,
    /// The metadata's `scopes_supported` (also the challenge's `scope`).
    pub advertised: Vec<&'static str>,
}

fn cognito() -> Recipe {
    const ISS: &str = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_AbCdEf123";
    const CLIENT: &str = "4nkv7e3ml2q0example0client";
    const SCOPE: &str = "https://mcp.example.com/tasks.run";
    let t = now();
    // A Cognito user pool access token: no `aud`; the app client in `client_id`;
    // `token_use: access`; the resource server's scopes in a space-separated `scope`.
    let a = json!({
        "sub": "6f1d8a3e-1b2c-4d5e-8f90-a1b2c3d4e5f6",
        "cognito:groups": ["analysts"],
        "iss": ISS,
        "version": 2,
        "client_id": CLIENT,
        "origin_jti": "0a1b2c3d-4e5f-6789-abcd-ef0123456789",
        "event_id": "11111111-2222-3333-4444-555555555555",
        "token_use": "access",
        "scope": format!("openid {SCOPE}"),
        "auth_time": t - 60,
        "exp": t + 3600,
        "iat": t - 60,
        "jti": "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0",
        "username": "alice"
    });
    let b = with(
        &a,
        json!({"sub": "0b0b0b0b-1b2c-4d5e-8f90-a1b2c3d4e5f6", "username": "bob"}),
    );
    // The same user's ID token: `aud` is the app client, `token_use: id`, no scope.
    let id_token = json!({
        "sub": a["sub"], "aud": CLIENT, "email_verified": true, "token_use": "id",
        "auth_time": t - 60, "iss": ISS, "cognito:username": "alice", "exp": t + 3600,
        "iat": t - 60, "email": "alice@example.com"
    });
    Recipe {
        name: "cognito",
        issuer: ISS,
        flags: vec![
            "--resource",
            RESOURCE,
            "--allowed-client-id",
            CLIENT,
            "--required-scope",
            SCOPE,
        ],
        tenant_claim: "sub",
        near_misses: vec![
            (
                "another app client",
                with(&a, json!({"client_id": "7other0app0client0example"})),
                401,
            ),
            ("the ID token", id_token.clone(), 401),
            (
                "an ID token without aud, of the allowed client",
                with(
                    &id_token,
                    json!({"aud": null, "client_id": CLIENT, "scope": SCOPE}),
                ),
                401,
            ),
            (
                "a wrong aud with the allowed client_id",
                with(&a, json!({"aud": "https://other.example.com/api"})),
                401,
            ),
            (
                "a token_use that is not a string",
                with(&a, json!({"token_use": ["access"]})),
                401,
            ),
            ("no client_id", with(&a, json!({"client_id": null})), 401),
            (
                "a scope string without the required scope",
                with(&a, json!({"scope": "openid profile"})),
                403,
            ),
        ],
        advertised: vec![SCOPE],
        user_a: a,
        user_b: b,
    }
}

fn entra() -> Recipe {
    const TID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    const API: &str = "6e7e3f2a-1c5b-4b8e-9d2a-0f1e2d3c4b5a";
    const CLIENT: &str = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d";
    const ISS: &str = "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0";
    let t = now();
    // An Entra ID v2.0 access token for the API: `aud` is the API's application (client) id,
    // `scp` a space-separated string of the delegated scopes' short names.
    let a = json!({
        "aud": API,
        "iss": ISS,
        "iat": t - 60,
        "nbf": t - 60,
        "exp": t + 3600,
        "aio": "AWQAm/8aAAAA",
        "azp": CLIENT,
        "azpacr": "0",
        "name": "Alice Example",
        "oid": "00000000-0000-0000-66f3-3332eca7ea81",
        "preferred_username": "alice@contoso.example",
        "rh": "0.AAAA",
        "scp": "tasks.read tasks.run",
        "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
        "tid": TID,
        "uti": "fqiBqXLPj0eQa82S-IYFAA",
        "ver": "2.0"
    });
    let b = with(
        &a,
        json!({"oid": "11111111-0000-0000-66f3-3332eca7ea81",
               "sub": "BBBBBBBBBBBBBBBBBBBBBIkzqFVrSaSaFHy782bbtaQ"}),
    );
    // The ID token the client app gets: `aud` is the client, no `scp`.
    let id_token = json!({
        "aud": CLIENT, "iss": ISS, "iat": t - 60, "nbf": t - 60, "exp": t + 3600,
        "name": "Alice Example", "oid": a["oid"], "preferred_username": "alice@contoso.example",
        "sub": "pairwise-for-the-client", "tid": TID, "ver": "2.0"
    });
    Recipe {
        name: "entra",
        issuer: ISS,
        flags: vec![
            "--resource",
            RESOURCE,
            "--audience",
            API,
            "--required-scope",
            "tasks.run",
            "--advertise-scope",
            "https://mcp.example.com/mcp/tasks.run",
            "--tenant-claim",
            "oid",
        ],
        tenant_claim: "oid",
        near_misses: vec![
            (
                "a token for another API",
                with(&a, json!({"aud": "00000003-0000-0000-c000-000000000000"})),
                401,
            ),
            ("the ID token", id_token, 401),
            (
                "a v1.0 token (another issuer)",
                with(
                    &a,
                    json!({"iss": format!("https://sts.windows.net/{TID}/"), "ver": "1.0"}),
                ),
                401,
            ),
            (
                "an scp string without the required scope",
                with(&a, json!({"scp": "tasks.read"})),
                403,
            ),
            (
                "the scope's full name in scp (never what Entra grants)",
                with(&a, json!({"scp": "https://mcp.example.com/mcp/tasks.run"})),
                403,
            ),
            ("no aud at all", with(&a, json!({"aud": null})), 401),
        ],
        advertised: vec!["https://mcp.example.com/mcp/tasks.run"],
        user_a: a,
        user_b: b,
    }
}

fn okta() -> Recipe {
    const ISS: &str = "https://example.okta.com/oauth2/aus1a2b3c4d5e6f7g8h9";
    let t = now();
    // An Okta custom authorization server's access token: `aud` as configured on the server,
    // `scp` an array, the user's id in `uid`, the client in `cid`.
    let a = json!({
        "ver": 1,
        "jti": "AT.0mP4JKAZX1iACIT4vbEDF7LpvDVjxypPMf0D7uX39RE",
        "iss": ISS,
        "aud": RESOURCE,
        "iat": t - 60,
        "exp": t + 3600,
        "cid": "0oa1b2c3d4e5f6g7h8i9",
        "uid": "00u1a2b3c4d5e6f7g8h9",
        "scp": ["openid", "tasks.run"],
        "auth_time": t - 60,
        "sub": "alice@example.com"
    });
    let b = with(
        &a,
        json!({"uid": "00u9z8y7x6w5v4u3t2s1", "sub": "bob@example.com"}),
    );
    Recipe {
        name: "okta",
        issuer: ISS,
        flags: vec![
            "--audience",
            RESOURCE,
            "--required-scope",
            "tasks.run",
            "--tenant-claim",
            "uid",
        ],
        tenant_claim: "uid",
        near_misses: vec![
            (
                "the default server's audience",
                with(&a, json!({"aud": "api://default"})),
                401,
            ),
            (
                "no aud without an allowed client",
                with(&a, json!({"aud": null})),
                401,
            ),
            (
                "an scp array without the required scope",
                with(&a, json!({"scp": ["openid", "profile"]})),
                403,
            ),
            (
                "the ID token (aud is the client)",
                json!({"sub": "00u1a2b3c4d5e6f7g8h9", "ver": 1, "iss": ISS,
                       "aud": "0oa1b2c3d4e5f6g7h8i9", "iat": t - 60, "exp": t + 3600,
                       "jti": "ID.abc", "amr": ["pwd"], "idp": "00o1", "auth_time": t - 60}),
                401,
            ),
        ],
        advertised: vec!["tasks.run"],
        user_a: a,
        user_b: b,
    }
}

fn auth0() -> Recipe {
    const ISS: &str = "https://example.eu.auth0.com/";
    let t = now();
    // An Auth0 access token for an API: `aud` an array of the API identifier and the userinfo
    // endpoint (when `openid` was asked for too), a space-separated `scope`, the client in
    // `azp`.
    let a = json!({
        "iss": ISS,
        "sub": "auth0|64f1a2b3c4d5e6f7a8b9c0d1",
        "aud": [RESOURCE, "https://example.eu.auth0.com/userinfo"],
        "iat": t - 60,
        "exp": t + 86400,
        "scope": "openid profile tasks:run",
        "azp": "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
        "permissions": ["tasks:run"]
    });
    let b = with(&a, json!({"sub": "google-oauth2|1098765432109876543"}));
    Recipe {
        name: "auth0",
        issuer: ISS,
        flags: vec!["--audience", RESOURCE, "--required-scope", "tasks:run"],
        tenant_claim: "sub",
        near_misses: vec![
            (
                "a token for another API",
                with(
                    &a,
                    json!({"aud": ["https://api.other.example",
                                  "https://example.eu.auth0.com/userinfo"]}),
                ),
                401,
            ),
            (
                "the userinfo audience alone",
                with(&a, json!({"aud": "https://example.eu.auth0.com/userinfo"})),
                401,
            ),
            (
                "a scope string without the required scope",
                with(&a, json!({"scope": "openid profile"})),
                403,
            ),
            (
                "the issuer without its trailing slash",
                with(&a, json!({"iss": "https://example.eu.auth0.com"})),
                401,
            ),
        ],
        advertised: vec!["tasks:run"],
        user_a: a,
        user_b: b,
    }
}

fn keycloak() -> Recipe {
    const ISS: &str = "https://sso.example.com/realms/acme";
    let t = now();
    // A Keycloak access token with an audience mapper adding this server: `aud` an array,
    // `typ: Bearer`, the client in `azp`, a space-separated `scope`.
    let a = json!({
        "exp": t + 300,
        "iat": t - 10,
        "auth_time": t - 10,
        "jti": "onrtac:5b1f6a42-0c7d-4f8e-9a1b-2c3d4e5f6a7b",
        "iss": ISS,
        "aud": [RESOURCE, "account"],
        "sub": "f2c1e9d8-7b6a-4c5d-9e8f-0a1b2c3d4e5f",
        "typ": "Bearer",
        "azp": "claude-code",
        "sid": "a9b8c7d6-e5f4-4321-8765-0fedcba98765",
        "acr": "1",
        "realm_access": {"roles": ["default-roles-acme"]},
        "resource_access": {"account": {"roles": ["view-profile"]}},
        "scope": "openid tasks.run profile email",
        "email_verified": true,
        "preferred_username": "alice"
    });
    let b = with(
        &a,
        json!({"sub": "0e0e0e0e-7b6a-4c5d-9e8f-0a1b2c3d4e5f", "preferred_username": "bob"}),
    );
    Recipe {
        name: "keycloak",
        issuer: ISS,
        flags: vec!["--audience", RESOURCE, "--required-scope", "tasks.run"],
        tenant_claim: "sub",
        near_misses: vec![
            (
                "no audience mapper (aud is account only)",
                with(&a, json!({"aud": "account"})),
                401,
            ),
            (
                "an ID token, even one naming this server",
                with(&a, json!({"typ": "ID", "aud": RESOURCE, "scope": null})),
                401,
            ),
            (
                "a refresh token's typ",
                with(&a, json!({"typ": "Refresh"})),
                401,
            ),
            (
                "a scope string without the required scope",
                with(&a, json!({"scope": "openid profile email"})),
                403,
            ),
        ],
        advertised: vec!["tasks.run"],
        user_a: a,
        user_b: b,
    }
}

pub fn recipes() -> Vec<Recipe> {
    vec![cognito(), entra(), okta(), auth0(), keycloak()]
}

impl Recipe {
    /// The recipe as the SAM template's parameters (docs/identity-providers.md's table): each
    /// `serve` flag's parameter, repeated flags joined by spaces, the keys at `jwks_url`.
    pub fn template_parameters(&self, jwks_url: &str) -> Vec<(&'static str, String)> {
        let mut params: Vec<(&'static str, String)> = vec![
            ("AuthMode", "jwt".into()),
            ("AuthIssuer", self.issuer.into()),
            ("AuthJwksUrl", jwks_url.into()),
        ];
        for pair in self.flags.chunks(2) {
            let param = match pair[0] {
                "--resource" => "AuthResource",
                "--audience" => "AuthAudience",
                "--allowed-client-id" => "AuthAllowedClientIds",
                "--required-scope" => "AuthRequiredScopes",
                "--advertise-scope" => "AuthAdvertisedScopes",
                "--tenant-claim" => "AuthTenantClaim",
                other => panic!("no template parameter for {other}"),
            };
            match params.iter_mut().find(|(p, _)| *p == param) {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(pair[1]);
                }
                None => params.push((param, pair[1].into())),
            }
        }
        params
    }
}
