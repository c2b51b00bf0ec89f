//! Processes a `command` step leaves behind: found by a mark in their environment, killed.
//!
//! Every step's program gets `MCP_TASKS_STEP=SCOPE/NONCE` ([`STEP_VAR`]) in its environment:
//! `SCOPE` names the server's data directory ([`scope_of`]), `NONCE` the step. A process
//! inherits its parent's environment, so whatever the program starts carries the mark too,
//! including a grandchild that left the step's process group with `setsid()` or by forking
//! twice. When a step ends, its process group is killed and then every process of this user
//! whose environment holds the step's mark ([`kill_step`]); when the server starts, every
//! process holding its data directory's scope ([`kill_scope`]) — what a server killed with
//! SIGKILL left running. What it cannot catch is said in docs/tool-manifest.md ("What a
//! `command` leaves behind").
//!
//! Linux only (`/proc/PID/environ`); elsewhere the process group is all that is killed.

use std::path::Path;

use sha2::{Digest as _, Sha256};

/// The variable that marks a step's processes.
pub const STEP_VAR: &str = "MCP_TASKS_STEP";

/// How many times a scan is repeated while it still finds processes (a process may fork
/// between being found and being killed; each pass kills what the last one missed).
const MAX_PASSES: usize = 5;

/// The scope of the server whose data directory is `dir`: 16 hex digits of the SHA-256 of
/// its canonical path (a directory not made yet: its parent's canonical path and its name, so
/// the scope is the same before the server makes it and after). Two servers never share a
/// data directory (the store's file lock), so never a scope.
pub fn scope_of(dir: &Path) -> String {
    let path = std::fs::canonicalize(dir)
        .ok()
        .or_else(|| {
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            Some(std::fs::canonicalize(parent).ok()?.join(dir.file_name()?))
        })
        .unwrap_or_else(|| dir.to_path_buf());
    let digest = Sha256::digest(path.as_os_str().as_encoded_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh mark's value for one step of `scope`.
pub fn step_mark(scope: &str) -> String {
    format!("{scope}/{}", ulid::Ulid::new())
}

/// Kills every process (but this one) whose environment holds `STEP_VAR=mark`; returns how
/// many were signalled.
pub fn kill_step(mark: &str) -> usize {
    let entry = format!("{STEP_VAR}={mark}");
    kill_marked(|e| e == entry.as_bytes())
}

/// Kills every process (but this one) of any step of `scope`; returns how many were
/// signalled.
pub fn kill_scope(scope: &str) -> usize {
    let prefix = format!("{STEP_VAR}={scope}/");
    kill_marked(|e| e.starts_with(prefix.as_bytes()))
}

/// Kills every process whose environment has an entry `matches` accepts, in passes until one
/// finds nothing (at most [`MAX_PASSES`]).
#[cfg(target_os = "linux")]
fn kill_marked(matches: impl Fn(&[u8]) -> bool) -> usize {
    let me = std::process::id();
    let mut killed = std::collections::HashSet::new();
    for _ in 0..MAX_PASSES {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            break;
        };
        let mut new = 0;
        for pid in dir
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&p| u32::try_from(p) != Ok(me))
        {
            // Another user's process, or one already gone: unreadable, skipped. A process
            // that has exited reads as empty.
            let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if env.split(|&b| b == 0).any(&matches) {
                // SAFETY: kill(2) touches no memory; a pid gone meanwhile answers ESRCH.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
                new += usize::from(killed.insert(pid));
            }
        }
        if new == 0 {
            break;
        }
    }
    killed.len()
}

#[cfg(not(target_os = "linux"))]
fn kill_marked(_: impl Fn(&[u8]) -> bool) -> usize {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn alive(pid: u32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').map_or("", |(_, r)| r).trim_start();
        !stat.is_empty() && !state.starts_with('Z')
    }

    fn marked_sleep(mark: &str) -> std::process::Child {
        Command::new("sleep")
            .arg("30")
            .env(STEP_VAR, mark)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_step_kills_its_marked_processes_only_and_a_start_its_scope() {
        let (a, b) = (scope_of(Path::new("/tmp/a")), scope_of(Path::new("/tmp/b")));
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        let (one, two, other) = (step_mark(&a), step_mark(&a), step_mark(&b));
        let mut p1 = marked_sleep(&one);
        let mut p2 = marked_sleep(&two);
        let mut p3 = marked_sleep(&other);
        // The environment is read once exec has set it up.
        let started = Instant::now();
        let has_mark = |pid: u32| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.windows(STEP_VAR.len())
                .any(|w| w == STEP_VAR.as_bytes())
        };
        while ![&p1, &p2, &p3].iter().all(|p| has_mark(p.id())) {
            assert!(started.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(kill_step(&one), 1);
        p1.wait().unwrap();
        assert!(alive(p2.id()) && alive(p3.id()));
        assert_eq!(kill_scope(&a), 1);
        p2.wait().unwrap();
        assert!(alive(p3.id()));
        assert_eq!(kill_scope(&b), 1);
        p3.wait().unwrap();
    }
}
