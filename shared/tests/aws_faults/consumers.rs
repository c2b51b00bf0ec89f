//! The consumers: the worker function's receive / handle / delete loop over the queue.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use mcp_tasks_core::aws::lambda::{Action, decide};
use mcp_tasks_core::queue::WorkKind;
use mcp_tasks_core::task::TaskStatus;
use mcp_tasks_core::worker::{Outcome, Worker, WorkerSettings};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

use crate::common;
use crate::rig::{Delivery, Rig};
use crate::tally::{at, clock};
use crate::{MAX_RECEIVES, lock};

/// What the consumers saw.
pub struct Traffic {
    pub deliveries: AtomicUsize,
    pub give_ups: AtomicUsize,
    /// Outcomes by name.
    pub outcomes: Mutex<BTreeMap<&'static str, usize>>,
    /// Per task: every distinct message id with its kind.
    pub messages: Mutex<HashMap<String, HashMap<String, WorkKind>>>,
    /// Per task: the `Finished` outcomes of its runs.
    pub finished: Mutex<HashMap<String, Vec<TaskStatus>>>,
    /// When a message was last received.
    pub last_seen: Mutex<Instant>,
    /// Per task: each delivery and its outcome, for the diagnosis of a failure.
    pub log: Mutex<HashMap<String, Vec<String>>>,
    pub crash: Option<Crash>,
}

/// Which runs to kill.
pub struct Crash {
    /// Kills still to do per task.
    pub left: Mutex<HashMap<String, u32>>,
    /// Tasks with a kill in progress (a redelivery meanwhile runs normally).
    pub busy: Mutex<std::collections::HashSet<String>>,
    /// Per task, the stored checkpoint after each kill.
    pub kills: Mutex<HashMap<String, Vec<u64>>>,
    pub rng: Mutex<common::Rng>,
}

impl Traffic {
    pub fn new(crash: Option<Crash>) -> Arc<Self> {
        Arc::new(Self {
            deliveries: AtomicUsize::new(0),
            give_ups: AtomicUsize::new(0),
            outcomes: Mutex::default(),
            messages: Mutex::default(),
            finished: Mutex::default(),
            last_seen: Mutex::new(Instant::now()),
            log: Mutex::default(),
            crash,
        })
    }

    pub fn count(&self, what: &'static str) {
        *lock(&self.outcomes).entry(what).or_default() += 1;
    }

    pub fn outcome(&self, name: &str) -> usize {
        lock(&self.outcomes).get(name).copied().unwrap_or(0)
    }

    pub fn finished_of(&self, task_id: &str) -> Vec<TaskStatus> {
        lock(&self.finished)
            .get(task_id)
            .cloned()
            .unwrap_or_default()
    }

    pub fn summary(&self) -> String {
        lock(&self.outcomes)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One delivery through the worker, then the worker function's verdict on the message.
pub async fn deliver(
    rig: &Rig,
    worker: &Arc<Worker>,
    traffic: &Traffic,
    invocation: Duration,
    d: Delivery,
) {
    traffic.deliveries.fetch_add(1, Ordering::Relaxed);
    lock(&traffic.messages)
        .entry(d.msg.task_id.to_string())
        .or_default()
        .insert(d.message_id.clone(), d.msg.kind);
    let deadline = Instant::now() + invocation;
    let task_id = d.msg.task_id.to_string();
    let kill = traffic.crash.as_ref().and_then(|c| {
        let mut busy = lock(&c.busy);
        let wanted = lock(&c.left).get(&task_id).copied().unwrap_or(0) > 0;
        (wanted && busy.insert(task_id.clone())).then(|| lock(&c.rng).range(0, 2))
    });
    let outcome = match kill {
        None => worker.handle(&d.msg, Some(deadline)).await,
        Some(extra) => {
            let crash = traffic.crash.as_ref().expect("a crash plan");
            let from = at(&rig.task(&task_id).await);
            let (w, m) = (worker.clone(), d.msg.clone());
            let run = tokio::spawn(async move { w.handle(&m, Some(deadline)).await });
            let out = loop {
                if run.is_finished() {
                    break Some(run.await.expect("the worker run panicked"));
                }
                let t = rig.task(&task_id).await;
                if t.status == TaskStatus::Working && t.lease.is_some() && at(&t) > from + extra {
                    // Mid-step, after at least one checkpoint of this run: the process dies.
                    let pause = lock(&crash.rng).range(0, 30);
                    sleep(Duration::from_millis(pause)).await;
                    run.abort();
                    match run.await {
                        Ok(out) => break Some(out),
                        Err(e) if e.is_cancelled() => break None,
                        Err(e) => panic!("the worker run panicked: {e}"),
                    }
                }
                sleep(Duration::from_millis(10)).await;
            };
            lock(&crash.busy).remove(&task_id);
            match out {
                Some(out) => out,
                None => {
                    // Let writes already on the wire land before reading what was saved.
                    sleep(Duration::from_millis(300)).await;
                    let saved = at(&rig.task(&task_id).await);
                    *lock(&crash.left).entry(task_id.clone()).or_default() -= 1;
                    lock(&crash.kills).entry(task_id).or_default().push(saved);
                    traffic.count("killed");
                    // The message is neither deleted nor failed: it comes back after the
                    // visibility timeout, as after a Lambda crash.
                    return;
                }
            }
        }
    };
    traffic.count(outcome.as_ref().map_or("error", Outcome::label));
    lock(&traffic.log)
        .entry(task_id.clone())
        .or_default()
        .push(format!(
            "{:8.3}s delivery of {:?} {} (receive {}) -> {outcome:?}",
            clock(),
            d.msg.kind,
            d.message_id,
            d.receives
        ));
    if let Ok(Outcome::Finished(s)) = &outcome {
        lock(&traffic.finished).entry(task_id).or_default().push(*s);
    }
    if let Err(e) = &outcome {
        eprintln!("worker error (the message is retried): {e}");
    }
    match decide(&outcome, d.receives >= MAX_RECEIVES) {
        Action::Done => {
            if !rig.ack(&d).await {
                traffic.count("stale_receipt");
            }
        }
        Action::Retry => {}
        Action::GiveUp => {
            traffic.give_ups.fetch_add(1, Ordering::Relaxed);
            let _ = worker.abandon(&d.msg).await;
            rig.ack(&d).await;
        }
    }
}

/// Consumers over the queue, each its own worker "instance", a batch at a time.
pub struct Consumers {
    pub stop: Arc<AtomicBool>,
    pub handles: Vec<JoinHandle<()>>,
    pub traffic: Arc<Traffic>,
}

pub fn consume(
    rig: &Arc<Rig>,
    workers: &[Arc<Worker>],
    traffic: &Arc<Traffic>,
    invocation: Duration,
) -> Consumers {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = workers
        .iter()
        .map(|w| {
            let (rig, w, traffic, stop) = (rig.clone(), w.clone(), traffic.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let batch = rig.receive(1).await;
                    if batch.is_empty() {
                        continue;
                    }
                    *lock(&traffic.last_seen) = Instant::now();
                    join_all(
                        batch
                            .into_iter()
                            .map(|d| deliver(&rig, &w, &traffic, invocation, d)),
                    )
                    .await;
                }
            })
        })
        .collect();
    Consumers {
        stop,
        handles,
        traffic: traffic.clone(),
    }
}

impl Consumers {
    /// Lets late copies and retried messages through (the queue is quiet for longer than the
    /// visibility timeout, or `max` passed), then stops.
    pub async fn drain_and_stop(self, max: Duration) {
        let until = Instant::now() + max;
        let quiet = Duration::from_millis(3500);
        while Instant::now() < until && lock(&self.traffic.last_seen).elapsed() < quiet {
            sleep(Duration::from_millis(200)).await;
        }
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.await.expect("a consumer panicked");
        }
    }
}

pub fn settings(lease: Duration) -> WorkerSettings {
    WorkerSettings {
        lease,
        check_every: Duration::from_millis(50),
        checkpoint_every: Duration::ZERO,
        deadline_margin: Duration::from_millis(100),
        max_interruptions: 5,
        ..WorkerSettings::default()
    }
}
