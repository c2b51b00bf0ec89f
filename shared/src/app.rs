//! The composition root: what every host builds the same way. The local server
//! ([`crate::local`]) and the Lambda functions (`aws::lambda`) choose their adapters (store,
//! queue, running places), settings and tools (passed in: this crate knows no tool), then build
//! the registry, the engine, the MCP service and the worker here, so the wiring exists once and
//! no library module imports a host.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::{AuthSettings, Authenticator};
use crate::engine::{Engine, TaskSettings};
use crate::handler::{McpService, ServiceConfig};
use crate::protocol::state::StateSealer;
use crate::queue::WorkQueue;
use crate::quota::{RunSlots, RunningPlaces};
use crate::store::TaskStore;
use crate::tools::{Registry, Tool};
use crate::worker::{Worker, WorkerSettings};

/// The registry a host that serves `tools/call` builds: checking each call's arguments against
/// the tool's schema ([`Registry::checking_arguments`]). A worker alone, which never takes a
/// call, builds `Registry::new(tools)`, without the schema engine.
pub fn serving_registry(tools: Vec<Arc<dyn Tool>>) -> Arc<Registry> {
    Arc::new(Registry::new(tools).checking_arguments())
}

/// Two tools of one name (a Rust tool and a declared one, say): the server refuses to start
/// rather than serve one of them silently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "two tools are named {0}: tool names must be unique across the Rust tools and the manifest"
)]
pub struct DuplicateTool(pub String);

/// `rust` then `declared`, in that order, refusing a name given twice.
pub fn all_tools(
    rust: Vec<Arc<dyn Tool>>,
    declared: Vec<Arc<dyn Tool>>,
) -> Result<Vec<Arc<dyn Tool>>, DuplicateTool> {
    let mut seen = std::collections::HashSet::new();
    let all: Vec<Arc<dyn Tool>> = rust.into_iter().chain(declared).collect();
    for t in &all {
        if !seen.insert(t.def().name) {
            return Err(DuplicateTool(t.def().name.to_owned()));
        }
    }
    Ok(all)
}

/// The ports a host hands to the root.
#[derive(Clone)]
pub struct Ports {
    /// The task store.
    pub store: Arc<dyn TaskStore>,
    /// The work queue.
    pub queue: Arc<dyn WorkQueue>,
    /// Places shared by every instance: a tenant's running jobs (the worker) and open streams
    /// (the service). `None` where one process owns them all (the local server's fair gate).
    pub run_slots: Option<Arc<dyn RunSlots>>,
}

/// The engine over `ports`, its inline runs counted with the jobs in `ports.run_slots` when
/// there is one (the local server gives it its fair gate instead).
pub fn engine(ports: &Ports, tasks: &TaskSettings) -> Engine {
    let engine = Engine::new(ports.store.clone(), ports.queue.clone(), tasks.clone());
    match &ports.run_slots {
        Some(slots) => engine.with_running_places(RunningPlaces::Slots {
            slots: slots.clone(),
            max: tasks.quotas.max_running_jobs,
        }),
        None => engine,
    }
}

/// The MCP service: `config` as the host sets it, requests authenticated with `auth` when
/// given, `requestState` sealed by `sealer` (its key given, or fetched at first need), and a tenant's open streams counted in
/// `ports.run_slots` when there is one (every instance must count alike).
pub fn service(
    config: ServiceConfig,
    engine: Engine,
    tools: Arc<Registry>,
    sealer: StateSealer,
    auth: Option<AuthSettings>,
    ports: &Ports,
) -> Arc<McpService> {
    let mut service = McpService::new(config, engine, tools, sealer);
    if let Some(auth) = auth {
        service = service.with_auth(Authenticator::new(auth));
    }
    if let Some(slots) = ports.run_slots.clone() {
        service = service.with_stream_slots(slots);
    }
    Arc::new(service)
}

/// The worker: `settings` with the tasks' quotas and poll interval, a tenant's running jobs
/// counted in `ports.run_slots` when there is one.
pub fn worker(
    ports: &Ports,
    tools: Arc<Registry>,
    tasks: &TaskSettings,
    mut settings: WorkerSettings,
) -> Worker {
    settings.quotas = tasks.quotas.clone();
    settings.poll_interval_floor = Duration::from_millis(tasks.poll_interval_ms);
    let worker = Worker::new(ports.store.clone(), ports.queue.clone(), tools, settings);
    match &ports.run_slots {
        Some(slots) => worker.with_run_slots(slots.clone()),
        None => worker,
    }
}
