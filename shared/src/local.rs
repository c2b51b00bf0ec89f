//! The embedded default: one process serving the MCP endpoint, the task endpoints and the
//! worker, over the durable embedded store and the in-process queue. No AWS, no Docker.
//!
//! At start-up it re-discovers unfinished tasks from the store (the in-process queue does not
//! survive a restart; the store does), so a job interrupted by a crash resumes from its last
//! checkpoint. A periodic sweep re-enqueues orphans and purges expired tasks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

use crate::auth::{AuthSettings, Authenticator};
use crate::engine::{Engine, TaskSettings};
use crate::handler::{McpService, ServiceConfig};
use crate::protocol::state::StateSealer;
use crate::queue::{LocalQueue, WorkMessage, WorkQueue};
use crate::store::TaskStore;
use crate::store::embedded::EmbeddedStore;
use crate::tools::{Registry, Tool};
use crate::worker::{Worker, WorkerSettings};

/// Which tool set to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSet {
    /// The built-in tools.
    Builtin,
    /// Exactly the conformance suite's fixtures.
    Conformance,
}

/// Options of `mcp-tasks serve`.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Directory of the embedded database and the request-state key.
    pub data_dir: PathBuf,
    /// Tool set.
    pub tools: ToolSet,
    /// Endpoint settings.
    pub service: ServiceConfig,
    /// Task settings.
    pub tasks: TaskSettings,
    /// Worker settings.
    pub worker: WorkerSettings,
    /// Most jobs running at once.
    pub max_concurrent_jobs: usize,
    /// How often the sweep runs.
    pub sweep_every: Duration,
    /// Bearer-token auth; `None` serves every request as the local tenant (loopback only).
    pub auth: Option<AuthSettings>,
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
            tools: ToolSet::Builtin,
            service: ServiceConfig::default(),
            tasks: TaskSettings::default(),
            worker: WorkerSettings::default(),
            max_concurrent_jobs: 10_000,
            sweep_every: Duration::from_secs(15),
            auth: None,
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
    /// The embedded database.
    #[error(
        "opening the task database failed (is another mcp-tasks using this data directory?): {0}"
    )]
    Store(#[from] crate::store::StoreError),
    /// The listen address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
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
    shutdown: watch::Sender<bool>,
    http: JoinHandle<()>,
}

impl LocalServer {
    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Serves until `signal` completes (then shuts down gracefully) or the HTTP server stops
    /// by itself (an error, already logged).
    pub async fn run_until(mut self, signal: impl std::future::Future<Output = ()>) {
        tokio::select! {
            _ = signal => {
                let _ = self.shutdown.send(true);
                let _ = (&mut self.http).await;
            }
            _ = &mut self.http => {}
        }
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

/// Starts the local server: store, queue, worker pool, recovery, sweep and HTTP.
pub async fn start(opts: LocalOptions) -> Result<LocalServer, StartError> {
    let dir_err = |source| StartError::DataDir {
        path: opts.data_dir.clone(),
        source,
    };
    std::fs::create_dir_all(&opts.data_dir).map_err(dir_err)?;
    let key = state_key(&opts.data_dir).map_err(dir_err)?;
    let store: Arc<dyn TaskStore> =
        Arc::new(EmbeddedStore::open(&opts.data_dir.join("tasks.redb"))?);
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
    let tools: Vec<Arc<dyn Tool>> = match opts.tools {
        ToolSet::Builtin => crate::tools::builtin::builtin_tools(),
        ToolSet::Conformance => crate::tools::fixtures::conformance_tools(),
    };
    let registry = Arc::new(Registry::new(tools));
    let engine = Engine::new(store.clone(), queue.clone(), opts.tasks.clone());
    #[allow(unused_mut)]
    let mut worker_settings = opts.worker.clone();
    #[cfg(feature = "fault-injection")]
    if let Some(n) = opts.faults.max_interruptions {
        worker_settings.max_interruptions = n;
    }
    let worker = Arc::new(Worker::new(
        store,
        queue.clone(),
        registry.clone(),
        worker_settings,
    ));
    let (shutdown, mut stop) = watch::channel(false);

    tokio::spawn(run_worker_pool(
        worker,
        rx,
        opts.max_concurrent_jobs,
        stop.clone(),
    ));
    match engine.recover().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(tasks = n, "recovered unfinished tasks"),
        Err(e) => tracing::error!(error = %e, "start-up recovery failed"),
    }
    tokio::spawn(run_sweep(engine.clone(), opts.sweep_every, stop.clone()));

    let mut service = McpService::new(
        opts.service.clone(),
        engine,
        registry,
        StateSealer::new(key),
    );
    if let Some(auth) = opts.auth.clone() {
        service = service.with_auth(Authenticator::new(auth));
    }
    let service = Arc::new(service);
    let listener = TcpListener::bind(opts.listen)
        .await
        .map_err(|source| StartError::Listen {
            addr: opts.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen {
        addr: opts.listen,
        source,
    })?;
    let app = crate::http::router(service);
    let http = tokio::spawn(async move {
        let graceful = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(graceful)
            .await
        {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok(LocalServer {
        addr,
        shutdown,
        http,
    })
}

/// Runs every message as its own tokio task (jobs mostly wait on I/O, so thousands run at
/// once), bounded by a semaphore.
async fn run_worker_pool(
    worker: Arc<Worker>,
    mut rx: mpsc::UnboundedReceiver<WorkMessage>,
    max: usize,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(max.max(1)));
    loop {
        let msg = tokio::select! {
            m = rx.recv() => match m { Some(m) => m, None => return },
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let worker = worker.clone();
        tokio::spawn(async move {
            let _permit = permit;
            // `Outcome::Busy` is dropped too: after start-up recovery every live lease belongs
            // to a run in this process, which finishes the job itself.
            if let Err(e) = worker.handle(&msg, None).await {
                // The store failed; the sweep re-enqueues the task later.
                tracing::error!(task_id = %msg.task_id, error = %e, "worker failed");
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
