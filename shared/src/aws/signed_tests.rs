use super::*;

fn sdk(region: Option<&str>, with_credentials: bool) -> aws_config::SdkConfig {
    let mut b = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(region.map(|r| aws_config::Region::new(r.to_owned())));
    if with_credentials {
        b = b.credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDEXAMPLE",
            "never-printed-secret-key",
            Some("never-printed-session-token".into()),
            None,
            "test",
        )));
    }
    b.build()
}

#[test]
fn the_default_endpoint_is_the_services_in_the_region() {
    let at = |region| endpoint(&sdk(region, false), Service::LAMBDA);
    assert_eq!(
        at(Some("eu-west-1")).as_deref(),
        Some("https://lambda.eu-west-1.amazonaws.com")
    );
    assert_eq!(
        at(Some("cn-north-1")).as_deref(),
        Some("https://lambda.cn-north-1.amazonaws.com.cn")
    );
    assert_eq!(at(None), None);
    assert_eq!(at(Some("evil.example/x")), None, "not a region");
    let set = aws_config::SdkConfig::builder()
        .endpoint_url("http://127.0.0.1:9")
        .region(aws_config::Region::new("us-east-1"))
        .build();
    assert_eq!(
        endpoint(&set, Service::SECRETS_MANAGER).as_deref(),
        Some("http://127.0.0.1:9")
    );
}

#[test]
fn an_error_code_is_the_code_alone() {
    let answer = |header: Option<&str>, body: &str| Answer {
        status: 400,
        headers: header
            .map(|h| {
                let mut m = reqwest::header::HeaderMap::new();
                m.insert("x-amzn-errortype", h.parse().unwrap());
                m
            })
            .unwrap_or_default(),
        body: body.as_bytes().to_vec(),
    };
    let code = |h, b| answer(h, b).error_code();
    assert_eq!(
        code(
            Some("ResourceNotFoundException:http://internal.amazon.com/"),
            ""
        )
        .as_deref(),
        Some("ResourceNotFoundException")
    );
    assert_eq!(
        code(
            None,
            r#"{"__type":"com.amazonaws.secretsmanager#AccessDeniedException"}"#
        )
        .as_deref(),
        Some("AccessDeniedException")
    );
    assert_eq!(code(None, r#"{"__type":"a b c <script>"}"#), None);
    assert_eq!(code(None, "not json"), None);
}

#[test]
fn a_path_segment_keeps_only_unreserved_characters() {
    assert_eq!(path_segment("my-fn_1.x~"), "my-fn_1.x~");
    assert_eq!(
        path_segment("arn:aws:lambda:x/y z"),
        "arn%3Aaws%3Alambda%3Ax%2Fy%20z"
    );
}

/// A signed request carries its signature in sensitive headers, which `Debug` hides; the
/// signer itself prints no credential.
#[tokio::test]
async fn signing_adds_hidden_headers_and_prints_no_credential() {
    let signer = Signer::new(&sdk(Some("us-east-1"), true));
    let client = reqwest::Client::new();
    let mut request = client
        .post("https://api.example.com/prod/run?x=1")
        .header("content-type", "application/json")
        .body("{}")
        .build()
        .unwrap();
    signer.sign("execute-api", &mut request).await.unwrap();
    let auth = request.headers()["authorization"].to_str().unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            && auth.contains("/us-east-1/execute-api/aws4_request")
            && auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
        "{auth}"
    );
    let printed = format!("{request:?} {signer:?}");
    for secret in ["never-printed", "Signature="] {
        assert!(!printed.contains(secret), "{printed}");
    }

    let none = Signer::new(&sdk(Some("us-east-1"), false));
    assert_eq!(
        none.sign("execute-api", &mut request).await,
        Err(SignError::NoCredentials)
    );
    let nowhere = Signer::new(&sdk(None, true));
    assert_eq!(
        nowhere.sign("execute-api", &mut request).await,
        Err(SignError::NoRegion)
    );
}
