//! Cold starts of the `mcp` function next to the floor, side by side in one harness: the release
//! `mcp` binary and the `minimal` example of functions/mcp (a `lambda_http` function built like
//! `mcp`'s main that answers every request with a fixed JSON body: what any Rust `lambda_http`
//! function costs), each spawned alone under a fresh emulated Lambda Runtime API
//! (tests/support_aws), interleaved: minimal, mcp, minimal, mcp, …
//!
//! Per cold start it measures
//! - **init**: spawn → the first `/invocation/next` (Lambda's "Init Duration");
//! - **first answer**: the first invocation, an API Gateway REST proxy event carrying a
//!   `server/discover` POST (queued once init is done), → its response;
//! - **warm**: [`WARM`] more such invocations, one after the other;
//!
//! then kills the process. The invocation times include the emulated Runtime API's own round
//! trip (the harness runs in the dev profile), the same for every row: the warm median is
//! mostly that. It prints one `COLD START` line per binary with the medians (and the
//! ratios mcp/minimal), and a `BINARY SIZES` line with the release sizes of the four functions
//! and the minimal example (x86_64: the host's target; the deployed arm64 ones differ).
//!
//! A benchmark, run by hand (`#[ignore]`d; no emulator needed: `server/discover` touches
//! neither DynamoDB nor SQS, and the functions' AWS endpoint is an unused loopback port). The
//! test itself builds in the dev profile; it builds the release binaries itself, once
//! (`cargo build --release -p mcp-tasks-mcp -p mcp-tasks-tasks -p mcp-tasks-worker
//! -p mcp-tasks-sweep --bins --example minimal`: the functions' own features, as deployed).
//! `COLD_STARTS` sets the number of cold starts per binary (10). `COLD_START_JWT=1` adds a third
//! row, `mcp+jwt`: the mcp function as deployed with `AuthMode=jwt` (the issuer and its JWKS
//! URL unreachable dummies: `server/discover` without a token is refused, 401, before any key
//! is fetched), interleaved after the other two:
//!
//! ```text
//! COLD_STARTS=10 cargo test -p mcp-tasks --all-features --test cold_start -- --ignored --nocapture
//! ```
//!
//! `COLD_START_BASELINE=/path/to/mcp` adds a row `mcp-baseline`: another build of the mcp
//! function (copy `target/release/mcp` aside before a change), for a before/after in one run.
//! `COLD_START_WORKER=1` adds the worker's init (`worker`, and `worker+lambda-targets` with a
//! manifest of declared tools on Lambda targets), and `COLD_START_WORKER_BASELINE=/path/to/worker`
//! another build of it.
//!
//! `COLD_START_SECRET=1` adds a row `mcp+secret`: the mcp function as the template deploys it
//! (`STATE_KEY_SECRET_ARN` set, no key in the environment), with a stand-in Secrets Manager on
//! loopback (tests/support_aws/secrets.rs) over plain HTTP that answers
//! `COLD_START_SECRET_DELAY_MS` (0) after a request (25: an in-region round trip over a fresh
//! connection). The key is read at the first request that seals or opens a `requestState`,
//! never at init, so the stand-in must receive no request during the run (checked).
//! `COLD_START_SECRET_MANIFEST=1` gives that row a manifest too (`TOOLS_MANIFEST`): an `http`
//! target whose header comes from a `secret_arn` and a `lambda` target, both granted, whose
//! secret is read at a step's first need, not at init. With `COLD_START_BASELINE`, the row
//! `mcp-baseline+secret` runs the other build with the same environment:
//!
//! ```text
//! COLD_START_SECRET=1 COLD_START_SECRET_DELAY_MS=25 COLD_STARTS=20 \
//!   COLD_START_BASELINE=/path/to/old/mcp cargo test -p mcp-tasks --all-features \
//!   --test cold_start -- --ignored --nocapture
//! ```

#[path = "../shared/tests/common/mod.rs"]
mod common;
mod support;
mod support_aws;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support_aws::Solo;

/// Warm invocations after each first answer.
const WARM: usize = 5;

/// Cold starts per binary unless `COLD_STARTS` says otherwise.
const DEFAULT_COLD_STARTS: usize = 10;

/// The functions' packages, built together as deployed (each with its own features).
const PACKAGES: [&str; 4] = [
    "mcp-tasks-mcp",
    "mcp-tasks-tasks",
    "mcp-tasks-worker",
    "mcp-tasks-sweep",
];

/// The environment of both binaries: what Lambda sets (a 128 MB function, the template's JSON
/// log format) and what the mcp function's configuration requires (`Config::from_env`).
/// The minimal function reads none of the latter.
const ENV: &[(&str, &str)] = &[
    ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"),
    ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
    ("AWS_LAMBDA_LOG_STREAM_NAME", "local/[$LATEST]0"),
    ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
    ("AWS_LAMBDA_LOG_LEVEL", "INFO"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_SESSION_TOKEN", "test"),
    ("LAMBDA_TASK_ROOT", "/var/task"),
    ("TZ", ":UTC"),
    // Never reached: server/discover makes no AWS call.
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
    ("TABLE_NAME", "cold-start"),
    ("QUEUE_URL", "http://127.0.0.1:1/000000000000/work"),
    ("STATE_KEY", "a-cold-start-bench-key-of-32-characters"),
    ("AUTH_MODE", "none"),
    ("TOOLS", "builtin"),
    ("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true"),
];

/// The function's timeout (the buffered mcp function's in template.yaml).
const TIMEOUT: Duration = Duration::from_secs(30);

/// What one binary measured over all its cold starts.
#[derive(Default)]
struct Samples {
    init: Vec<Duration>,
    first: Vec<Duration>,
    warm: Vec<Duration>,
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// A REST API proxy event (events/mcp-tools-list.json, as API Gateway delivers it) carrying a
/// 2026-07-28 `server/discover` POST.
fn discover_event() -> Vec<u8> {
    let mut event: Value =
        serde_json::from_str(include_str!("../events/mcp-tools-list.json")).unwrap();
    let body = support::Client::new("http://unused").body("server/discover", json!({}));
    event["headers"]["Mcp-Method"] = json!("server/discover");
    event["multiValueHeaders"]["Mcp-Method"] = json!(["server/discover"]);
    event["body"] = json!(body.to_string());
    serde_json::to_vec(&event).unwrap()
}

/// What the `mcp+jwt` row adds to [`ENV`] (later values win): bearer-token auth, as deployed
/// with `AuthMode=jwt`, against an issuer nobody asks (no request carries a token).
const JWT_ENV: &[(&str, &str)] = &[
    ("AUTH_MODE", "jwt"),
    ("AUTH_ISSUER", "https://issuer.invalid"),
    ("AUTH_AUDIENCE", "https://mcp.invalid/mcp"),
    ("AUTH_JWKS_URL", "https://127.0.0.1:1/jwks.json"),
];

/// What the worker rows add to [`ENV`].
const WORKER_ENV: &[(&str, &str)] = &[("MAX_RECEIVES", "5")];

/// [`WORKER_ENV`] with two `lambda` targets granted (the manifest, `TOOLS_MANIFEST`, is written
/// by the test).
const WORKER_LAMBDA_ENV: &[(&str, &str)] = &[
    ("MAX_RECEIVES", "5"),
    (
        "TOOL_TARGET_FUNCTIONS",
        "arn:aws:lambda:us-east-1:000000000000:function:report,arn:aws:lambda:us-east-1:000000000000:function:approve",
    ),
];

/// The manifest of the `worker+lambda-targets` row.
const LAMBDA_TOOLS: &str = r#"
[[tool]]
name = "report"
description = "Builds a report."
input_schema = { type = "object" }
target = { lambda = "report" }

[[tool]]
name = "approve"
description = "Asks, then deploys."
input_schema = { type = "object" }
target = { lambda = "approve" }
"#;

/// The manifest of the `mcp+secret` row with `COLD_START_SECRET_MANIFEST=1`.
const SECRET_TOOLS: &str = r#"
[[tool]]
name = "report_http"
description = "Builds a report over HTTPS."
input_schema = { type = "object" }
target = { http = "https://report.example.com/step", secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:report-key-AbCdEf" }

[[tool]]
name = "report"
description = "Builds a report."
input_schema = { type = "object" }
target = { lambda = "report" }
"#;

/// What the `mcp+secret` row adds with [`SECRET_TOOLS`]: its grants.
const SECRET_MANIFEST_ENV: &[(&str, &str)] = &[
    (
        "TOOL_SECRET_ARNS",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:report-key-AbCdEf",
    ),
    (
        "TOOL_TARGET_FUNCTIONS",
        "arn:aws:lambda:us-east-1:000000000000:function:report",
    ),
];

/// One binary under test.
struct Target {
    /// The row's name (also the function's name).
    name: &'static str,
    exe: PathBuf,
    /// Set after [`ENV`].
    env: &'static [(&'static str, &'static str)],
    /// The status `server/discover` answers with (200, or 401 without a token); `None`: a
    /// function that takes no HTTP event (the worker), measured to its init only.
    status: Option<u16>,
}

/// One invocation with `event`: its time, after checking that it is the expected answer (with
/// 200, a JSON-RPC result).
async fn invoke(solo: &Solo, event: &[u8], status: u16) -> Duration {
    let t = Instant::now();
    let out = solo.api.invoke(event.to_vec(), TIMEOUT).await;
    let took = t.elapsed();
    let out = out.unwrap_or_else(|e| panic!("{e}\n{}", solo.logs()));
    let proxy: Value = serde_json::from_slice(&out).expect("a proxy response");
    assert_eq!(proxy["statusCode"], status, "{proxy}");
    if status == 200 {
        let answer: Value =
            serde_json::from_str(proxy["body"].as_str().expect("a text body")).expect("JSON");
        assert!(answer["result"].is_object(), "{answer}");
    }
    took
}

/// One cold start of `target`: init, first answer, [`WARM`] warm answers; then the kill.
async fn cold_start(target: &Target, event: &[u8], into: &mut Samples) {
    let group = format!("/aws/lambda/{}", target.name);
    let mut env = ENV.to_vec();
    env.extend(target.env.iter().copied());
    env.extend([
        ("AWS_LAMBDA_FUNCTION_NAME", target.name),
        ("AWS_LAMBDA_LOG_GROUP_NAME", group.as_str()),
    ]);
    let solo = Solo::spawn(target.name, &target.exe, &env).await;
    let init = solo.init(TIMEOUT).await.unwrap_or_else(|e| panic!("{e}"));
    into.init.push(init);
    let Some(status) = target.status else {
        return;
    };
    into.first.push(invoke(&solo, event, status).await);
    for _ in 0..WARM {
        into.warm.push(invoke(&solo, event, status).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark, run by hand: see the module's doc"]
async fn cold_start_mcp_next_to_minimal() {
    let n: usize = std::env::var("COLD_STARTS")
        .ok()
        .map(|v| v.parse().expect("COLD_STARTS: a whole number"))
        .unwrap_or(DEFAULT_COLD_STARTS)
        .max(1);
    let started = Instant::now();
    let bins = tokio::task::spawn_blocking(|| {
        let mut args = vec!["build", "--release"];
        for p in PACKAGES {
            args.extend(["-p", p]);
        }
        args.extend(["--bins", "--example", "minimal"]);
        support_aws::cargo_build(&args)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    let exe = |name: &str| {
        bins.get(name)
            .cloned()
            .unwrap_or_else(|| panic!("cargo build reported no `{name}` executable"))
    };
    eprintln!(
        "cold_start: release binaries ready in {:.1?}",
        started.elapsed()
    );

    let event = discover_event();
    let mut targets = vec![
        Target {
            name: "minimal",
            exe: exe("minimal"),
            env: &[],
            status: Some(200),
        },
        Target {
            name: "mcp",
            exe: exe("mcp"),
            env: &[],
            status: Some(200),
        },
    ];
    if std::env::var("COLD_START_JWT").is_ok_and(|v| v == "1") {
        targets.push(Target {
            name: "mcp+jwt",
            exe: exe("mcp"),
            env: JWT_ENV,
            status: Some(401),
        });
    }
    // `COLD_START_BASELINE=/path/to/mcp`: another build of the mcp function (an older
    // commit's) as a row of its own, for a before/after in one run.
    let baseline = std::env::var_os("COLD_START_BASELINE").map(PathBuf::from);
    if let Some(exe) = baseline {
        assert!(
            exe.is_file(),
            "COLD_START_BASELINE: {} is no file",
            exe.display()
        );
        targets.push(Target {
            name: "mcp-baseline",
            exe,
            env: &[],
            status: Some(200),
        });
    }
    // `COLD_START_WORKER=1`: the worker's init too (spawn → first `/invocation/next`), alone
    // and with a manifest of `lambda` targets (its Lambda client is then set up at init); and
    // `COLD_START_WORKER_BASELINE=/path/to/worker`, another build of it, for a before/after.
    let manifest = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cold-start-tools.toml");
    if std::env::var("COLD_START_WORKER").is_ok_and(|v| v == "1") {
        std::fs::write(&manifest, LAMBDA_TOOLS).unwrap();
        // Lives as long as the test: the rows' environments are `'static`.
        let with_manifest: &'static [(&'static str, &'static str)] = Box::leak(
            [
                WORKER_LAMBDA_ENV,
                &[("TOOLS_MANIFEST", &*manifest.display().to_string().leak())],
            ]
            .concat()
            .into_boxed_slice(),
        );
        targets.push(Target {
            name: "worker",
            exe: exe("worker"),
            env: WORKER_ENV,
            status: None,
        });
        targets.push(Target {
            name: "worker+lambda-targets",
            exe: exe("worker"),
            env: with_manifest,
            status: None,
        });
        if let Some(exe) = std::env::var_os("COLD_START_WORKER_BASELINE").map(PathBuf::from) {
            targets.push(Target {
                name: "worker-baseline",
                exe,
                env: WORKER_ENV,
                status: None,
            });
        }
    }
    let delay = std::env::var("COLD_START_SECRET_DELAY_MS")
        .ok()
        .map(|v| {
            v.parse()
                .expect("COLD_START_SECRET_DELAY_MS: a whole number")
        })
        .unwrap_or(0);
    let secrets = support_aws::SecretsStandIn::start_after(
        support_aws::SecretAnswer::Value("a-cold-start-bench-key-from-secrets-manager".into()),
        Duration::from_millis(delay),
    )
    .await;
    let secret_rows = std::env::var("COLD_START_SECRET").is_ok_and(|v| v == "1");
    if secret_rows {
        // The key's secret instead of the key (an empty STATE_KEY counts as unset).
        let mut env: Vec<(&'static str, &'static str)> = vec![
            ("STATE_KEY", ""),
            (
                "STATE_KEY_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:cold-start-AbCdEf",
            ),
            (
                "AWS_ENDPOINT_URL_SECRETS_MANAGER",
                Box::leak(secrets.url.clone().into_boxed_str()),
            ),
        ];
        if std::env::var("COLD_START_SECRET_MANIFEST").is_ok_and(|v| v == "1") {
            let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cold-start-secret.toml");
            std::fs::write(&path, SECRET_TOOLS).unwrap();
            env.extend(SECRET_MANIFEST_ENV);
            env.push(("TOOLS_MANIFEST", path.display().to_string().leak()));
        }
        let env: &'static [(&'static str, &'static str)] = Box::leak(env.into_boxed_slice());
        targets.push(Target {
            name: "mcp+secret",
            exe: exe("mcp"),
            env,
            status: Some(200),
        });
        if let Some(exe) = std::env::var_os("COLD_START_BASELINE").map(PathBuf::from) {
            targets.push(Target {
                name: "mcp-baseline+secret",
                exe,
                env,
                status: Some(200),
            });
        }
    }
    let mut samples: Vec<Samples> = targets.iter().map(|_| Samples::default()).collect();
    for _ in 0..n {
        for (target, into) in targets.iter().zip(&mut samples) {
            cold_start(target, &event, into).await;
        }
    }

    let fetched = secrets.requests.lock().unwrap().len();
    println!(
        "SECRETS MANAGER: {fetched} requests received during the run (stand-in answering after \
         {delay} ms)"
    );
    let minimal = &samples[0];
    for (target, s) in targets.iter().zip(&samples) {
        let vs = |of: fn(&Samples) -> &Vec<Duration>| match target.name {
            "minimal" => String::new(),
            _ => format!(
                " ({:.1}× minimal)",
                median(of(s)).as_secs_f64() / median(of(minimal)).as_secs_f64().max(1e-9)
            ),
        };
        let (min, max) = (s.init.iter().min().unwrap(), s.init.iter().max().unwrap());
        if target.status.is_none() {
            println!(
                "COLD START {}: init median {}{} [min {}, max {}] | {n} cold starts",
                target.name,
                ms(median(&s.init)),
                vs(|s| &s.init),
                ms(*min),
                ms(*max),
            );
            continue;
        }
        println!(
            "COLD START {}: init median {}{} [min {}, max {}] | first answer median {}{} | \
             warm median {}{} | cold total (init + first answer) {} | {n} cold starts, {} warm",
            target.name,
            ms(median(&s.init)),
            vs(|s| &s.init),
            ms(*min),
            ms(*max),
            ms(median(&s.first)),
            vs(|s| &s.first),
            ms(median(&s.warm)),
            vs(|s| &s.warm),
            ms(median(&s.init) + median(&s.first)),
            s.warm.len(),
        );
    }

    let sizes: Vec<String> = ["mcp", "tasks", "worker", "sweep", "minimal"]
        .into_iter()
        .map(|name| {
            let bytes = std::fs::metadata(exe(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .len();
            format!("{name}={bytes} B ({:.2} MB)", bytes as f64 / 1e6)
        })
        .collect();
    println!(
        "BINARY SIZES [release, {}-{}]: {}",
        std::env::consts::ARCH,
        std::env::consts::OS,
        sizes.join(" ")
    );
}
