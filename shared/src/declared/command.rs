//! The `command` target: one process per step, never through a shell, on the local server only.
//! The request goes to its stdin, the answer comes from its stdout; its stderr goes to the log.
//! The process runs in a process group of its own, which is killed when the step ends for any
//! reason (an answer, a timeout, a cancel, the worker's deadline); then every process still
//! carrying the step's mark in its environment is killed too ([`leftovers`]: a grandchild that
//! left the group with `setsid()`), and a server starting kills what its steps left when it
//! was killed. The stderr is read in lines of bounded length and logged escaped ([`stderr`]).

use std::path::PathBuf;
use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::target::{CallLimits, Target, TargetError, TargetHost};

pub mod leftovers;
pub mod stderr;

/// Variables every command gets from the server's environment (when set); the manifest entry's
/// `env` adds to them. Nothing a client sends is ever among them.
const BASE_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// A program run once per step.
pub struct CommandTarget {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: Option<PathBuf>,
    /// The scope of the marks of its steps' processes ([`leftovers`]).
    scope: String,
    /// For the log.
    label: String,
}

impl CommandTarget {
    /// The target for `argv` with the variables `env` names: a program given with a `/` is
    /// taken relative to the manifest's directory; a bare name is looked up on `PATH`.
    pub fn new(argv: &[String], env: &[String], host: &TargetHost) -> Result<Self, String> {
        let (program, args) = argv.split_first().ok_or("target.command is empty")?;
        let mut path = PathBuf::from(program);
        if program.contains('/')
            && path.is_relative()
            && let Some(base) = &host.base_dir
        {
            path = base.join(path);
        }
        if program.contains('/') && !path.is_file() {
            return Err(format!(
                "target.command's program {} does not exist",
                path.display()
            ));
        }
        let env = BASE_ENV
            .iter()
            .map(|s| s.to_string())
            .chain(env.iter().cloned())
            .filter_map(|k| host.var(&k).map(|v| (k, v)))
            .collect();
        Ok(Self {
            label: program.clone(),
            program: path,
            args: args.to_vec(),
            env,
            dir: host.base_dir.clone(),
            scope: host
                .step_scope
                .clone()
                .unwrap_or_else(|| format!("pid{}", std::process::id())),
        })
    }
}

/// Kills the step's process group when dropped, then (away from the async threads) every
/// process left with the step's mark.
struct Group {
    pgid: Option<i32>,
    mark: String,
}

impl Drop for Group {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: kill(2) with a negative pid signals the process group; no memory is
            // touched. An already-empty group answers ESRCH, which is fine.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let mark = std::mem::take(&mut self.mark);
        let sweep = move || {
            let n = leftovers::kill_step(&mark);
            if n > 0 {
                tracing::info!(
                    killed = n,
                    "declared tool: processes the step left outside its group were killed"
                );
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(sweep)),
            Err(_) => sweep(),
        }
    }
}

#[async_trait]
impl Target for CommandTarget {
    async fn call(&self, request: Vec<u8>, limits: CallLimits) -> Result<Vec<u8>, TargetError> {
        let mark = leftovers::step_mark(&self.scope);
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(leftovers::STEP_VAR, &mark)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            tracing::warn!(program = %self.label, error = %e, "declared tool: the command could not be started");
            TargetError::NotStarted
        })?;
        let _group = Group {
            pgid: child.id().and_then(|p| i32::try_from(p).ok()),
            mark,
        };
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(TargetError::NotStarted);
        };
        let write = async move {
            // A program that exits without reading its input is not an error here: its exit
            // status and output say how it went.
            let _ = stdin.write_all(&request).await;
            drop(stdin);
        };
        let max = limits.max_answer_bytes;
        let read = async move {
            let mut out = Vec::new();
            let mut limited = stdout.take(max as u64 + 1);
            let read = limited.read_to_end(&mut out).await;
            (read.is_ok(), out)
        };
        let label = self.label.clone();
        let log = async move { stderr::log(stderr, &label).await };
        // The log drains stderr on its own, so that a program writing much to it never blocks;
        // it ends when the group is killed or exits (its stderr closes).
        tokio::spawn(log);
        let ((), (read_ok, out)) = tokio::join!(write, read);
        if out.len() > max {
            return Err(TargetError::TooLarge(max));
        }
        let status = child.wait().await.map_err(|_| TargetError::Exited(None))?;
        if !status.success() {
            return Err(TargetError::Exited(status.code()));
        }
        if !read_ok {
            return Err(TargetError::Exited(status.code()));
        }
        Ok(out)
    }
}
