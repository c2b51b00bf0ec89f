//! The step targets the declared-tool tests run: helper processes that print `listening on
//! URL` (the example handler served over HTTP, the emulated Lambda Invoke API, a misbehaving
//! target), and the requests they log.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `NODE`, or `node` on PATH.
pub fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".into())
}

/// A helper process that prints `listening on URL` once ready; killed on drop.
pub struct Helper {
    child: Child,
    /// Its base URL.
    pub url: String,
}

impl Helper {
    /// Starts `python3 script args…` and waits for its URL.
    pub fn python(script: &Path, args: &[&str]) -> Helper {
        Self::python_with(script, args, &[])
    }

    /// [`Helper::python`] with variables `envs` added to its environment.
    pub fn python_with(script: &Path, args: &[&str], envs: &[(&str, &str)]) -> Helper {
        Self::python_in(Path::new("python3"), script, args, envs)
    }

    /// [`Helper::python_with`] run by the Python `interpreter` (a venv's, for its packages).
    pub fn python_in(
        interpreter: &Path,
        script: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Helper {
        let mut child = Command::new(interpreter)
            .arg(script)
            .args(args)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{} is needed for these tests: {e}", interpreter.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.trim().trim_end_matches('/').to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{} did not start", script.display()));
        Helper { child, url }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The requests a target logged (one JSON line each), as the `event`s they carried.
pub fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v.get("event").cloned().unwrap_or(v)
        })
        .collect()
}

/// Waits until `log` holds at least `n` requests.
pub async fn wait_logged(log: &Path, n: usize, within: Duration) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let got = logged(log);
        if got.len() >= n {
            return got;
        }
        assert!(
            start.elapsed() < within,
            "{} requests logged in {within:?}, wanted {n}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The emulated Lambda Invoke API with the example handlers as functions `report` (Python)
/// and `approve` (Node.js).
pub fn lambda_api(log: &std::path::Path) -> Helper {
    let examples = repo().join("examples");
    let report = format!(
        "report=python:{}:handler",
        examples.join("python/report.py").display()
    );
    let approve = format!(
        "approve=node:{}",
        examples.join("node/approve.mjs").display()
    );
    let resize = format!(
        "image-resize=python:{}:handler",
        examples.join("plain/resize.py").display()
    );
    Helper::python(
        &repo().join("tests/targets/lambda_api.py"),
        &[
            "--function",
            &report,
            "--function",
            &approve,
            "--function",
            &resize,
            "--log",
            &log.display().to_string(),
            "--node",
            &node(),
        ],
    )
}

/// What the server needs to reach the emulated Invoke API with the AWS SDK.
pub fn lambda_env(url: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL_LAMBDA", url),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec()
}
