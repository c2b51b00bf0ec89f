//! Judging what happened: completed once, exact, never doubled; the suite's verdict.

use mcp_tasks_core::task::{TaskRecord, TaskStatus};

use crate::consumers::Traffic;
use crate::lock;
use crate::rig::Rig;
use crate::tally::expected_result;

/// Checks a finished `tally` task: completed once, with the exact result, its effect run
/// once, no two of its runs overlapping. Returns the problems found.
pub fn judge_completed(
    rig: &Rig,
    t: &TaskRecord,
    key: &str,
    n: u64,
    traffic: &Traffic,
) -> Vec<String> {
    let mut bad = Vec::new();
    if t.status != TaskStatus::Completed {
        bad.push(format!("LOST: status {:?} {:?}", t.status, t.error));
        return bad;
    }
    if t.result.as_ref() != Some(&expected_result(key, n)) {
        bad.push(format!("WRONG result {:?}", t.result));
    }
    let finished = traffic.finished_of(&t.task_id);
    if finished != [TaskStatus::Completed] {
        bad.push(format!("DOUBLED: finished by {finished:?}"));
    }
    let writes = rig.store.terminal_writes(&t.task_id);
    if writes != 1 {
        bad.push(format!("DOUBLED: {writes} terminal writes"));
    }
    rig.entry(key, |e| {
        if e.effects != 1 {
            bad.push(format!("DOUBLED: effect ran {} times", e.effects));
        }
        if e.overlaps != 0 {
            bad.push(format!("DOUBLED: {} overlapping steps", e.overlaps));
        }
        if !bad.is_empty() {
            eprintln!("aws_faults: {}: the tool saw", t.task_id);
            for line in &e.events {
                eprintln!("    {line}");
            }
        }
    });
    if !bad.is_empty() {
        eprintln!("aws_faults: {}: the consumers saw", t.task_id);
        for line in lock(&traffic.log)
            .get(t.task_id.as_str())
            .into_iter()
            .flatten()
        {
            eprintln!("    {line}");
        }
        eprintln!("aws_faults: {}: the store saw", t.task_id);
        for line in rig.store.journal(&t.task_id) {
            eprintln!("    {line}");
        }
    }
    bad
}

/// Fails on an emulator that broke conditional-write atomicity (which would fake doubling),
/// then on any loss or doubling.
pub fn verdict(rig: &Rig, lost: usize, doubled: usize) {
    assert_eq!(
        rig.store.violations(),
        0,
        "the emulator let two conditional writes on one version succeed (EMULATOR VIOLATION \
         above); leave AWS_FAULT_WRITE_LOCK unset to serialize writes per item"
    );
    assert_eq!((lost, doubled), (0, 0), "lost or doubled tasks (see above)");
}

pub fn report(suite: &str, problems: &[(String, Vec<String>)]) -> (usize, usize) {
    let mut lost = 0;
    let mut doubled = 0;
    for (id, bad) in problems {
        for b in bad {
            eprintln!("aws_faults {suite}: {id}: {b}");
        }
        if bad
            .iter()
            .any(|b| b.starts_with("LOST") || b.starts_with("WRONG"))
        {
            lost += 1;
        }
        if bad
            .iter()
            .any(|b| !(b.starts_with("LOST") || b.starts_with("WRONG")))
        {
            doubled += 1;
        }
    }
    (lost, doubled)
}
