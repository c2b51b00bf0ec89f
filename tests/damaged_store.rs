//! A data directory whose database was damaged while no server ran (a disk fault, a stray
//! `dd`, a copy cut short): `mcp-tasks serve` and `mcp-tasks tasks list` refuse it with exit
//! status 2 and a message naming the file — never a panic, never a server that starts on it,
//! never an empty or partial listing.
//!
//! Each case damages a copy of one cleanly closed database holding [`TASKS`] unfinished tasks.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tasks in the database every case starts from: enough for trees several pages deep.
const TASKS: usize = 2000;
/// redb's page size.
const PAGE: usize = 4096;
/// redb's header: magic number, flags, region layout, then the two commit slots.
const HEADER: usize = 320;
const MAGIC: usize = 9;
/// How the page damages' names begin.
const PAGE_DAMAGE: &str = "zeros over";

/// What one run of the binary left.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The pristine database (a stopped server's data directory) and the ids of its tasks.
async fn pristine() -> (tempfile::TempDir, Vec<u8>) {
    let dir = support::data_dir();
    support::seed_in_flight(dir.path(), TASKS).await;
    let bytes = std::fs::read(dir.path().join("tasks.redb")).unwrap();
    (dir, bytes)
}

/// A data directory holding `bytes` as its database.
fn data_dir_with(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = support::data_dir();
    let file = dir.path().join("tasks.redb");
    std::fs::write(&file, bytes).unwrap();
    (dir, file)
}

/// Deterministic noise (xorshift), so a failure can be replayed.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// Offsets where `needle` occurs in `hay`.
fn occurrences(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// The ways a cleanly closed database is damaged here, each with its name.
fn damages(pristine: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let overwrite = |at: usize, with: &[u8]| {
        let mut b = pristine.to_vec();
        b[at..at + with.len()].copy_from_slice(with);
        b
    };
    // Pages holding task records and index entries: every task id starts with `tsk_`; the
    // first and last pages naming one, and one in the middle.
    let ids = occurrences(pristine, b"tsk_");
    assert!(ids.len() >= TASKS, "the seeded tasks are not in the file");
    for (what, at) in [
        ("first", ids[0]),
        ("middle", ids[ids.len() / 2]),
        ("last", ids[ids.len() - 1]),
    ] {
        let page = at / PAGE * PAGE;
        out.push((
            format!("{PAGE_DAMAGE} the {what} page naming a task (offset {page})"),
            overwrite(page, &[0; PAGE]),
        ));
    }
    out.push((
        "random bytes over the header".into(),
        overwrite(0, &noise(HEADER, 0x9e37_79b9_7f4a_7c15)),
    ));
    out.push((
        "random bytes over the header after its magic number".into(),
        overwrite(MAGIC, &noise(HEADER - MAGIC, 0x2545_f491_4f6c_dd1d)),
    ));
    out.push((
        "random bytes over the commit slots".into(),
        overwrite(64, &noise(HEADER - 64, 0xd1b5_4a32_d192_ed03)),
    ));
    for (what, len) in [
        ("to half its length", pristine.len() / 2),
        ("to its first page", PAGE),
        ("by one byte", pristine.len() - 1),
        ("to nothing", 0),
    ] {
        out.push((format!("truncated {what}"), pristine[..len].to_vec()));
    }
    out
}

/// `mcp-tasks ARGS`, waited for at most `within`; a process still running then, or that
/// wrote to stdout (a server announcing its address), is killed.
fn run(args: &[&str], data_dir: &Path, within: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcp-tasks");
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let start = Instant::now();
    let serving = args[0] == "serve";
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if start.elapsed() > within || (serving && !out.0.lock().unwrap().is_empty()) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code,
        stdout: out.finish(),
        stderr: err.finish(),
    }
}

/// A pipe read to its end on a thread, readable while it fills.
struct Collected(Arc<Mutex<String>>, std::thread::JoinHandle<()>);

impl Collected {
    fn finish(self) -> String {
        let _ = self.1.join();
        self.0.lock().unwrap().clone()
    }
}

fn collect(r: impl std::io::Read + Send + 'static) -> Collected {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            let mut t = sink.lock().unwrap();
            t.push_str(&line);
            t.push('\n');
        }
    });
    Collected(text, reader)
}

/// Why `r` is not a clean refusal naming `file`, if it is not.
fn not_refused(r: &Run, file: &Path) -> Option<String> {
    let mut why = Vec::new();
    if r.code != Some(2) {
        why.push(format!("exit status {:?}, not 2", r.code));
    }
    if !r.stderr.contains(&file.display().to_string()) {
        why.push("the message does not name the file".into());
    }
    if r.stderr.contains("panicked") {
        why.push("it panicked".into());
    }
    if !r.stdout.is_empty() {
        why.push("it wrote to stdout".into());
    }
    // The first lines say enough (a backtrace may follow them).
    let head: String = r.stderr.lines().take(4).collect::<Vec<_>>().join("\n");
    (!why.is_empty()).then(|| format!("{} (exit {:?}):\n{head}", why.join(", "), r.code))
}

#[tokio::test]
async fn a_damaged_database_is_refused_naming_the_file() {
    let (_pristine_dir, pristine) = pristine().await;
    // The undamaged copy lists every task: the damage, not the copy, is what is refused.
    let (dir, _) = data_dir_with(&pristine);
    let whole = run(
        &["tasks", "list", "--limit", "1000"],
        dir.path(),
        Duration::from_secs(60),
    );
    assert_eq!(whole.code, Some(0), "{whole:?}");
    assert_eq!(whole.stdout.lines().count(), 1000, "{}", whole.stderr);

    let every_task = listing(dir.path()).expect("the pristine copy lists");

    let mut failures = Vec::new();
    let mut pages_refused = 0;
    for (damage, bytes) in damages(&pristine) {
        let (dir, file) = data_dir_with(&bytes);
        // Zeros over a page redb no longer uses (a page freed by a later commit still holds
        // its old bytes, and which pages those are depends on how the seeding's commits were
        // grouped) damage nothing: such a copy must then list every task as the pristine one
        // does. The others must be refused.
        if damage.starts_with(PAGE_DAMAGE) && listing(dir.path()).as_ref() == Some(&every_task) {
            continue;
        }
        pages_refused += usize::from(damage.starts_with(PAGE_DAMAGE));
        let list = run(&["tasks", "list"], dir.path(), Duration::from_secs(60));
        if let Some(why) = not_refused(&list, &file) {
            failures.push(format!("{damage}: tasks list: {why}"));
        }
        let serve = run(
            &["serve", "--listen", "127.0.0.1:0"],
            dir.path(),
            Duration::from_secs(20),
        );
        if let Some(why) = not_refused(&serve, &file) {
            failures.push(format!("{damage}: serve: {why}"));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
    assert!(
        pages_refused > 0,
        "every page damaged held nothing in use: the case tests nothing"
    );
}

/// The whole listing of the tasks in `data_dir`, page after page, or `None` when a page is
/// refused.
fn listing(data_dir: &Path) -> Option<Vec<String>> {
    let mut lines = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["tasks", "list", "--limit", "1000"];
        if let Some(a) = &after {
            args.extend(["--after", a]);
        }
        let page = run(&args, data_dir, Duration::from_secs(60));
        if page.code != Some(0) {
            return None;
        }
        lines.extend(page.stdout.lines().map(str::to_owned));
        match page
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("next page: --after "))
        {
            Some(next) => after = Some(next.trim().to_owned()),
            None => return Some(lines),
        }
    }
}
