use super::*;
use crate::declared::target::LambdaInvoker;
use serde_json::json;
use std::collections::HashMap;

const ARN: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:deploy-key-AbCdEf";

const EXAMPLE: &str = r#"
[[tool]]
name = "monthly_report"
title = "Monthly report"
description = "Builds the monthly sales report."
task = "optional"
input_schema = { type = "object", required = ["month"], properties = { month = { type = "string", pattern = "^[0-9]{4}-[0-9]{2}$" } } }
target = { lambda = "arn:aws:lambda:eu-west-1:123456789012:function:report" }
step_timeout_seconds = 300

[[tool]]
name = "deploy"
description = "Deploys a service."
task = "required"
input_schema = { type = "object" }
target = { http = "https://deploy.example.com/step", header = "X-Api-Key", secret_env = "DEPLOY_KEY" }
max_retries = 2
pass_tenant = true

[[tool]]
name = "countdown"
description = "Counts down."
input_schema = { type = "object" }
target = { command = ["./countdown.sh", "--fast"], env = ["COUNTDOWN_LOG"] }
max_answer_bytes = 4096
max_task_seconds = 600
"#;

fn parse(text: &str) -> Result<Manifest, ManifestError> {
    Manifest::parse(text, "tools.toml")
}

#[test]
fn the_documented_example_reads_with_its_defaults() {
    let m = parse(EXAMPLE).unwrap();
    let [report, deploy, countdown] = &m.entries[..] else {
        panic!("three entries");
    };
    assert_eq!(report.name, "monthly_report");
    assert_eq!(report.title.as_deref(), Some("Monthly report"));
    assert_eq!(report.policy, Policy::Optional);
    assert_eq!(report.limits.step_timeout, Duration::from_secs(300));
    assert_eq!(report.limits.max_answer_bytes, 256 * 1024);
    assert_eq!(report.limits.max_retries, 4);
    assert_eq!(report.limits.max_task_wall, None);
    assert!(!report.limits.pass_tenant);
    assert_eq!(
        report.input_schema["properties"]["month"]["pattern"],
        json!("^[0-9]{4}-[0-9]{2}$")
    );
    assert_eq!(
        report.target,
        TargetKind::Lambda("arn:aws:lambda:eu-west-1:123456789012:function:report".into())
    );
    assert_eq!(deploy.policy, Policy::TaskOnly);
    assert_eq!(deploy.limits.step_timeout, Duration::from_secs(60));
    assert!(deploy.limits.pass_tenant);
    assert_eq!(
        deploy.target,
        TargetKind::Http {
            url: "https://deploy.example.com/step".into(),
            secret: Some(HttpSecret {
                header: "X-Api-Key".into(),
                env: Some("DEPLOY_KEY".into()),
                arn: None,
            }),
            sigv4: None,
        }
    );
    assert_eq!(
        countdown.policy,
        Policy::Optional,
        "task defaults to optional"
    );
    assert_eq!(
        countdown.limits.max_task_wall,
        Some(Duration::from_secs(600))
    );
    assert_eq!(
        countdown.target,
        TargetKind::Command {
            argv: vec!["./countdown.sh".into(), "--fast".into()],
            env: vec!["COUNTDOWN_LOG".into()]
        }
    );
    assert_eq!(
        m.lambda_functions(),
        ["arn:aws:lambda:eu-west-1:123456789012:function:report"]
    );
    assert!(
        parse("").unwrap().entries.is_empty(),
        "an empty manifest declares nothing"
    );
}

/// A TOML or shape error names the line, the entry, the key, and never the value: a token
/// pasted into the wrong key is not printed back.
#[test]
fn a_shape_error_names_line_entry_and_key_but_not_the_value() {
    let text = "[[tool]]\nname = \"first\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\n\
                target = { command = [\"true\"] }\n\n[[tool]]\nname = \"second\"\n\
                description = \"d\"\ninput_schema = { type = \"object\" }\n\
                target = { command = \"sk-live-0123456789\" }\n";
    let e = Manifest::parse(text, "tools.toml").unwrap_err().to_string();
    assert!(
        e.starts_with(
            "tools.toml: tool #2 (second): not a tool manifest at line 11, key target.command: "
        ),
        "{e}"
    );
    assert!(!e.contains("sk-live"), "{e}");
    let e = Manifest::parse("[[tool]]\nname = \"x\"\nsecret_env = 5\n", "m.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("m.toml: tool #1 (x): not a tool manifest at line "),
        "{e}"
    );
}

/// Each broken manifest is refused, and the message names the entry and the problem.
#[test]
fn bad_manifests_are_refused_naming_the_entry() {
    let ok = r#"name = "t"
description = "d"
input_schema = { type = "object" }
target = { command = ["true"] }"#;
    let one = |extra: &str| format!("[[tool]]\n{ok}\n{extra}");
    let cases: Vec<(String, &str)> = vec![
        ("[[tools]]\nname = \"t\"".into(), "unknown field `tools`"),
        (one("colour = \"red\""), "unknown field `colour`"),
        (
            format!("[[tool]]\n{ok}\n[[tool]]\n{ok}"),
            "tool #2 (t): a tool of this name is declared earlier",
        ),
        (
            ok.replace("name = \"t\"", "name = \"a b\"")
                .replace("name", "[[tool]]\nname"),
            "name must be",
        ),
        (
            format!("[[tool]]\n{}", ok.replace("description = \"d\"\n", "")),
            "missing field `description`",
        ),
        (
            one("task = \"sometimes\""),
            "task must be required, optional or forbidden",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace("{ type = \"object\" }", "{ type = \"string\" }")
            ),
            "input_schema must be an object schema",
        ),
        (
            one("step_timeout_seconds = 901"),
            "step_timeout_seconds must be from 1 to 900",
        ),
        (
            one("step_timeout_seconds = 0"),
            "step_timeout_seconds must be from 1 to 900",
        ),
        (
            one("max_answer_bytes = 10"),
            "max_answer_bytes must be from 1024 to 262144",
        ),
        (one("max_retries = 11"), "max_retries must be from 0 to 10"),
        (
            one("protocol = \"mcp-tasks-step/2\""),
            "protocol must be \"mcp-tasks-step/1\" or \"plain\"",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    "{ command = [\"true\"], http = \"https://x\" }"
                )
            ),
            "target must be exactly one of lambda, http, command or step_functions",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace("{ command = [\"true\"] }", "{ }")
            ),
            "target must be exactly one of lambda, http, command or step_functions",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace("{ command = [\"true\"] }", "{ rpc = \"x\" }")
            ),
            "unknown field `rpc`",
        ),
        (
            format!("[[tool]]\n{}", ok.replace("[\"true\"]", "[]")),
            "target.command must be a program and its arguments",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    "{ command = [\"true\"], secret_env = \"K\" }"
                )
            ),
            "a command target takes no header, secret_env or secret_arn",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    "{ command = [\"true\"], env = [\"A-B\"] }"
                )
            ),
            "env names a variable that is not a variable name",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace("{ command = [\"true\"] }", "{ lambda = \"my function\" }")
            ),
            "target.lambda must be a function name or ARN",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    "{ http = \"https://x\", header = \"A\" }"
                )
            ),
            "header needs secret_env or secret_arn",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    "{ http = \"https://x\", secret_arn = \"arn:aws:s3:::bucket\" }"
                )
            ),
            "secret_arn is not a Secrets Manager secret ARN",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    "{ http = \"https://x\", secret_env = \"A=B\" }"
                )
            ),
            "secret_env is not a variable name",
        ),
        (
            format!(
                "[[tool]]\n{}",
                ok.replace(
                    "{ command = [\"true\"] }",
                    &format!("{{ lambda = \"f\", secret_arn = \"{ARN}\" }}")
                )
            ),
            "a lambda target takes no header, secret_env, secret_arn or env",
        ),
        ("not toml at all [".into(), "not a tool manifest"),
    ];
    for (text, says) in cases {
        let err = parse(&text).expect_err(&text).to_string();
        assert!(err.starts_with("tools.toml: "), "{err}");
        assert!(err.contains(says), "{text}\n=> {err}\n(wanted: {says})");
    }
}

/// `poll_seconds` is 1 to 3600 (default 10), and only on a `step_functions` target.
#[test]
fn poll_seconds_is_from_1_to_3600_on_a_workflow_only() {
    let workflow = |extra: &str| {
        format!(
            "[[tool]]\nname = \"w\"\ndescription = \"d\"\ninput_schema = {{ type = \"object\" }}\n\
             target = {{ step_functions = \"arn:aws:states:eu-west-1:123456789012:stateMachine:approve\"{extra} }}\n"
        )
    };
    for bad in [0, 3601] {
        let text = workflow(&format!(", poll_seconds = {bad}"));
        let err = parse(&text).expect_err(&text).to_string();
        assert!(err.starts_with("tools.toml: "), "{err}");
        assert!(err.contains("tool #1 (w)"), "{err}");
        assert!(err.contains("poll_seconds must be from 1 to 3600"), "{err}");
    }
    for (extra, want) in [
        ("", 10),
        (", poll_seconds = 1", 1),
        (", poll_seconds = 3600", 3600),
    ] {
        let m = parse(&workflow(extra)).unwrap();
        match &m.entries[0].target {
            TargetKind::StepFunctions { poll, .. } => {
                assert_eq!(*poll, Duration::from_secs(want), "{extra}")
            }
            other => panic!("{other:?}"),
        }
    }
    let text = "[[tool]]\nname = \"h\"\ndescription = \"d\"\ninput_schema = { type = \"object\" }\n\
                target = { http = \"https://x\", poll_seconds = 5 }\n";
    let err = parse(text).expect_err(text).to_string();
    assert!(
        err.contains("poll_seconds is for a step_functions target"),
        "{err}"
    );
}

#[test]
fn a_schema_that_does_not_compile_is_refused_when_checked() {
    let m = parse(
        r#"[[tool]]
name = "t"
description = "d"
input_schema = { type = "object", properties = { a = { pattern = "(" } } }
target = { command = ["true"] }"#,
    )
    .unwrap();
    let err = m.check_schemas().unwrap_err().to_string();
    assert!(
        err.starts_with("tools.toml: tool #1 (t): input_schema does not compile"),
        "{err}"
    );
}

struct NoLambda;

#[async_trait::async_trait]
impl LambdaInvoker for NoLambda {
    async fn invoke(
        &self,
        _: &str,
        _: Vec<u8>,
        _: crate::declared::CallLimits,
    ) -> Result<Vec<u8>, crate::declared::TargetError> {
        Err(crate::declared::TargetError::Unreachable)
    }
}

/// What a host cannot run refuses the manifest: commands on Lambda, lambda without a client,
/// http without its secret, plain http off loopback.
#[test]
fn targets_a_host_cannot_run_are_refused() {
    let entry = |target: &str| {
        parse(&format!(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\ninput_schema = {{ type = \"object\" }}\ntarget = {target}"
        ))
        .unwrap()
    };
    let lambda_host = TargetHost {
        allow_commands: false,
        lambda: Some(Arc::new(NoLambda)),
        ..TargetHost::default()
    };
    let local = TargetHost {
        allow_commands: true,
        env: Some(Arc::new(|k: &str| {
            (k == "KEY").then(|| "secret".to_owned())
        })),
        ..TargetHost::default()
    };
    let refused = [
        (
            entry("{ command = [\"true\"] }"),
            &lambda_host,
            "a command target runs only on the local server",
        ),
        (
            entry("{ lambda = \"report\" }"),
            &local,
            "a lambda target needs AWS",
        ),
        (
            entry("{ http = \"https://x.example\", secret_env = \"MISSING\" }"),
            &local,
            "secret_env MISSING is not set",
        ),
        (
            entry(&format!(
                "{{ http = \"https://x.example\", secret_arn = \"{ARN}\" }}"
            )),
            &local,
            "secret_arn is read on AWS only: give secret_env too",
        ),
        (
            entry("{ http = \"http://x.example/step\" }"),
            &local,
            "target.http must be https",
        ),
        (
            entry("{ http = \"https://u:p@x.example/step\" }"),
            &local,
            "must not carry credentials",
        ),
        (
            entry("{ command = [\"./no-such-program\"] }"),
            &local,
            "does not exist",
        ),
    ];
    for (m, host, says) in refused {
        let err = match m.tools(host) {
            Ok(_) => panic!("{says}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("tool #1 (t): "), "{err}");
        assert!(err.contains(says), "{err} (wanted: {says})");
    }
    for ok in [
        "{ http = \"http://127.0.0.1:9/step\" }",
        "{ http = \"http://[::1]:9/step\" }",
        "{ http = \"http://localhost:9/step\" }",
        "{ http = \"https://x.example\", secret_env = \"KEY\" }",
        "{ command = [\"true\"] }",
    ] {
        assert_eq!(entry(ok).tools(&local).unwrap().len(), 1, "{ok}");
    }
    // Deployed, the fetched secret wins over the variable; locally the variable is read.
    let both =
        format!("{{ http = \"https://x.example\", secret_env = \"KEY\", secret_arn = \"{ARN}\" }}");
    let aws = TargetHost {
        secrets: Some(crate::declared::LazySecrets::fixed(HashMap::from([(
            ARN.to_owned(),
            "from-secrets".to_owned(),
        )]))),
        ..lambda_host.clone()
    };
    assert_eq!(entry(&both).tools(&aws).unwrap().len(), 1);
    assert_eq!(entry(&both).tools(&local).unwrap().len(), 1);
    assert_eq!(entry(&both).secret_arns(), [ARN]);
    assert_eq!(
        entry("{ lambda = \"report\" }")
            .tools(&lambda_host)
            .unwrap()
            .len(),
        1
    );
}

/// `sigv4` names a service (checked), on an http target only, and needs a host that can sign.
#[test]
fn sigv4_is_a_service_name_on_an_http_target_of_a_host_that_signs() {
    let with = |target: &str| {
        parse(&format!(
            "[[tool]]\nname = \"api\"\ndescription = \"d\"\ninput_schema = {{ type = \"object\" }}\ntarget = {target}"
        ))
    };
    let m = with("{ http = \"https://x.execute-api.eu-west-1.amazonaws.com/prod\", sigv4 = \"execute-api\" }")
        .unwrap();
    assert!(matches!(
        &m.entries[0].target,
        TargetKind::Http { sigv4: Some(s), .. } if s == "execute-api"
    ));
    for (target, says) in [
        (
            "{ http = \"https://x\", sigv4 = \"\" }",
            "sigv4 must be an AWS service name",
        ),
        (
            "{ http = \"https://x\", sigv4 = \"Execute API\" }",
            "sigv4 must be an AWS service name",
        ),
        ("{ http = \"https://x\", sigv4 = 3 }", "invalid type"),
        (
            "{ lambda = \"f\", sigv4 = \"lambda\" }",
            "sigv4 signs the requests of an http target only",
        ),
        (
            "{ command = [\"true\"], sigv4 = \"lambda\" }",
            "sigv4 signs the requests of an http target only",
        ),
    ] {
        let err = with(target).expect_err(target).to_string();
        assert!(err.contains(says), "{target} => {err} (wanted: {says})");
        if !says.starts_with("invalid") {
            assert!(err.contains("tool #1 (api)"), "{err}");
        }
    }
    // A host that cannot sign (a build without AWS) refuses it, naming the entry.
    let err = match m.tools(&TargetHost::default()) {
        Ok(_) => panic!("accepted without a signer"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("tool #1 (api)") && err.contains("sigv4 needs AWS credentials"),
        "{err}"
    );
}
