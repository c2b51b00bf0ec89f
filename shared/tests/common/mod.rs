//! What the emulator-backed tests share: finding the emulator, and skipping loudly without it.

// Each test target uses its own part of this module.
#![allow(dead_code)]

/// The DynamoDB endpoint variables, in order of preference.
pub const DYNAMODB: [&str; 2] = ["DYNAMODB_ENDPOINT", "AWS_ENDPOINT_URL_DYNAMODB"];
/// The SQS endpoint variables, in order of preference.
pub const SQS: [&str; 2] = ["SQS_ENDPOINT", "AWS_ENDPOINT_URL_SQS"];

/// The first non-empty variable of each group, or `None` after a SKIPPED line on the process's
/// stderr (the test harness captures `eprintln!` of passing tests, and a skip must be seen).
/// With `REQUIRE_EMULATORS` set (to anything but empty or `0`, as CI does) a missing endpoint
/// is a failure instead.
pub fn endpoints<const N: usize>(test: &str, groups: [[&str; 2]; N]) -> Option<[String; N]> {
    let found: Vec<Option<String>> = groups
        .iter()
        .map(|names| {
            names
                .iter()
                .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        })
        .collect();
    if found.iter().all(Option::is_some) {
        return found
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .try_into()
            .ok();
    }
    let wanted = groups.map(|g| g[0]).join(" and ");
    let required = std::env::var("REQUIRE_EMULATORS").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "REQUIRE_EMULATORS is set but {wanted} is not (start one with scripts/aws-emulator.sh \
         start, then set it to $(cat .tools/moto/endpoint))"
    );
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let line = format!(
            "\n*** SKIPPED {test}: needs {wanted} (scripts/aws-emulator.sh start, then set it to \
             $(cat .tools/moto/endpoint)) ***\n"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    });
    None
}

/// An SDK configuration for the emulator at `endpoint`: a fixed region and dummy credentials,
/// so a test never reaches for a real account's configuration or instance metadata.
pub async fn sdk_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(mcp_tasks_core::aws::https_client())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "emulator",
        ))
        .endpoint_url(endpoint)
        .load()
        .await
}

/// A name no earlier run used (tables and queues are never shared between runs).
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// A small deterministic generator (xorshift64*) for fault tests. Seeded from the variable
/// `seed_var` when set (to replay a run), else from the clock; the seed is printed with
/// `label` so any run can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed_var: &str, label: &str) -> Self {
        let seed = std::env::var(seed_var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos() as u64
            });
        println!("{label}: {seed_var}={seed}");
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}
