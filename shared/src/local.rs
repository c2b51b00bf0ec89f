//! The embedded default: one process serving the MCP endpoint, the task endpoints and the
//! worker, over the durable embedded store (or, picked by [`LocalStore`], the memory one) and
//! the in-process queue. No AWS, no Docker. The server itself is assembled by
//! [`crate::app::Server`]; this host picks the adapters and runs the pool, sweep and listener.
//!
//! At start-up it re-discovers unfinished tasks from the store (the in-process queue does not
//! survive a restart; the store does), so a job interrupted by a crash resumes from its last
//! checkpoint. A periodic sweep re-enqueues orphans and purges expired tasks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashSet;
use std::sync::Mutex;
use tokio::net::TcpListener;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::app::{Lending, Ports, Server, Settings, ToolSources};
use crate::engine::Engine;
use crate::handler::ServiceConfig;
use crate::protocol::state::StateSealer;
use crate::queue::{LocalQueue, WorkMessage, WorkQueue};
use crate::quota::{FairGate, RunningPlaces};
use crate::store::TaskStore;
use crate::store::embedded::EmbeddedStore;
use crate::store::memory::MemoryStore;
use crate::store::metered::Metered;
use crate::store::watch::{ChangeFeed, Watched, Watchers};
use crate::task::TaskKey;
use crate::worker::{Outcome, Worker};

mod metrics_listen;

pub use metrics_listen::{DEFAULT_METRICS_LISTEN, MetricsListen};

/// Where the local server keeps its tasks: the one line where the host picks its store
/// (`docs/add-a-store.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalStore {
    /// The durable embedded store (redb) in the data directory: tasks survive restarts.
    #[default]
    Embedded,
    /// Memory only, nothing on disk (the data directory is not touched, `requestState` is
    /// sealed with a key of this run): tests, and a store's seam shown working.
    Memory,
}

/// Options of `mcp-tasks serve`.
#[derive(Clone)]
pub struct LocalOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Directory of the embedded database and the request-state key.
    pub data_dir: PathBuf,
    /// The store the tasks are kept in.
    pub store: LocalStore,
    /// The Rust tools (the host's: `tools/src/lib.rs`) and the declared ones (`--tools FILE`).
    pub tools: ToolSources,
    /// What the declared tools' targets may use here (programs, and with AWS support the AWS
    /// clients); the `command` steps' scope is the data directory's, set at start.
    pub lending: Lending,
    /// The server's settings: endpoint, tasks and quotas, worker, auth (`None` serves every
    /// request as the local tenant, loopback only).
    pub settings: Settings,
    /// Most jobs running at once.
    pub max_concurrent_jobs: usize,
    /// How often the sweep runs.
    pub sweep_every: Duration,
    /// Bounds of the HTTP listener: header and body read timeouts, connection cap.
    pub edge: crate::edge::EdgeSettings,
    /// How many tenants the opt-in `tenant_*` metrics name (0: none; see [`crate::metrics`]).
    pub metrics_tenants: usize,
    /// Where the metrics are served: a listener of their own, never the endpoint (off here;
    /// `mcp-tasks serve` defaults to [`DEFAULT_METRICS_LISTEN`] when it is free).
    pub metrics_listen: MetricsListen,
    /// Injected faults (tests only).
    #[cfg(feature = "fault-injection")]
    pub faults: crate::fault::Faults,
}

impl LocalOptions {
    /// Defaults for a listen address and data directory.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            listen,
            data_dir,
            store: LocalStore::default(),
            tools: ToolSources::default(),
            lending: Lending {
                allow_commands: true,
                ..Lending::default()
            },
            settings: Settings::default(),
            max_concurrent_jobs: crate::settings::MAX_CONCURRENT_JOBS.default as usize,
            metrics_tenants: crate::settings::METRICS_TENANTS.default as usize,
            metrics_listen: MetricsListen::Off,
            sweep_every: Duration::from_secs(15),
            edge: crate::edge::EdgeSettings::default(),
            #[cfg(feature = "fault-injection")]
            faults: crate::fault::Faults::default(),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory or key file.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The embedded database: in use, damaged (refused), or unreadable.
    #[error(transparent)]
    Store(#[from] crate::store::embedded::OpenError),
    /// The tools: a manifest entry this server cannot run, or two tools of one name.
    #[error(transparent)]
    Tools(#[from] crate::app::ToolSourcesError),
    /// The listen address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The metrics listen address.
    #[error("cannot listen for metrics on {addr} (--metrics-listen): {source}")]
    MetricsListen {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A running local server.
pub struct LocalServer {
    /// The bound address (useful with port 0).
    pub addr: SocketAddr,
    /// Where the metrics are served, if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    http: JoinHandle<()>,
    metrics: Option<JoinHandle<()>>,
}

impl LocalServer {
    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The metrics URL, when metrics are served.
    pub fn metrics_url(&self) -> Option<String> {
        let path = crate::handler::METRICS_PATH;
        self.metrics_addr.map(|a| format!("http://{a}{path}"))
    }

    /// Serves until `signal` completes (then shuts down gracefully) or the HTTP server stops
    /// by itself (an error, already logged).
    pub async fn run_until(mut self, signal: impl std::future::Future<Output = ()>) {
        tokio::select! {
            _ = signal => {}
            _ = &mut self.http => {}
        }
        let _ = self.shutdown.send(true);
        let _ = (&mut self.http).await;
        if let Some(metrics) = self.metrics {
            let _ = metrics.await;
        }
    }
}

/// Creates the data directory readable by its owner only (0700). A directory that already
/// holds our files (a database or key from an older version, which made it 0755) is tightened
/// the same way; any other existing directory is left as it is, with a warning when others
/// can read it.
fn private_data_dir(dir: &Path) -> Result<(), std::io::Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        if !dir.exists() {
            return std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
        let mode = std::fs::metadata(dir)?.permissions().mode();
        if mode & 0o077 != 0 {
            if dir.join("tasks.redb").exists() || dir.join("state.key").exists() {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
                tracing::info!(dir = %dir.display(), "data directory made private (0700)");
            } else {
                tracing::warn!(dir = %dir.display(), mode = format!("{:o}", mode & 0o777), "the data directory is readable by other users");
            }
        }
        Ok(())
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}

/// Creates `path` readable by its owner only (0600), or makes an existing one so, before the
/// database opens it (redb would create it with the umask's mode, usually 0644).
fn private_file(path: &Path) -> Result<(), std::io::Error> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map(drop)
        }
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// The request-state key: created once per data directory, so `requestState` values survive
/// a restart.
fn state_key(dir: &Path) -> Result<[u8; 32], std::io::Error> {
    let path = dir.join("state.key");
    if let Ok(bytes) = std::fs::read(&path)
        && let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
    {
        return Ok(key);
    }
    let mut key = [0u8; 32];
    crate::clock::random_bytes(&mut key);
    let tmp = dir.join("state.key.tmp");
    {
        use std::io::Write as _;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(&key)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    Ok(key)
}

/// Starts the local server: tools, store, queue, worker pool, recovery, sweep and HTTP.
pub async fn start(mut opts: LocalOptions) -> Result<LocalServer, StartError> {
    if opts.store == LocalStore::Embedded {
        // Marks the `command` steps' processes, so that a server starting on this data
        // directory kills what they left.
        let scope = crate::declared::command::leftovers::scope_of(&opts.data_dir);
        opts.lending.step_scope.get_or_insert(scope);
    }
    let registry = opts.tools.serving(&opts.lending).await?;
    crate::metrics::global().name_tenants(opts.metrics_tenants);
    let OpenedStore {
        store,
        watchers,
        sealer,
    } = open_store(&opts)?;
    let (queue, rx) = queue(&opts);
    // One process owns every running place: the fair gate, no shared slots. Every job and
    // every inline run of this process takes a place of it.
    let ports = Ports {
        store,
        queue: queue.clone(),
        run_slots: None,
    };
    let gate = FairGate::new(
        opts.max_concurrent_jobs,
        opts.settings.tasks.quotas.max_running_jobs,
    );
    let server = Server::new(ports, worker_settings(&opts), registry)
        .with_running_places(RunningPlaces::Gate(gate.clone()))
        .with_change_feed(ChangeFeed::Push(watchers));
    let (shutdown, stop) = watch::channel(false);
    let worker = Arc::new(server.worker());
    tokio::spawn(run_worker_pool(worker, queue, rx, gate, stop.clone()));
    let engine = server.engine();
    tokio::spawn(run_sweep(engine.clone(), opts.sweep_every, stop.clone()));
    let service = server.service(sealer);
    let (addr, metrics_addr, http, metrics) = listen(&opts, service, stop).await?;
    // Serve first, recover after: the listener answers at once (a client that finds no server
    // for a few seconds gives up on it), while the interrupted tasks are released and re-queued
    // in the background, many writes to a commit.
    tokio::spawn(async move {
        match engine.recover().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(tasks = n, "recovered unfinished tasks"),
            Err(e) => tracing::error!(error = %e, "start-up recovery failed"),
        }
    });
    Ok(LocalServer {
        addr,
        metrics_addr,
        shutdown,
        http,
        metrics,
    })
}

/// The store `opts` picks, wrapped so that its writes wake subscriptions (every writer of
/// this process shares it) and are counted, with what seals `requestState`.
fn open_store(opts: &LocalOptions) -> Result<OpenedStore, StartError> {
    let watchers = Arc::new(Watchers::default());
    let (store, sealer): (Arc<dyn TaskStore>, StateSealer) = match opts.store {
        LocalStore::Embedded => {
            let (store, key) = open_embedded(&opts.data_dir)?;
            let store = Watched::new(Metered(store), watchers.clone());
            (Arc::new(store), StateSealer::new(key))
        }
        LocalStore::Memory => {
            let store = Watched::new(Metered(MemoryStore::new()), watchers.clone());
            (Arc::new(store), StateSealer::random())
        }
    };
    Ok(OpenedStore {
        store,
        watchers,
        sealer,
    })
}

/// A store opened by [`open_store`].
struct OpenedStore {
    store: Arc<dyn TaskStore>,
    /// Woken by the store's writes: the subscriptions' change feed.
    watchers: Arc<Watchers>,
    /// Seals `requestState` with the data directory's key (a key of this run in memory).
    sealer: StateSealer,
}

/// The embedded store of `dir` (made private, created when new) and its request-state key;
/// whatever the `command` steps of a server killed on this directory left running is killed
/// once the store is ours (its file lock: docs/tool-manifest.md, "What a command leaves
/// behind").
fn open_embedded(dir: &Path) -> Result<(EmbeddedStore, [u8; 32]), StartError> {
    let dir_err = |source| StartError::DataDir {
        path: dir.to_owned(),
        source,
    };
    private_data_dir(dir).map_err(dir_err)?;
    let key = state_key(dir).map_err(dir_err)?;
    let db = dir.join("tasks.redb");
    // A file that is there already holds tasks: found empty, it was truncated, not created.
    let existed = db.exists();
    private_file(&db).map_err(dir_err)?;
    let opened = match existed {
        true => EmbeddedStore::open_existing(&db)?,
        false => EmbeddedStore::open(&db)?,
    };
    let scope = crate::declared::command::leftovers::scope_of(dir);
    let killed = crate::declared::command::leftovers::kill_scope(&scope);
    if killed > 0 {
        tracing::warn!(
            killed,
            "processes left by the command steps of an earlier run were killed"
        );
    }
    Ok((opened, key))
}

/// The in-process queue (with injected duplicates when a test asks for them) and its
/// receiving end, which the worker pool drains.
fn queue(opts: &LocalOptions) -> (Arc<dyn WorkQueue>, mpsc::UnboundedReceiver<WorkMessage>) {
    let (queue, rx) = LocalQueue::new();
    let queue: Arc<dyn WorkQueue> = Arc::new(queue);
    #[cfg(feature = "fault-injection")]
    let queue = {
        if opts.faults.any() {
            tracing::warn!(faults = ?opts.faults, "FAULT INJECTION ENABLED (tests only)");
        }
        crate::fault::install(&opts.faults);
        if opts.faults.duplicate_delivery {
            Arc::new(crate::queue::DuplicatingQueue::new(
                queue,
                opts.faults.duplicate_delay,
            )) as Arc<dyn WorkQueue>
        } else {
            queue
        }
    };
    #[cfg(not(feature = "fault-injection"))]
    let _ = opts;
    (queue, rx)
}

/// The settings, with the interruptions a fault-injection test allows.
fn worker_settings(opts: &LocalOptions) -> Settings {
    #[allow(unused_mut)]
    let mut settings = opts.settings.clone();
    #[cfg(feature = "fault-injection")]
    if let Some(n) = opts.faults.max_interruptions {
        settings.worker.max_interruptions = n;
        settings.worker.max_deaths = n;
    }
    settings
}

type Listening = (
    SocketAddr,
    Option<SocketAddr>,
    JoinHandle<()>,
    Option<JoinHandle<()>>,
);

/// Binds the endpoint and the metrics listener and serves them until `stop`: the bound
/// addresses and the two serving tasks.
async fn listen(
    opts: &LocalOptions,
    service: Arc<crate::handler::McpService>,
    stop: watch::Receiver<bool>,
) -> Result<Listening, StartError> {
    let listen_err = |source| StartError::Listen {
        addr: opts.listen,
        source,
    };
    let listener = TcpListener::bind(opts.listen).await.map_err(listen_err)?;
    let addr = listener.local_addr().map_err(listen_err)?;
    let metrics =
        metrics_listen::bind(opts.metrics_listen, &ServiceConfig::default().allowed_hosts).await?;
    let metrics_addr = metrics.as_ref().and_then(|(l, _)| l.local_addr().ok());
    let stopped = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let metrics = metrics.map(|(listener, hosts)| {
        tokio::spawn(crate::edge::serve_metrics(
            listener,
            hosts,
            opts.edge.clone(),
            stopped(stop.clone()),
        ))
    });
    let http = tokio::spawn(crate::edge::serve(
        listener,
        service,
        opts.edge.clone(),
        stopped(stop),
    ));
    Ok((addr, metrics_addr, http, metrics))
}

/// Runs every message as its own tokio task (jobs mostly wait on I/O, so thousands run at
/// once), each waiting for a place of the fair gate: at most `max_concurrent_jobs` in all and
/// `max_running_jobs` per tenant, freed places going to the tenants in turn, so one tenant's
/// backlog never delays another's work by more than the next free place. A task already
/// waiting for a place is not queued twice (the sweep re-sends tasks that wait long), so the
/// waiting set is bounded by the tenants' active tasks.
async fn run_worker_pool(
    worker: Arc<Worker>,
    queue: Arc<dyn WorkQueue>,
    mut rx: mpsc::UnboundedReceiver<WorkMessage>,
    gate: Arc<FairGate>,
    mut stop: watch::Receiver<bool>,
) {
    let waiting: Arc<Mutex<HashSet<TaskKey>>> = Arc::default();
    loop {
        let msg = tokio::select! {
            m = rx.recv() => match m { Some(m) => m, None => return },
            _ = stop.wait_for(|s| *s) => return,
        };
        let key = msg.key().to_key();
        if !waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone())
        {
            continue;
        }
        let (worker, gate, waiting) = (worker.clone(), gate.clone(), waiting.clone());
        let queue = queue.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let place = tokio::select! {
                p = gate.acquire(&msg.tenant) => Some(p),
                _ = stop.wait_for(|s| *s) => None,
            };
            waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            let Some(_place) = place else { return };
            // `Outcome::Busy` is dropped too: after start-up recovery every live lease belongs
            // to a run in this process, which finishes the job itself.
            match worker.handle(&msg, None).await {
                // Too early (a tool not known yet; a sleeping job re-sent by start-up recovery,
                // whose wake-up is rescheduled): back in the queue after the delay.
                Ok(Outcome::Deferred(next, delay)) => {
                    if let Err(e) = queue.enqueue(next, delay).await {
                        tracing::warn!(error = %e, "deferring a task failed; the sweep re-sends it");
                    }
                }
                Ok(Outcome::Rescheduled(next, delay)) => {
                    if let Err(e) = queue.enqueue(next, delay).await {
                        tracing::warn!(error = %e, "rescheduling a sleeping task failed; the sweep re-sends it");
                    }
                }
                Ok(_) => {}
                // The store failed; the sweep re-enqueues the task later.
                Err(e) => tracing::error!(task_id = %msg.task_id, error = %e, "worker failed"),
            }
        });
    }
}

async fn run_sweep(engine: Engine, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Err(e) = engine.sweep(every * 2).await {
            tracing::error!(error = %e, "orphan sweep failed");
        }
        match engine.purge_expired().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(tasks = n, "purged expired tasks"),
            Err(e) => tracing::error!(error = %e, "purging expired tasks failed"),
        }
    }
}

#[cfg(test)]
mod tests;
