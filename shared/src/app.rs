//! The composition root: a [`Server`] is built here, in one place, from its ports (store,
//! queue, running places, change feed), one [`Settings`] and its tools ([`ToolSources`]).
//! The hosts only pick adapters and call it: `mcp-tasks serve` ([`crate::local`]), the four
//! Lambda functions (`aws::lambda`) and the operators' commands ([`crate::admin`]). No
//! library module imports a host, and this one imports no cloud SDK: what a host lends
//! declared tools' targets (an AWS client, say) comes in as a value ([`Lending`]).
//!
//! Choosing a store is a line in the host (`LocalStore` of the local server, `Ports::connect`
//! on Lambda); `docs/add-a-store.md` walks through adding one.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::{AuthSettings, Authenticator};
use crate::engine::{Engine, TaskSettings};
use crate::handler::{McpService, ServiceConfig};
use crate::protocol::state::StateSealer;
use crate::queue::WorkQueue;
use crate::quota::{RunSlots, RunningPlaces};
use crate::store::TaskStore;
use crate::store::watch::ChangeFeed;
use crate::tools::{Registry, Tool};
use crate::worker::{Worker, WorkerSettings};

mod tool_sources;

pub use tool_sources::{
    ClientLender, DuplicateTool, Lending, ToolSources, ToolSourcesError, all_tools,
    serving_registry,
};

/// The ports a host hands to the root.
#[derive(Clone)]
pub struct Ports {
    /// The task store.
    pub store: Arc<dyn TaskStore>,
    /// The work queue.
    pub queue: Arc<dyn WorkQueue>,
    /// Places shared by every instance: a tenant's running jobs (the worker) and open streams
    /// (the service). `None` where one process owns them all (the local server's fair gate,
    /// [`Server::with_running_places`]).
    pub run_slots: Option<Arc<dyn RunSlots>>,
}

/// Everything a server is set with, in one struct: what each host reads from its command
/// line or its environment (each setting's name, default and bounds in [`crate::settings`]).
#[derive(Clone, Default)]
pub struct Settings {
    /// The endpoint.
    pub service: ServiceConfig,
    /// New tasks and the per-tenant quotas.
    pub tasks: TaskSettings,
    /// The worker's timing (its quotas and poll floor are the tasks').
    pub worker: WorkerSettings,
    /// Bearer-token auth; `None` serves every request as the configured tenant.
    pub auth: Option<AuthSettings>,
}

/// A server: its ports, settings and tools, from which the host takes the parts it runs (the
/// engine, the MCP service, the worker), each built the same way on every host.
#[derive(Clone)]
pub struct Server {
    ports: Ports,
    settings: Settings,
    tools: Arc<Registry>,
    places: Option<RunningPlaces>,
}

impl Server {
    /// A server over `ports`, set with `settings`, serving (or running) `tools`.
    pub fn new(ports: Ports, settings: Settings, tools: Arc<Registry>) -> Self {
        Self {
            ports,
            settings,
            tools,
            places: None,
        }
    }

    /// Where inline runs take their running places when one process owns them all (the
    /// local server's fair gate); without it they are counted in the ports' `run_slots`
    /// when there are some, else not limited.
    pub fn with_running_places(mut self, places: RunningPlaces) -> Self {
        self.places = Some(places);
        self
    }

    /// How subscriptions learn of task changes: pushed by a store that sees every write (the
    /// local one), else polled (the default).
    pub fn with_change_feed(mut self, feed: ChangeFeed) -> Self {
        self.settings.service.change_feed = feed;
        self
    }

    /// The ports.
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The engine: create, read, update, cancel, sweep and purge tasks over the ports.
    pub fn engine(&self) -> Engine {
        let (ports, tasks) = (&self.ports, &self.settings.tasks);
        let engine = Engine::new(ports.store.clone(), ports.queue.clone(), tasks.clone());
        match (&self.places, &ports.run_slots) {
            (Some(places), _) => engine.with_running_places(places.clone()),
            (None, Some(slots)) => engine.with_running_places(RunningPlaces::Slots {
                slots: slots.clone(),
                max: tasks.quotas.max_running_jobs,
            }),
            (None, None) => engine,
        }
    }

    /// The MCP service, `requestState` sealed by `sealer` (its key given, or fetched at first
    /// need); requests authenticated when the settings say how, and a tenant's open streams
    /// counted in the ports' `run_slots` when there are some (every instance must count
    /// alike).
    pub fn service(&self, sealer: StateSealer) -> Arc<McpService> {
        let mut service = McpService::new(
            self.settings.service.clone(),
            self.engine(),
            self.tools.clone(),
            sealer,
        );
        if let Some(auth) = self.settings.auth.clone() {
            service = service.with_auth(Authenticator::new(auth));
        }
        if let Some(slots) = self.ports.run_slots.clone() {
            service = service.with_stream_slots(slots);
        }
        Arc::new(service)
    }

    /// The worker: its settings with the tasks' quotas and poll interval, a tenant's running
    /// jobs counted in the ports' `run_slots` when there are some.
    pub fn worker(&self) -> Worker {
        let tasks = &self.settings.tasks;
        let mut settings = self.settings.worker.clone();
        settings.quotas = tasks.quotas.clone();
        settings.poll_interval_floor = Duration::from_millis(tasks.poll_interval_ms);
        let worker = Worker::new(
            self.ports.store.clone(),
            self.ports.queue.clone(),
            self.tools.clone(),
            settings,
        );
        match &self.ports.run_slots {
            Some(slots) => worker.with_run_slots(slots.clone()),
            None => worker,
        }
    }
}

/// A registry of no tool: what a server that never looks one up serves (the tasks function,
/// the sweep, the operators' commands).
pub fn no_tools() -> Arc<Registry> {
    Arc::new(Registry::new(Vec::<Arc<dyn Tool>>::new()))
}
