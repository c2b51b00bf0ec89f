//! What the server did, counted: the same metrics, by the same names, as Prometheus text on the
//! local server (`GET /metrics` on the operators' listener, never the MCP one: see
//! [`crate::handler::metrics_reply`]) and as CloudWatch Embedded Metric Format lines on Lambda (one
//! log line per label set at the end of each invocation: no API call, no added latency).
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `tasks_created` | counter | `tool` | tasks created |
//! | `tasks_finished` | counter | `tool`, `status` | tasks ended `completed`, `failed` or `cancelled` |
//! | `task_start_wait_ms` | timing | `tool` | creation to the first run taking the task |
//! | `job_run_ms` | timing | `tool` | one run of a job, lease taken to lease let go |
//! | `job_handovers` | counter | `tool` | runs that saved and handed the job on (deadline) |
//! | `lease_takeovers` | counter | `tool` | runs that found the previous run dead and took over |
//! | `jobs_deferred` | counter | — | work messages put back because their tenant ran as many jobs as it may |
//! | `store_conflicts` | counter | `op` | conditional writes that lost a race (re-read, decided again) |
//! | `auth_refusals` | counter | `reason` | requests refused by authentication (`missing`, `invalid`, `scope`, `unavailable`) |
//! | `quota_refusals` | counter | `limit` | `tools/call`s refused by a tenant quota |
//! | `sync_calls` | counter | `tool` | tool calls answered synchronously |
//! | `sync_call_ms` | timing | `tool` | their duration |
//! | `tenant_tasks_created` | counter | `tenant` | tasks created, by tenant (opt-in, see below) |
//! | `tenant_tasks_finished` | counter | `tenant`, `status` | tasks ended, by tenant (opt-in) |
//!
//! A timing is exported as a count and a sum: Prometheus `<name>_count` and `<name>_sum` (a
//! summary without quantiles), EMF the metrics `<name>_count` (Count) and `<name>_sum`
//! (Milliseconds); the mean is their ratio. Labels are bounded by construction: `tool` is a
//! registered tool's name (any other name counts as `other`), the rest are fixed words. No
//! metric carries an id, an argument or a result.
//!
//! **The tenant dimension is opt-in and bounded.** Off by default (`--metrics-tenants 0`,
//! `METRICS_TENANTS=0`): no metric names a tenant. Set to N (at most [`MAX_TENANT_LABELS`]),
//! the two `tenant_*` counters are kept beside the others (their own metrics, so dashboards
//! over `tool` are unchanged): the first N tenants a process counts keep their name, every
//! later one counts as `other`. The bound is per process (an invocation environment on
//! Lambda): on CloudWatch each tenant named is a custom metric, so the fleet's total follows
//! the tenants that use it; choose N with that in mind.
//!
//! One process-wide registry ([`global`]): the handler, engine and worker count into it; the
//! hosts export it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

use crate::tenant::Tenant;

/// The metric names (see the module table).
pub mod name {
    /// Tasks created.
    pub const TASKS_CREATED: &str = "tasks_created";
    /// Tasks that reached a terminal status.
    pub const TASKS_FINISHED: &str = "tasks_finished";
    /// Creation to first run, in milliseconds.
    pub const TASK_START_WAIT_MS: &str = "task_start_wait_ms";
    /// One run of a job, in milliseconds.
    pub const JOB_RUN_MS: &str = "job_run_ms";
    /// Runs that handed the job on.
    pub const JOB_HANDOVERS: &str = "job_handovers";
    /// Runs that took over from a dead run.
    pub const LEASE_TAKEOVERS: &str = "lease_takeovers";
    /// Work messages put back to wait for a running place of their tenant.
    pub const JOBS_DEFERRED: &str = "jobs_deferred";
    /// Conditional writes that lost a race.
    pub const STORE_CONFLICTS: &str = "store_conflicts";
    /// Requests refused by authentication.
    pub const AUTH_REFUSALS: &str = "auth_refusals";
    /// Tool calls refused by a quota.
    pub const QUOTA_REFUSALS: &str = "quota_refusals";
    /// Synchronous tool calls.
    pub const SYNC_CALLS: &str = "sync_calls";
    /// Synchronous tool calls' duration, in milliseconds.
    pub const SYNC_CALL_MS: &str = "sync_call_ms";
    /// Tasks created, by tenant (opt-in).
    pub const TENANT_TASKS_CREATED: &str = "tenant_tasks_created";
    /// Tasks that reached a terminal status, by tenant (opt-in).
    pub const TENANT_TASKS_FINISHED: &str = "tenant_tasks_finished";
}

/// Most tenants one process names in the `tenant_*` metrics.
pub const MAX_TENANT_LABELS: usize = 1000;

/// The prefix of every Prometheus name, and the EMF namespace.
pub const NAMESPACE: &str = "mcp_tasks";

/// Most distinct label sets kept; past it new ones are folded into `other` (a bug that
/// labels by something unbounded must not grow memory without end).
const MAX_SERIES: usize = 4096;

type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cell {
    /// Counter value, or the number of timings.
    count: u64,
    /// Sum of the timings (milliseconds); 0 for counters.
    sum: u64,
    timing: bool,
}

/// A registry of counters and timings.
#[derive(Debug, Default)]
pub struct Metrics {
    cells: Mutex<BTreeMap<(&'static str, Labels), Cell>>,
    tenants: Mutex<TenantLabels>,
}

/// The tenants this process names in the `tenant_*` metrics (see the module docs).
#[derive(Debug, Default)]
struct TenantLabels {
    max: usize,
    named: std::collections::BTreeSet<String>,
}

/// The process-wide registry.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(Metrics::default)
}

impl Metrics {
    fn cells(&self) -> std::sync::MutexGuard<'_, BTreeMap<(&'static str, Labels), Cell>> {
        self.cells.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(
        &self,
        name: &'static str,
        labels: &[(&'static str, &str)],
        count: u64,
        sum: u64,
        timing: bool,
    ) {
        let mut key_labels: Labels = labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        let mut cells = self.cells();
        if cells.len() >= MAX_SERIES && !cells.contains_key(&(name, key_labels.clone())) {
            for (_, v) in &mut key_labels {
                "other".clone_into(v);
            }
        }
        let cell = cells.entry((name, key_labels)).or_default();
        cell.count += count;
        cell.sum += sum;
        cell.timing |= timing;
    }

    /// Names up to `max` tenants in the `tenant_*` metrics from now on (0, the default: none,
    /// and the `tenant_*` metrics are not kept). Capped at [`MAX_TENANT_LABELS`].
    pub fn name_tenants(&self, max: usize) {
        let mut t = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        t.max = max.min(MAX_TENANT_LABELS);
    }

    /// The label `tenant` counts under, or `None` when tenants are not counted: its own name
    /// while fewer than the maximum are named (or it is one of them), else `other`. Names are
    /// cut at 256 bytes (a tenant is at most that long where it comes from a token).
    pub fn tenant_label(&self, tenant: &Tenant) -> Option<String> {
        let mut t = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if t.max == 0 {
            return None;
        }
        let mut name = tenant.as_str().to_owned();
        if name.len() > 256 {
            let mut cut = 256;
            while !name.is_char_boundary(cut) {
                cut -= 1;
            }
            name.truncate(cut);
        }
        if t.named.contains(&name) {
            return Some(name);
        }
        if t.named.len() < t.max {
            t.named.insert(name.clone());
            return Some(name);
        }
        Some("other".into())
    }

    /// Adds `n` to a counter.
    pub fn count(&self, name: &'static str, labels: &[(&'static str, &str)], n: u64) {
        self.add(name, labels, n, 0, false);
    }

    /// Records one timing of `ms` milliseconds.
    pub fn time(&self, name: &'static str, labels: &[(&'static str, &str)], ms: u64) {
        self.add(name, labels, 1, ms, true);
    }

    /// The value of a counter (or the number of timings) for exactly these labels.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.cells()
            .iter()
            .find(|((n, l), _)| {
                *n == name
                    && l.len() == labels.len()
                    && l.iter()
                        .zip(labels)
                        .all(|((k, v), (k2, v2))| k == k2 && v == v2)
            })
            .map_or(0, |(_, c)| c.count)
    }

    /// Everything, as Prometheus text exposition format (version 0.0.4).
    pub fn prometheus(&self) -> String {
        let cells = self.cells();
        let mut out = String::new();
        let mut last = "";
        for ((name, labels), cell) in cells.iter() {
            if *name != last {
                let kind = if cell.timing { "summary" } else { "counter" };
                let _ = writeln!(out, "# TYPE {NAMESPACE}_{name} {kind}");
                last = name;
            }
            let labels = prometheus_labels(labels);
            if cell.timing {
                let _ = writeln!(out, "{NAMESPACE}_{name}_count{labels} {}", cell.count);
                let _ = writeln!(out, "{NAMESPACE}_{name}_sum{labels} {}", cell.sum);
            } else {
                let _ = writeln!(out, "{NAMESPACE}_{name}_total{labels} {}", cell.count);
            }
        }
        out
    }

    /// Takes everything counted since the last call as EMF log lines (one per metric and label
    /// set, dimensions `function` and the labels), and resets the registry. `timestamp_ms` is
    /// the lines' time.
    pub fn drain_emf(&self, function: &str, timestamp_ms: u64) -> Vec<String> {
        let cells = std::mem::take(&mut *self.cells());
        let mut lines = Vec::new();
        for ((name, labels), cell) in cells {
            let mut dims: Vec<&str> = vec!["function"];
            dims.extend(labels.iter().map(|(k, _)| *k));
            let mut doc = serde_json::Map::new();
            doc.insert("function".into(), function.into());
            for (k, v) in &labels {
                doc.insert((*k).into(), v.clone().into());
            }
            let metrics = if cell.timing {
                doc.insert(format!("{name}_count"), cell.count.into());
                doc.insert(format!("{name}_sum"), cell.sum.into());
                serde_json::json!([
                    {"Name": format!("{name}_count"), "Unit": "Count"},
                    {"Name": format!("{name}_sum"), "Unit": "Milliseconds"},
                ])
            } else {
                doc.insert(name.into(), cell.count.into());
                serde_json::json!([{"Name": name, "Unit": "Count"}])
            };
            doc.insert(
                "_aws".into(),
                serde_json::json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": NAMESPACE,
                        "Dimensions": [dims],
                        "Metrics": metrics,
                    }],
                }),
            );
            lines.push(serde_json::Value::Object(doc).to_string());
        }
        lines
    }
}

fn prometheus_labels(labels: &Labels) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let mut s = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"");
        for c in v.chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '"' => s.push_str("\\\""),
                '\n' => s.push_str("\\n"),
                c => s.push(c),
            }
        }
        s.push('"');
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_timings_render_as_prometheus_text() {
        let m = Metrics::default();
        m.count(name::TASKS_CREATED, &[("tool", "wait")], 2);
        m.count(name::TASKS_CREATED, &[("tool", "wait")], 1);
        m.count(
            name::TASKS_FINISHED,
            &[("tool", "wait"), ("status", "completed")],
            1,
        );
        m.time(name::JOB_RUN_MS, &[("tool", "wait")], 40);
        m.time(name::JOB_RUN_MS, &[("tool", "wait")], 2);
        m.count(name::AUTH_REFUSALS, &[("reason", "a\"b\\c\nd")], 1);
        let text = m.prometheus();
        for line in [
            "# TYPE mcp_tasks_tasks_created counter",
            "mcp_tasks_tasks_created_total{tool=\"wait\"} 3",
            "mcp_tasks_tasks_finished_total{tool=\"wait\",status=\"completed\"} 1",
            "# TYPE mcp_tasks_job_run_ms summary",
            "mcp_tasks_job_run_ms_count{tool=\"wait\"} 2",
            "mcp_tasks_job_run_ms_sum{tool=\"wait\"} 42",
            "mcp_tasks_auth_refusals_total{reason=\"a\\\"b\\\\c\\nd\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert_eq!(m.get(name::TASKS_CREATED, &[("tool", "wait")]), 3);
        assert_eq!(m.get(name::TASKS_CREATED, &[("tool", "other")]), 0);
    }

    #[test]
    fn emf_lines_carry_their_dimensions_and_values_and_drain() {
        let m = Metrics::default();
        m.count(name::TASKS_CREATED, &[("tool", "wait")], 2);
        m.time(name::SYNC_CALL_MS, &[("tool", "echo")], 7);
        let lines = m.drain_emf("mcp", 1_700_000_000_000);
        assert_eq!(lines.len(), 2);
        let docs: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let created = docs.iter().find(|d| d["tasks_created"] == 2).unwrap();
        assert_eq!(created["function"], "mcp");
        assert_eq!(created["tool"], "wait");
        let cw = &created["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(cw["Namespace"], NAMESPACE);
        assert_eq!(cw["Dimensions"], serde_json::json!([["function", "tool"]]));
        assert_eq!(cw["Metrics"][0]["Name"], "tasks_created");
        assert_eq!(created["_aws"]["Timestamp"], 1_700_000_000_000u64);
        let timing = docs.iter().find(|d| d["tool"] == "echo").unwrap();
        assert_eq!(
            (
                timing["sync_call_ms_count"].as_u64(),
                timing["sync_call_ms_sum"].as_u64()
            ),
            (Some(1), Some(7))
        );
        assert!(m.drain_emf("mcp", 0).is_empty(), "drained");
    }

    #[test]
    fn label_sets_are_bounded() {
        let m = Metrics::default();
        for i in 0..MAX_SERIES + 100 {
            m.count(name::STORE_CONFLICTS, &[("op", &format!("op{i}"))], 1);
        }
        assert_eq!(m.cells().len(), MAX_SERIES + 1);
        assert_eq!(m.get(name::STORE_CONFLICTS, &[("op", "other")]), 100);
    }

    #[test]
    fn tenants_are_named_only_when_asked_and_only_so_many() {
        let m = Metrics::default();
        assert_eq!(m.tenant_label(&"acme".into()), None, "off by default");
        m.name_tenants(2);
        assert_eq!(m.tenant_label(&"acme".into()).as_deref(), Some("acme"));
        assert_eq!(m.tenant_label(&"globex".into()).as_deref(), Some("globex"));
        assert_eq!(
            m.tenant_label(&"initech".into()).as_deref(),
            Some("other"),
            "past the bound"
        );
        assert_eq!(
            m.tenant_label(&"acme".into()).as_deref(),
            Some("acme"),
            "a named one stays named"
        );
        let long = "é".repeat(200);
        m.name_tenants(3);
        let label = m.tenant_label(&Tenant::from(&long)).unwrap();
        assert!(label.len() <= 256 && long.starts_with(&label));
        m.name_tenants(usize::MAX);
        assert_eq!(m.tenants.lock().unwrap().max, MAX_TENANT_LABELS);
    }
}
