//! The configuration read from the environment: required, malformed and optional variables,
//! the state key's two sources, and who must authenticate.

use super::*;

#[test]
fn a_missing_variable_fails_the_cold_start_by_name() {
    let err = env(Role::Tasks, &[("QUEUE_URL", "q")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "environment variable TABLE_NAME is required"
    );
    assert!(matches!(
        env(Role::Mcp, &BASE),
        Err(ConfigError::Missing("STATE_KEY or STATE_KEY_SECRET_ARN"))
    ));
    assert!(matches!(
        env(Role::Worker, &BASE),
        Err(ConfigError::Missing("MAX_RECEIVES"))
    ));
    assert!(env(Role::Tasks, &BASE).is_ok());
    assert!(env(Role::Sweep, &BASE).is_ok());
}

#[test]
fn malformed_variables_are_refused_without_echoing_them() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "short-secret"));
    let err = env(Role::Mcp, &vars).unwrap_err().to_string();
    assert!(!err.contains("short-secret"), "{err}");
    for (k, v) in [
        ("MAX_RECEIVES", "0"),
        ("SWEEP_STALE_SECONDS", "soon"),
        ("TASK_TTL_SECONDS", "59"),
        ("TASK_TTL_SECONDS", "31536001"),
        ("TASK_TTL_SECONDS", "1d"),
        ("METRICS_TENANTS", "1001"),
        ("METRICS_TENANTS", "-1"),
        ("METRICS_TENANTS", "all"),
    ] {
        let mut vars = BASE.to_vec();
        vars.push((k, v));
        assert!(
            matches!(env(Role::Sweep, &vars), Err(ConfigError::Invalid { name, .. }) if name == k),
            "{k}={v}"
        );
    }
}

#[test]
fn optional_variables_have_gateway_friendly_defaults() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let c = env(Role::Mcp, &vars).unwrap();
    assert!(c.allowed_hosts.is_empty(), "behind API Gateway any host");
    assert_eq!(c.tools_manifest, None);
    assert!(c.tool_target_functions.is_empty());
    assert!(c.state_key.is_some());
    assert!(!format!("{c:?}").contains("0123456789abcdef"));
    assert_eq!(c.tasks.ttl_ms, Some(24 * 3600 * 1000));
    vars.push(("ALLOWED_HOSTS", " mcp.example.com, ,api.example.com "));
    vars.push(("TASK_TTL_SECONDS", "3600"));
    let c = env(Role::Mcp, &vars).unwrap();
    assert_eq!(c.allowed_hosts, ["mcp.example.com", "api.example.com"]);
    assert_eq!(c.tasks.ttl_ms, Some(3600 * 1000));
}

/// The deployed mcp function names its key's secret, not the key: nothing is read until
/// a request needs it (`Config::state_sealer`), and the key and the secret together are refused (which one counts would
/// be a guess).
#[test]
fn the_state_key_comes_from_the_environment_or_a_secret_never_both() {
    let mut vars = BASE.to_vec();
    vars.push(("STATE_KEY_SECRET_ARN", SECRET_ARN));
    let c = env(Role::Mcp, &vars).unwrap();
    assert_eq!(c.state_key, None, "not fetched yet");
    assert_eq!(
        c.state_key_secret,
        Some(SecretRef {
            arn: SECRET_ARN.into(),
            version: None
        })
    );
    vars.push((
        "STATE_KEY_SECRET_VERSION",
        "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE",
    ));
    let c = env(Role::Mcp, &vars).unwrap();
    assert_eq!(
        c.state_key_secret.unwrap().version.as_deref(),
        Some("EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE")
    );
    vars.push(("STATE_KEY", "0123456789abcdef0123456789abcdef"));
    let err = env(Role::Mcp, &vars).unwrap_err().to_string();
    assert!(err.contains("not both"), "{err}");
    assert!(!err.contains("0123456789abcdef"), "{err}");
}

#[test]
fn http_functions_are_authenticated_unless_open_access_is_chosen() {
    let base = [
        ("TABLE_NAME", "tasks"),
        ("QUEUE_URL", "q"),
        ("STATE_KEY", "a-test-key-of-at-least-32-characters"),
    ];
    assert!(matches!(
        env(Role::Mcp, &base),
        Err(ConfigError::Missing("AUTH_ISSUER"))
    ));
    let mut jwt = base.to_vec();
    jwt.extend([
        ("AUTH_ISSUER", "https://issuer.example"),
        ("AUTH_AUDIENCE", "https://mcp.example/mcp"),
        ("AUTH_JWKS_URL", "https://issuer.example/jwks.json"),
        ("AUTH_REQUIRED_SCOPES", "tasks:read tasks:write"),
    ]);
    let auth = env(Role::Tasks, &jwt).unwrap().auth.unwrap();
    assert_eq!(auth.tenant_claim, "sub");
    assert_eq!(auth.required_scopes, ["tasks:read", "tasks:write"]);
    let mut open = base.to_vec();
    open.push(("AUTH_MODE", "none"));
    assert!(env(Role::Mcp, &open).unwrap().auth.is_none());
    let mut bad = base.to_vec();
    bad.push(("AUTH_MODE", "maybe"));
    assert!(env(Role::Mcp, &bad).is_err());
    // Workers never read tokens.
    let mut worker = base.to_vec();
    worker.push(("MAX_RECEIVES", "3"));
    assert!(env(Role::Worker, &worker).unwrap().auth.is_none());
}
