//! `mcp-tasks tasks …` and `mcp-tasks dlq …`, black-box: the real binary on the data directory
//! of a real (stopped) server, and — with feature `aws` — on the DynamoDB/SQS emulator.
//!
//! The AWS test needs `DYNAMODB_ENDPOINT`/`AWS_ENDPOINT_URL_DYNAMODB` and
//! `SQS_ENDPOINT`/`AWS_ENDPOINT_URL_SQS`; without them it prints a loud SKIPPED line and
//! passes, unless `REQUIRE_EMULATORS` is set.
//!
//! ```text
//! scripts/aws-emulator.sh start
//! E=$(cat .tools/moto/endpoint) DYNAMODB_ENDPOINT=$E SQS_ENDPOINT=$E REQUIRE_EMULATORS=1 \
//!   cargo test -p mcp-tasks --all-features --test admin
//! ```
//!
//! By subject: the embedded store's data directory (`local.rs`), what the commands refuse
//! (`refusals.rs`), and the AWS backends (`aws.rs`).

#[cfg(feature = "aws")]
#[path = "../../shared/tests/common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "aws")]
mod aws;
mod local;
mod refusals;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

const WITHIN: Duration = Duration::from_secs(20);

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect()
    }

    #[track_caller]
    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "{self:?}");
        self
    }

    /// Exit status `code`, with a one-line message on stderr containing `says`.
    #[track_caller]
    fn fails(self, code: i32, says: &str) -> Self {
        assert_eq!(self.code, code, "{self:?}");
        assert!(self.stderr.contains(says), "wanted {says:?}: {self:?}");
        self
    }
}

/// Runs `mcp-tasks ARGS` with `env` (and nothing of the caller's AWS settings).
fn run_with(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"));
    cmd.args(args).env("NO_COLOR", "1");
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_")
            || [
                "TABLE_NAME",
                "QUEUE_URL",
                "DLQ_URL",
                "DYNAMODB_ENDPOINT",
                "SQS_ENDPOINT",
            ]
            .contains(&k.as_str())
        {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run mcp-tasks");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(args: &[&str]) -> Run {
    run_with(args, &[])
}

/// `args` followed by `--data-dir DIR`.
fn on(dir: &Path, args: &[&str]) -> Run {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--data-dir");
    all.push(dir.to_str().unwrap());
    run(&all)
}

/// SIGTERM, then waits for the server to exit (it releases the store as it goes).
fn stop(mut s: Server) {
    let killed = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let start = Instant::now();
    while !s.exited() {
        assert!(
            start.elapsed() < WITHIN,
            "the server did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `--after` value of a text listing's `next page:` line.
fn next_page(r: &Run) -> Option<String> {
    r.stderr
        .lines()
        .find_map(|l| l.strip_prefix("next page: --after "))
        .map(str::to_owned)
}
