//! Per-tenant quotas and fair sharing: no tenant can take what the others need.
//!
//! - [`Quotas`]: the limits (active tasks, running jobs, creation rate, the work one task may
//!   claim), settings of both hosts with defaults a single user never meets.
//! - [`FairGate`]: a counting semaphore that hands free places to waiting tenants in turn
//!   (the one holding the fewest first), with a per-tenant cap. The local worker pool runs jobs through one, the
//!   CPU pool ([`crate::jobs::cpu`]) another: a tenant with a backlog of thousands waits
//!   behind its own work, never in front of another tenant's.
//! - [`RunningPlaces`]: the places a synchronous call takes to run a tool inline — the gate's
//!   locally, the [`RunSlots`] record on Lambda — so inline runs count with the jobs.
//! - [`RateLimiter`]: a token bucket per tenant for task creation.
//! - [`QuotaExceeded`]: what a refusal says, as a tool error the model reads (`isError: true`,
//!   which limit, and when to retry), never a hang.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::tenant::Tenant;

mod running;
pub use running::{RunningPlace, RunningPlaces};

/// The `_meta` key of a quota refusal's `CallToolResult`.
pub const QUOTA_META: &str = "mcp-tasks/quota";

/// Per-tenant limits. `0` for a count means "no limit" only where the field says so.
#[derive(Debug, Clone, PartialEq)]
pub struct Quotas {
    /// Most non-terminal tasks one tenant may have (working or waiting for input).
    pub max_active_tasks: usize,
    /// Most jobs of one tenant running at once (the rest wait their turn, in order).
    pub max_running_jobs: usize,
    /// Tasks one tenant may create per second, sustained.
    pub create_per_second: f64,
    /// Tasks one tenant may create in a burst.
    pub create_burst: u32,
    /// Longest one task may run, from creation to its end (wall time).
    pub max_task_wall: Duration,
    /// Most CPU time one task may use on the CPU pool.
    pub max_task_cpu: Duration,
}

impl Default for Quotas {
    fn default() -> Self {
        use crate::settings;
        Self {
            max_active_tasks: settings::MAX_ACTIVE_TASKS.default as usize,
            max_running_jobs: settings::MAX_RUNNING_JOBS.default as usize,
            create_per_second: settings::CREATE_PER_SECOND.default,
            create_burst: settings::CREATE_BURST.default as u32,
            max_task_wall: Duration::from_secs(settings::MAX_TASK_SECONDS.default),
            max_task_cpu: Duration::from_secs(settings::MAX_TASK_CPU_SECONDS.default),
        }
    }
}

/// Which limit a request ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`Quotas::max_active_tasks`].
    ActiveTasks,
    /// [`Quotas::max_running_jobs`], met by a synchronous call that waited its whole budget
    /// for a running place.
    RunningJobs,
    /// [`Quotas::create_per_second`] / [`Quotas::create_burst`].
    CreateRate,
    /// [`Quotas::max_task_wall`].
    TaskWallTime,
    /// [`Quotas::max_task_cpu`].
    TaskCpuTime,
}

impl Limit {
    /// The name clients see in `_meta["mcp-tasks/quota"].limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::ActiveTasks => "active_tasks",
            Limit::RunningJobs => "running_jobs",
            Limit::CreateRate => "create_rate",
            Limit::TaskWallTime => "task_wall_time",
            Limit::TaskCpuTime => "task_cpu_time",
        }
    }
}

/// A refusal: which limit, its value, and when trying again may succeed (`None`: never with
/// these arguments).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct QuotaExceeded {
    /// The limit.
    pub limit: Limit,
    /// Its value, in the limit's unit (tasks, tasks per second, seconds).
    pub max: f64,
    /// When a retry may succeed.
    pub retry_after: Option<Duration>,
    /// For the model: what happened and what to do.
    pub message: String,
}

impl QuotaExceeded {
    /// The `CallToolResult` (`isError: true`) the model reads.
    pub fn to_tool_result(&self) -> Value {
        let mut quota = json!({"limit": self.limit.as_str(), "max": self.max});
        if let Some(r) = self.retry_after {
            quota["retryAfterMs"] = json!(r.as_millis() as u64);
        }
        json!({
            "content": [{"type": "text", "text": self.message}],
            "isError": true,
            "_meta": {QUOTA_META: quota},
        })
    }
}

/// A token bucket per tenant. Idle tenants' buckets are dropped once the map grows, so many
/// tenants cannot grow it without bound.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Tenant, (f64, Instant)>>,
}

/// Buckets kept before full (idle) ones are dropped.
const MAX_BUCKETS: usize = 10_000;

impl RateLimiter {
    /// `rate` tokens a second, at most `burst` saved up. A rate of 0 or less disables it.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `tenant`, or says how long until one is there.
    pub fn take(&self, tenant: &Tenant) -> Result<(), Duration> {
        if self.rate <= 0.0 || !self.rate.is_finite() {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(tenant) {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() * rate < burst
            });
        }
        let (tokens, at) = buckets.entry(tenant.clone()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.rate))
        }
    }
}

/// A counting semaphore shared fairly between tenants: at most `capacity` places in use, at
/// most `per_tenant` by one tenant; a freed place goes to the waiting tenant (under its cap)
/// that holds the fewest places, ties in turn (round robin over tenants, first come first
/// served within one).
pub struct FairGate {
    state: Mutex<GateState>,
}

struct GateState {
    free: usize,
    per_tenant: usize,
    running: HashMap<Tenant, usize>,
    /// Tenants with waiters, in turn order.
    turn: VecDeque<Tenant>,
    waiters: HashMap<Tenant, VecDeque<oneshot::Sender<()>>>,
}

/// A place in a [`FairGate`]; freed on drop.
pub struct GatePermit {
    gate: Arc<FairGate>,
    tenant: Tenant,
}

impl Drop for GatePermit {
    fn drop(&mut self) {
        self.gate.release(&self.tenant);
    }
}

/// Cleans up after a waiter that stopped waiting (its future was dropped).
struct Waiting {
    gate: Arc<FairGate>,
    tenant: Tenant,
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            // Granted just before we gave up: hand the place on.
            if rx.try_recv().is_ok() {
                self.gate.release(&self.tenant);
            }
        }
    }
}

impl FairGate {
    /// A gate with `capacity` places, at most `per_tenant` for one tenant (both at least 1).
    pub fn new(capacity: usize, per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(GateState {
                free: capacity.max(1),
                per_tenant: per_tenant.max(1),
                running: HashMap::new(),
                turn: VecDeque::new(),
                waiters: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a place for `tenant`.
    pub async fn acquire(self: &Arc<Self>, tenant: &Tenant) -> GatePermit {
        loop {
            let rx = {
                let mut s = self.lock();
                let mine = s.running.get(tenant).copied().unwrap_or(0);
                // Free places with nobody eligible waiting (a waiter that could run would have
                // been given the place already), and this tenant under its cap: go.
                if s.free > 0 && mine < s.per_tenant && !s.waiters.contains_key(tenant) {
                    s.free -= 1;
                    *s.running.entry(tenant.clone()).or_insert(0) += 1;
                    return GatePermit {
                        gate: self.clone(),
                        tenant: tenant.clone(),
                    };
                }
                let (tx, rx) = oneshot::channel();
                if !s.waiters.contains_key(tenant) {
                    s.turn.push_back(tenant.clone());
                }
                s.waiters.entry(tenant.clone()).or_default().push_back(tx);
                rx
            };
            let mut waiting = Waiting {
                gate: self.clone(),
                tenant: tenant.clone(),
                rx: Some(rx),
            };
            let granted = match waiting.rx.as_mut() {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            waiting.rx = None;
            if granted {
                return GatePermit {
                    gate: self.clone(),
                    tenant: tenant.clone(),
                };
            }
            // A sender is only dropped unsent when its receiver was closed, so this does not
            // happen; were it to, queue again rather than take an uncounted place.
        }
    }

    /// How many places `tenant` holds.
    pub fn running(&self, tenant: &Tenant) -> usize {
        self.lock().running.get(tenant).copied().unwrap_or(0)
    }

    /// How many waiters `tenant` has.
    pub fn waiting(&self, tenant: &Tenant) -> usize {
        self.lock().waiters.get(tenant).map_or(0, VecDeque::len)
    }

    fn release(&self, tenant: &Tenant) {
        let mut s = self.lock();
        s.free += 1;
        if let Some(n) = s.running.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.running.remove(tenant);
            }
        }
        Self::dispatch(&mut s);
    }

    /// Hands free places to waiting tenants: first to the waiting tenant holding the fewest
    /// places (so a quiet tenant goes before one that already runs much), ties in turn order;
    /// a tenant served goes to the back of the turn.
    fn dispatch(s: &mut GateState) {
        while s.free > 0 {
            let per_tenant = s.per_tenant;
            let pick = s
                .turn
                .iter()
                .enumerate()
                .map(|(i, t)| (s.running.get(t).copied().unwrap_or(0), i))
                .filter(|(running, _)| *running < per_tenant)
                .min();
            let Some((_, i)) = pick else {
                return;
            };
            let Some(tenant) = s.turn.remove(i) else {
                return;
            };
            let mut granted = false;
            let mut empty = true;
            if let Some(q) = s.waiters.get_mut(&tenant) {
                while let Some(tx) = q.pop_front() {
                    if tx.send(()).is_ok() {
                        granted = true;
                        break;
                    }
                }
                empty = q.is_empty();
            }
            if granted {
                s.free -= 1;
                *s.running.entry(tenant.clone()).or_insert(0) += 1;
            }
            if empty {
                s.waiters.remove(&tenant);
            } else {
                s.turn.push_back(tenant);
            }
        }
    }
}

/// What a [`RunSlots`] record counts places under: a tenant's running jobs, a tenant's open
/// streams, or all tenants' streams together. Not a tenant: its text is the tenant's name for
/// running jobs (the record's key as it always was), and a name no tenant can have (tenant
/// names hold no control characters) for the others.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlotKey(Arc<str>);

impl SlotKey {
    /// The running jobs of `tenant`.
    pub fn runs_of(tenant: &Tenant) -> Self {
        Self(tenant.as_str().into())
    }

    /// The open streams (long synchronous calls and subscriptions) of `tenant`.
    pub fn streams_of(tenant: &Tenant) -> Self {
        Self(format!("{tenant}\u{1f}streams").into())
    }

    /// The open streams of all tenants together.
    pub fn all_streams() -> Self {
        Self("\u{1f}all-streams".into())
    }

    /// The key as text (the store adapters' record key is made from it).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The per-tenant running-jobs guard of a deployment with many worker processes (Lambda): a
/// tenant's live runs are recorded in the store, each until a time its run cannot outlive
/// (the invocation's deadline plus a margin), so a run that dies frees its place by itself.
/// The local server needs none: its [`FairGate`] sees every run.
#[async_trait::async_trait]
pub trait RunSlots: Send + Sync + 'static {
    /// Records a run under `key` (a tenant's running jobs, say) by `owner` until `until_ms`
    /// (epoch ms), unless `key` already has `max` live runs: then `false`, and nothing is
    /// written. Runs under one key starting at once are not turned away while places are
    /// free; an adapter that cannot settle its record (contention) answers `false` ("not
    /// now"), never an error, which is for a store that failed.
    async fn take(
        &self,
        key: &SlotKey,
        owner: &str,
        max: usize,
        until_ms: u64,
    ) -> Result<bool, crate::store::StoreError>;
    /// Ends `owner`'s run under `key` (absent is not an error).
    async fn release(&self, key: &SlotKey, owner: &str) -> Result<(), crate::store::StoreError>;
}

/// [`RunSlots`] in memory (tests, and the contract the store adapters follow).
#[derive(Default)]
pub struct MemoryRunSlots {
    runs: Mutex<HashMap<SlotKey, HashMap<String, u64>>>,
}

#[async_trait::async_trait]
impl RunSlots for MemoryRunSlots {
    async fn take(
        &self,
        key: &SlotKey,
        owner: &str,
        max: usize,
        until_ms: u64,
    ) -> Result<bool, crate::store::StoreError> {
        let now = crate::clock::now_ms();
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let mine = runs.entry(key.clone()).or_default();
        mine.retain(|_, until| *until > now);
        if mine.len() >= max && !mine.contains_key(owner) {
            return Ok(false);
        }
        mine.insert(owner.to_owned(), until_ms);
        Ok(true)
    }

    async fn release(&self, key: &SlotKey, owner: &str) -> Result<(), crate::store::StoreError> {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mine) = runs.get_mut(key) {
            mine.remove(owner);
        }
        Ok(())
    }
}

/// The checks every [`RunSlots`] adapter passes (in this crate's tests and with feature
/// `contracts` only).
#[cfg(any(test, feature = "contracts"))]
pub mod run_slots_contract {
    use super::{RunSlots, SlotKey};
    use crate::tenant::Tenant;

    /// Runs them on `slots` (tenants are named after `prefix`, so a shared store is fine).
    pub async fn run_all(slots: &dyn RunSlots, prefix: &str) {
        let now = crate::clock::now_ms();
        let (a, b) = (
            SlotKey::runs_of(&Tenant::from(format!("{prefix}-a"))),
            SlotKey::runs_of(&Tenant::from(format!("{prefix}-b"))),
        );
        assert!(slots.take(&a, "r1", 2, now + 60_000).await.unwrap());
        assert!(slots.take(&a, "r2", 2, now + 60_000).await.unwrap());
        assert!(
            !slots.take(&a, "r3", 2, now + 60_000).await.unwrap(),
            "at the limit"
        );
        assert!(
            slots.take(&b, "r3", 2, now + 60_000).await.unwrap(),
            "tenants apart"
        );
        slots.release(&a, "r1").await.unwrap();
        assert!(
            slots.take(&a, "r3", 2, now + 60_000).await.unwrap(),
            "freed by release"
        );
        slots.release(&a, "never-took").await.unwrap();
        // Many runs of one tenant starting at once: none turned away while places are free,
        // never more than `max` let in.
        for (max, want) in [(100, 24), (4, 4)] {
            let d = SlotKey::runs_of(&Tenant::from(format!("{prefix}-d{max}")));
            let taken = futures_util::future::join_all((0..24).map(|i| {
                let (d, owner) = (d.clone(), format!("r{i}"));
                async move { slots.take(&d, &owner, max, now + 60_000).await.unwrap() }
            }))
            .await;
            assert_eq!(taken.iter().filter(|t| **t).count(), want, "max {max}");
        }
        // A run that died frees its place when its time is up.
        let c = SlotKey::runs_of(&Tenant::from(format!("{prefix}-c")));
        let now = crate::clock::now_ms();
        assert!(slots.take(&c, "dead", 1, now + 1500).await.unwrap());
        assert!(!slots.take(&c, "next", 1, now + 60_000).await.unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(1600)).await;
        assert!(
            slots
                .take(&c, "next", 1, crate::clock::now_ms() + 60_000)
                .await
                .unwrap()
        );
    }
}

#[cfg(test)]
mod tests;
