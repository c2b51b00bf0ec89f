//! Invocation deadlines: a past one is the function's deployed timeout, as template.yaml
//! deploys it.

use super::*;

#[test]
fn a_worker_given_a_past_deadline_gets_lambdas_longest() {
    let past = SystemTime::now() - Duration::from_secs(5);
    let d = worker_deadline(past);
    assert!(d > Instant::now() + Duration::from_secs(890), "{d:?}");
    let soon = SystemTime::now() + Duration::from_secs(30);
    assert!(worker_deadline(soon) <= Instant::now() + Duration::from_secs(30));
}

#[test]
fn past_deadlines_are_the_functions_deployed_timeout() {
    let past = SystemTime::now() - Duration::from_secs(10);
    assert!(instant_at(past) <= Instant::now());
    // The local emulated runtime's past deadline: the tasks function gets its 10 s, not none.
    let d = request_deadline(past, Role::Tasks);
    assert!(d > Instant::now() + Duration::from_secs(9), "{d:?}");
    assert!(d <= Instant::now() + Duration::from_secs(10), "{d:?}");
    let soon = SystemTime::now() + Duration::from_secs(3);
    assert!(request_deadline(soon, Role::Tasks) <= Instant::now() + Duration::from_secs(3));
    let future = SystemTime::now() + Duration::from_secs(10);
    assert!(instant_at(future) > Instant::now() + Duration::from_secs(9));
}

/// Each role's fallback timeout is the `Timeout` template.yaml deploys the function with, and
/// the worker's batch is the event source mapping's.
#[test]
fn deployed_timeouts_are_the_templates() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml");
    let text = std::fs::read_to_string(path).expect("template.yaml");
    for (resource, role) in [
        ("McpFunction", Role::Mcp),
        ("TasksFunction", Role::Tasks),
        ("WorkerFunction", Role::Worker),
        ("SweepFunction", Role::Sweep),
    ] {
        let head = format!("\n  {resource}:\n");
        let block = &text[text.find(&head).expect(resource) + head.len()..];
        let line = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("Timeout:"))
            .unwrap_or_else(|| panic!("{resource} has a Timeout"));
        let secs: u64 = line.split('#').next().unwrap().trim().parse().unwrap();
        assert_eq!(
            role.deployed_timeout(),
            Duration::from_secs(secs),
            "{resource}"
        );
    }
    let batch = format!("BatchSize: {}\n", super::worker::BATCH_SIZE);
    assert!(text.contains(&batch), "the event source mapping's {batch}");
}
