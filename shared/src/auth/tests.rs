use super::*;

#[test]
fn bearer_tokens_are_read_case_insensitively() {
    assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
    assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
    assert_eq!(bearer(Some("Basic abc")), None);
    assert_eq!(bearer(Some("Bearer ")), None);
    assert_eq!(bearer(None), None);
}

#[test]
fn metadata_url_is_path_suffixed() {
    assert_eq!(
        resource_metadata_url("https://api.example.com/mcp"),
        "https://api.example.com/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        resource_metadata_url("http://127.0.0.1:8787/mcp"),
        "http://127.0.0.1:8787/.well-known/oauth-protected-resource/mcp"
    );
    assert_eq!(
        resource_metadata_url("https://api.example.com/v1/mcp"),
        "https://api.example.com/.well-known/oauth-protected-resource/v1/mcp"
    );
    assert_eq!(
        resource_metadata_url("https://api.example.com/"),
        "https://api.example.com/.well-known/oauth-protected-resource"
    );
    assert_eq!(
        resource_metadata_url("https://api.example.com"),
        "https://api.example.com/.well-known/oauth-protected-resource"
    );
    assert_eq!(
        resource_metadata_url("https://api.example.com/mcp?x=1#f"),
        "https://api.example.com/.well-known/oauth-protected-resource/mcp?x=1"
    );
}

#[test]
fn the_served_path_is_the_challenge_path() {
    for resource in [
        "https://api.example.com/v1/mcp",
        "http://mcp.test/mcp",
        "https://api.example.com",
        "https://api.example.com/a/b/?q",
    ] {
        let url = resource_metadata_url(resource);
        let path = resource_metadata_path(resource);
        let after_origin = &url[url.find("/.well-known").unwrap()..];
        assert_eq!(after_origin.split('?').next().unwrap(), path, "{resource}");
    }
    assert_eq!(
        resource_metadata_path("https://api.example.com/v1/mcp"),
        "/.well-known/oauth-protected-resource/v1/mcp"
    );
}

#[test]
fn scopes_come_from_scope_or_scp() {
    let a = json!({"scope": "tasks:read tasks:write"});
    assert_eq!(
        scopes(a.as_object().unwrap()),
        ["tasks:read", "tasks:write"]
    );
    let b = json!({"scp": ["x"]});
    assert_eq!(scopes(b.as_object().unwrap()), ["x"]);
    // Entra ID's `scp` is a space-separated string; Okta's an array; both may be present.
    let c = json!({"scp": "a tasks.run"});
    assert_eq!(scopes(c.as_object().unwrap()), ["a", "tasks.run"]);
    let d = json!({"scope": "a", "scp": ["b"]});
    assert_eq!(scopes(d.as_object().unwrap()), ["a", "b"]);
    let e = json!({"scope": 5, "scp": [1, "c", null]});
    assert_eq!(scopes(e.as_object().unwrap()), ["c"]);
}

#[test]
fn settings_that_would_let_the_wrong_tokens_in_are_refused() {
    let jwks = || JwksSource::File("jwks.json".into());
    let ok = AuthSettings::for_resource("https://i", "https://mcp.example/mcp", jwks());
    assert_eq!(ok.check(), Ok(()));
    let cognito = AuthSettings {
        allowed_client_ids: vec!["client".into()],
        ..ok.clone()
    };
    assert_eq!(cognito.check(), Err(AuthConfigError::ClientIdsWithoutScope));
    let cognito = AuthSettings {
        required_scopes: vec!["https://mcp.example/tasks.run".into()],
        ..cognito
    };
    assert_eq!(cognito.check(), Ok(()));
    for bad in [
        "api://guid",
        "mcp.example/mcp",
        "https://",
        "https://x/mcp#f",
    ] {
        let s = AuthSettings::for_resource("https://i", bad, jwks());
        assert_eq!(s.check(), Err(AuthConfigError::BadResource), "{bad}");
    }
    let blank = AuthSettings {
        audiences: vec![" ".into()],
        ..ok.clone()
    };
    assert_eq!(blank.check(), Err(AuthConfigError::Empty("audience")));
    assert_eq!(
        AuthSettings::resolve_resource(None, vec![]),
        Err(AuthConfigError::NoResource)
    );
    assert_eq!(
        AuthSettings::resolve_resource(None, vec!["https://a/mcp".into(), "guid".into()]),
        Ok((
            "https://a/mcp".to_owned(),
            vec!["https://a/mcp".to_owned(), "guid".to_owned()]
        ))
    );
    assert_eq!(
        AuthSettings::resolve_resource(Some("https://a/mcp".into()), vec![]),
        Ok(("https://a/mcp".to_owned(), vec!["https://a/mcp".to_owned()]))
    );
}

#[test]
fn a_jwks_without_usable_keys_is_refused() {
    assert!(parse_jwks(r#"{"keys": []}"#).is_err());
    assert!(parse_jwks("nope").is_err());
}

mod tokens {
    use super::*;
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/auth");

    fn settings(scopes: &[&str]) -> AuthSettings {
        AuthSettings {
            required_scopes: scopes.iter().map(|s| s.to_string()).collect(),
            leeway: Duration::from_secs(30),
            ..AuthSettings::for_resource(
                "https://issuer.test",
                "http://127.0.0.1:8787/mcp",
                JwksSource::File(format!("{FIXTURES}/jwks.json").into()),
            )
        }
    }

    fn sign(claims: Value, key_file: &str, kid: &str) -> String {
        let pem = std::fs::read(format!("{FIXTURES}/{key_file}")).unwrap();
        let mut h = Header::new(Algorithm::EdDSA);
        h.kid = Some(kid.into());
        encode(&h, &claims, &EncodingKey::from_ed_pem(&pem).unwrap()).unwrap()
    }

    fn claims(extra: Value) -> Value {
        let now = crate::clock::now_ms() / 1000;
        let mut c = json!({"iss": "https://issuer.test", "aud": "http://127.0.0.1:8787/mcp",
            "sub": "tenant-a", "exp": now + 600, "iat": now});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    async fn check(a: &Authenticator, token: &str) -> Result<Principal, AuthFailure> {
        a.authenticate(Some(&format!("Bearer {token}"))).await
    }

    #[tokio::test]
    async fn a_valid_token_names_its_tenant() {
        let a = Authenticator::new(settings(&[]));
        let c = claims(json!({}));
        let t = sign(c.clone(), "test-signing-key.pem", "test-key-1");
        assert_eq!(
            check(&a, &t).await,
            Ok(Principal {
                tenant: "tenant-a".into(),
                expires_at: c["exp"].as_u64().unwrap(),
            })
        );
        // A NumericDate may carry a fraction: the expiry is its whole second.
        let exp = c["exp"].as_u64().unwrap();
        let t = sign(
            claims(json!({"exp": exp as f64 + 0.75})),
            "test-signing-key.pem",
            "test-key-1",
        );
        assert_eq!(check(&a, &t).await.unwrap().expires_at, exp);
    }

    #[tokio::test]
    async fn every_kind_of_bad_token_is_refused() {
        let a = Authenticator::new(settings(&[]));
        let now = crate::clock::now_ms() / 1000;
        assert_eq!(a.authenticate(None).await, Err(AuthFailure::Missing));
        let cases = [
            (
                claims(json!({"exp": now - 600})),
                "test-signing-key.pem",
                "test-key-1",
                "token expired",
            ),
            (
                claims(json!({"aud": "https://other/mcp"})),
                "test-signing-key.pem",
                "test-key-1",
                "wrong audience",
            ),
            (
                claims(json!({"iss": "https://evil.test"})),
                "test-signing-key.pem",
                "test-key-1",
                "wrong issuer",
            ),
            (
                claims(json!({"nbf": now + 600})),
                "test-signing-key.pem",
                "test-key-1",
                "token not yet valid",
            ),
            (
                claims(json!({})),
                "other-signing-key.pem",
                "test-key-1",
                "bad signature",
            ),
            (
                claims(json!({"sub": 5})),
                "test-signing-key.pem",
                "test-key-1",
                "no usable tenant claim",
            ),
        ];
        for (c, key, kid, why) in cases {
            let t = sign(c, key, kid);
            assert_eq!(check(&a, &t).await, Err(AuthFailure::Invalid(why)));
        }
        let t = sign(claims(json!({})), "test-signing-key.pem", "rotated-away");
        assert_eq!(
            check(&a, &t).await,
            Err(AuthFailure::Invalid("unknown key id"))
        );
        assert_eq!(
            check(&a, "not.a.jwt").await,
            Err(AuthFailure::Invalid("malformed token"))
        );
    }

    #[tokio::test]
    async fn a_missing_scope_is_insufficient_scope() {
        let a = Authenticator::new(settings(&["tasks"]));
        let t = sign(
            claims(json!({"scope": "other"})),
            "test-signing-key.pem",
            "test-key-1",
        );
        assert_eq!(check(&a, &t).await, Err(AuthFailure::InsufficientScope));
        let t = sign(
            claims(json!({"scope": "other tasks"})),
            "test-signing-key.pem",
            "test-key-1",
        );
        assert!(check(&a, &t).await.is_ok());
    }

    /// A JWKS endpoint on 127.0.0.1 (the fixtures' `jwks.json`) that counts its requests
    /// and can be made slow or failing.
    struct FakeIssuer {
        jwks_url: String,
        hits: Arc<AtomicUsize>,
        delay_ms: Arc<AtomicU64>,
        fail_next: Arc<AtomicUsize>,
        /// Every request fails (`503`) until then.
        down_until: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
    }

    impl FakeIssuer {
        async fn start() -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let jwks_url = format!("http://{}/jwks", listener.local_addr().unwrap());
            let body = std::fs::read_to_string(format!("{FIXTURES}/jwks.json")).unwrap();
            let issuer = Self {
                jwks_url,
                hits: Arc::default(),
                delay_ms: Arc::default(),
                fail_next: Arc::default(),
                down_until: Arc::default(),
            };
            let (hits, delay, fail, down) = (
                issuer.hits.clone(),
                issuer.delay_ms.clone(),
                issuer.fail_next.clone(),
                issuer.down_until.clone(),
            );
            tokio::spawn(async move {
                while let Ok((mut conn, _)) = listener.accept().await {
                    let (hits, delay, fail, down, body) = (
                        hits.clone(),
                        delay.clone(),
                        fail.clone(),
                        down.clone(),
                        body.clone(),
                    );
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
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
                        let down = down
                            .lock()
                            .unwrap()
                            .is_some_and(|t| std::time::Instant::now() < t);
                        let failing = down
                            || fail
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    n.checked_sub(1)
                                })
                                .is_ok();
                        let (status, body) = if failing {
                            ("503 Service Unavailable", "down")
                        } else {
                            ("200 OK", body.as_str())
                        };
                        let reply = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = conn.write_all(reply.as_bytes()).await;
                    });
                }
            });
            issuer
        }

        fn settings(&self) -> AuthSettings {
            AuthSettings {
                jwks: JwksSource::Url(self.jwks_url.clone()),
                ..settings(&[])
            }
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }

    fn valid() -> String {
        sign(claims(json!({})), "test-signing-key.pem", "test-key-1")
    }

    fn with_kid(kid: &str) -> String {
        sign(claims(json!({})), "test-signing-key.pem", kid)
    }

    /// Refreshes allowed at any time (no cooldown), so an unknown kid always refetches.
    fn eager(s: AuthSettings) -> Authenticator {
        Authenticator::with_timing(
            s,
            RefreshTiming {
                cooldown: Duration::ZERO,
                backoff: FAILURE_BACKOFF,
            },
        )
    }

    /// An endless or huge JWKS is cut off at MAX_JWKS_BYTES, announced or not: the
    /// authenticator answers "keys unavailable" (503) instead of buffering it.
    #[tokio::test]
    async fn an_oversized_jwks_is_refused_not_buffered() {
        for announced in [true, false] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/jwks", listener.local_addr().unwrap());
            let sent = Arc::new(AtomicUsize::new(0));
            let counter = sent.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = if announced {
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 64 << 20)
                } else {
                    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_owned()
                };
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                // An endless document: a JSON prefix, then blanks for ever (64 MiB).
                let chunk = vec![b' '; 64 * 1024];
                for _ in 0..1024 {
                    let piece = if announced {
                        chunk.clone()
                    } else {
                        [
                            format!("{:x}\r\n", chunk.len()).into_bytes(),
                            chunk.clone(),
                            b"\r\n".to_vec(),
                        ]
                        .concat()
                    };
                    if conn.write_all(&piece).await.is_err() {
                        return;
                    }
                    counter.fetch_add(chunk.len(), Ordering::SeqCst);
                }
            });
            let a = Authenticator::new(AuthSettings {
                jwks: JwksSource::Url(url),
                ..settings(&[])
            });
            let got = check(&a, &valid()).await;
            assert!(
                matches!(got, Err(AuthFailure::Unavailable { .. })),
                "announced={announced}: {got:?}"
            );
            assert!(
                sent.load(Ordering::SeqCst) < 8 << 20,
                "announced={announced}: read {} bytes",
                sent.load(Ordering::SeqCst)
            );
        }
    }

    #[tokio::test]
    async fn a_cached_key_is_answered_while_a_refresh_hangs() {
        let issuer = FakeIssuer::start().await;
        let a = Arc::new(eager(issuer.settings()));
        assert!(check(&a, &valid()).await.is_ok());
        assert_eq!(issuer.hits(), 1);
        issuer.delay_ms.store(3000, Ordering::SeqCst);
        let random = {
            let a = a.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                (check(&a, &with_kid("random-kid")).await, started.elapsed())
            })
        };
        let waited = std::time::Instant::now();
        while issuer.hits() < 2 {
            assert!(
                waited.elapsed() < Duration::from_secs(2),
                "no refresh started"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The refresh is now stuck at the issuer for 3 s.
        let started = std::time::Instant::now();
        assert!(check(&a, &valid()).await.is_ok());
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "a cached key waited {took:?} for an unrelated refresh"
        );
        let (verdict, took) = random.await.unwrap();
        assert_eq!(verdict, Err(AuthFailure::Invalid("unknown key id")));
        assert!(
            took >= Duration::from_millis(2500),
            "the refresh was slow: {took:?}"
        );
    }

    #[tokio::test]
    async fn an_outage_is_unavailable_and_recovery_is_seen_within_two_seconds() {
        let issuer = FakeIssuer::start().await;
        // Down for 2 s: longer than one fetch and its first retry, far short of a cooldown.
        let recovery = std::time::Instant::now() + Duration::from_millis(2000);
        *issuer.down_until.lock().unwrap() = Some(recovery);
        let a = Authenticator::new(issuer.settings());
        assert_eq!(
            check(&a, &valid()).await,
            Err(AuthFailure::Unavailable {
                retry_after_secs: 1
            })
        );
        // Within the backoff nobody refetches.
        assert!(matches!(
            check(&a, &valid()).await,
            Err(AuthFailure::Unavailable { .. })
        ));
        assert_eq!(issuer.hits(), 1);
        loop {
            match check(&a, &valid()).await {
                Ok(_) => break,
                Err(AuthFailure::Unavailable { .. }) => {}
                Err(other) => panic!("during the outage: {other:?}"),
            }
            assert!(
                std::time::Instant::now() < recovery + Duration::from_secs(2),
                "recovery not seen within 2 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let late = std::time::Instant::now().saturating_duration_since(recovery);
        println!("recovery seen {late:?} after the issuer came back");
        // Fetches at about 0 s (down), 1 s (down) and 3 s (back): backoff 1 s, then 2 s.
        assert_eq!(issuer.hits(), 3);
    }

    #[tokio::test]
    async fn concurrent_unknown_kids_share_one_fetch() {
        let issuer = FakeIssuer::start().await;
        issuer.delay_ms.store(300, Ordering::SeqCst);
        let a = Arc::new(Authenticator::new(issuer.settings()));
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let a = a.clone();
                tokio::spawn(async move { check(&a, &with_kid(&format!("nope-{i}"))).await })
            })
            .collect();
        for c in calls {
            assert_eq!(
                c.await.unwrap(),
                Err(AuthFailure::Invalid("unknown key id"))
            );
        }
        assert_eq!(issuer.hits(), 1, "one fetch for all of them");
        // Within the cooldown, more unknown kids fetch nothing; cached keys just work.
        assert_eq!(
            check(&a, &with_kid("nope-again")).await,
            Err(AuthFailure::Invalid("unknown key id"))
        );
        assert!(check(&a, &valid()).await.is_ok());
        assert_eq!(issuer.hits(), 1);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_the_keys_we_had() {
        let issuer = FakeIssuer::start().await;
        let a = eager(issuer.settings());
        assert!(check(&a, &valid()).await.is_ok());
        issuer.fail_next.store(100, Ordering::SeqCst);
        assert!(matches!(
            check(&a, &with_kid("rotated-in")).await,
            Err(AuthFailure::Unavailable { .. })
        ));
        assert_eq!(issuer.hits(), 2);
        assert!(check(&a, &valid()).await.is_ok(), "the old keys still work");
    }

    #[test]
    fn failures_back_off_from_one_second_to_the_cooldown() {
        let t = RefreshTiming {
            cooldown: REFRESH_COOLDOWN,
            backoff: FAILURE_BACKOFF,
        };
        let secs: Vec<u64> = (1..=7).map(|n| t.after_failures(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(t.after_failures(u32::MAX), REFRESH_COOLDOWN);
    }

    #[test]
    fn challenges_point_at_the_metadata() {
        let s = settings(&["tasks"]);
        assert_eq!(
            challenge(&s, &AuthFailure::Missing),
            "Bearer resource_metadata=\"http://127.0.0.1:8787/.well-known/oauth-protected-resource/mcp\", scope=\"tasks\""
        );
        assert!(
            challenge(&s, &AuthFailure::InsufficientScope).contains("error=\"insufficient_scope\"")
        );
        let doc = resource_metadata(&s);
        assert_eq!(doc["resource"], "http://127.0.0.1:8787/mcp");
        assert_eq!(doc["authorization_servers"], json!(["https://issuer.test"]));
    }
}
