//! Building the function binaries, and the executables of any `cargo build`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::Value;

/// Paths of the four function binaries.
pub struct Binaries {
    pub mcp: PathBuf,
    pub tasks: PathBuf,
    pub worker: PathBuf,
    pub sweep: PathBuf,
}

/// Builds the function binaries once per test process (`cargo build --workspace --all-features
/// --bins`, the flags CI's `cargo test --workspace --all-features` uses, so its artifacts are
/// reused) and returns where Cargo put them (whatever `CARGO_TARGET_DIR` says).
pub fn binaries() -> &'static Binaries {
    static BINS: OnceLock<Result<Binaries, String>> = OnceLock::new();
    match BINS.get_or_init(build) {
        Ok(b) => b,
        Err(e) => panic!("{e}"),
    }
}

/// Whether the function binaries are built with the release profile (`AWS_FUNCTIONS_RELEASE=1`,
/// for the cold-start figures of the deployed profile; the default dev profile reuses what
/// `cargo test` already built).
pub fn release_binaries() -> bool {
    std::env::var("AWS_FUNCTIONS_RELEASE").is_ok_and(|v| v == "1")
}

fn build() -> Result<Binaries, String> {
    let started = Instant::now();
    let mut args = vec!["build", "--workspace", "--all-features", "--bins"];
    if release_binaries() {
        args.push("--release");
    }
    let found = cargo_build(&args)?;
    let take = |name: &str| {
        found
            .get(name)
            .cloned()
            .ok_or_else(|| format!("cargo build reported no `{name}` binary"))
    };
    let bins = Binaries {
        mcp: take("mcp")?,
        tasks: take("tasks")?,
        worker: take("worker")?,
        sweep: take("sweep")?,
    };
    eprintln!(
        "aws_functions: function binaries ready in {:.1?}",
        started.elapsed()
    );
    Ok(bins)
}

/// Runs `cargo <args> --message-format=json-render-diagnostics` in the workspace (with
/// whatever `CARGO_TARGET_DIR` says) and returns the executables it reported, by target name
/// (a binary's or an example's). tests/cold_start.rs builds the release binaries with it.
pub fn cargo_build(args: &[&str]) -> Result<HashMap<String, PathBuf>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo {} failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut found = HashMap::new();
    for line in out.stdout.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(name), Some(exe)) = (v["target"]["name"].as_str(), v["executable"].as_str()) {
            found.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    Ok(found)
}
