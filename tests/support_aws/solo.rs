//! [`Solo`]: one function binary alone under its own fresh Runtime API (a cold start).

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::runtime::{RuntimeApi, pipe_lines};

/// One function binary alone under its own fresh Runtime API, started with exactly the given
/// environment (plus `AWS_LAMBDA_RUNTIME_API`): a cold start, timed from the spawn. The
/// process is killed on drop.
pub struct Solo {
    pub api: Arc<RuntimeApi>,
    child: Child,
    server: JoinHandle<()>,
    log: Arc<Mutex<String>>,
}

impl Solo {
    /// Starts the Runtime API, then spawns `exe` (the spawn is the start of its init).
    pub async fn spawn(name: &'static str, exe: &std::path::Path, env: &[(&str, &str)]) -> Solo {
        let (api, server) = RuntimeApi::start(name).await;
        let mut cmd = Command::new(exe);
        cmd.env_clear()
            .envs(env.iter().copied())
            .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let log = Arc::new(Mutex::new(String::new()));
        *api.spawned.lock().unwrap() = Some(Instant::now());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", exe.display()));
        pipe_lines(name, child.stdout.take().unwrap(), log.clone(), None);
        pipe_lines(
            name,
            child.stderr.take().unwrap(),
            log.clone(),
            Some(api.clone()),
        );
        Solo {
            api,
            child,
            server,
            log,
        }
    }

    /// Waits until the function asks for its first invocation; returns its init duration
    /// (spawn → first `/invocation/next`, as the Runtime API saw it).
    pub async fn init(&self, within: Duration) -> Result<Duration, String> {
        let until = tokio::time::Instant::now() + within;
        loop {
            if let Some(d) = self.api.init_duration() {
                return Ok(d);
            }
            if let Some(why) = self.api.dead.lock().unwrap().clone() {
                return Err(format!("{}: {why}\n{}", self.api.name, self.logs()));
            }
            // `notify_one` keeps its wake-up for a waiter still to come: none is lost between
            // the checks above and this wait.
            let woken = tokio::time::timeout_at(until, self.api.init_or_death.notified());
            if woken.await.is_err() {
                return Err(format!(
                    "{}: no /invocation/next within {within:?}\n{}",
                    self.api.name,
                    self.logs()
                ));
            }
        }
    }

    /// What the process wrote so far (stdout and stderr, line by line).
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Solo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.server.abort();
    }
}
