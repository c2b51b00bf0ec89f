//! The writer thread: batches of writes applied in one transaction each, every write's
//! condition checked inside it, and the index tables kept in step with the records.

use redb::{Database, ReadableTable, WriteTransaction};
use tokio::sync::mpsc;

use super::cache::ReadCache;
use super::{
    ACTIVE, ARGUMENTS, CREATED, EXPIRY, FULL, MAX_BATCH, Op, Pending, TASKS, backend, places,
};
use crate::store::{StoreError, decode, key};
use crate::task::TaskRecord;

/// The writer thread: takes what is queued, applies it in one transaction, commits once,
/// then answers every caller.
pub(super) fn run_writer(
    db: &Database,
    cache: &ReadCache,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        cache.begin(&batch);
        let committed = commit_batch(db, &batch);
        cache.end(&batch, committed.as_ref().ok().map(Vec::as_slice));
        match committed {
            Ok(outcomes) => {
                for (p, out) in batch.into_iter().zip(outcomes) {
                    let _ = p.reply.send(out);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, writes = batch.len(), "task store commit failed");
                for p in batch {
                    let _ = p.reply.send(Err(backend(e.to_string())));
                }
            }
        }
    }
}

/// Applies a batch; the outer error aborts the whole transaction (nothing is written).
fn commit_batch(
    db: &Database,
    batch: &[Pending],
) -> Result<Vec<Result<u64, StoreError>>, StoreError> {
    let txn = db.begin_write().map_err(backend)?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for p in batch {
        outcomes.push(apply(&txn, &p.op)?);
    }
    txn.commit().map_err(backend)?;
    Ok(outcomes)
}

/// One record's lookup: `Err` when it does not decode (fail that write only).
type Lookup = Result<Option<TaskRecord>, StoreError>;

/// The stored record of `k`. The outer error is the transaction's (abort the batch).
fn stored(txn: &WriteTransaction, k: &str) -> Result<Lookup, StoreError> {
    let tasks = txn.open_table(TASKS).map_err(backend)?;
    let guard = tasks.get(k).map_err(backend)?;
    Ok(guard.map(|v| decode(v.value())).transpose())
}

/// One conditional write inside the batch's transaction: `Ok(Err(Conflict))` when its
/// condition fails (nothing written for it), `Err` when the transaction itself failed.
fn apply(txn: &WriteTransaction, op: &Op) -> Result<Result<u64, StoreError>, StoreError> {
    match op {
        Op::Create(task, bytes, arguments, max_active) => {
            let k = key(task.key());
            match stored(txn, &k)? {
                Ok(None) => {}
                Ok(Some(_)) => return Ok(Err(StoreError::Conflict)),
                Err(e) => return Ok(Err(e)),
            }
            // Counted inside the batch's transaction, in arrival order: two creations of one
            // tenant in the same batch see each other.
            if !task.status.is_terminal() && places::held(txn, &task.tenant)? >= *max_active as u64
            {
                return Ok(Ok(FULL));
            }
            txn.open_table(ARGUMENTS)
                .map_err(backend)?
                .insert(k.as_str(), arguments.as_slice())
                .map_err(backend)?;
            put(txn, &k, task, bytes, None)?;
            Ok(Ok(CREATED))
        }
        Op::Update(next, bytes) => {
            let k = key(next.key());
            let prev = match stored(txn, &k)? {
                Ok(Some(prev)) => prev,
                Ok(None) => return Ok(Err(StoreError::Conflict)),
                Err(e) => return Ok(Err(e)),
            };
            if prev.version + 1 != next.version || prev.status.is_terminal() {
                return Ok(Err(StoreError::Conflict));
            }
            put(txn, &k, next, bytes, Some(&prev))?;
            Ok(Ok(next.version))
        }
        Op::Delete(k) => {
            // A record that does not decode is still removed (its index entries may stay
            // behind; they point at nothing and are skipped).
            let prev = match stored(txn, k)? {
                Ok(Some(prev)) => Some(prev),
                Ok(None) => return Ok(Ok(0)),
                Err(_) => None,
            };
            txn.open_table(TASKS)
                .map_err(backend)?
                .remove(k.as_str())
                .map_err(backend)?;
            txn.open_table(ARGUMENTS)
                .map_err(backend)?
                .remove(k.as_str())
                .map_err(backend)?;
            let was_active = txn
                .open_table(ACTIVE)
                .map_err(backend)?
                .remove(k.as_str())
                .map_err(backend)?
                .is_some();
            if was_active {
                places::moved(txn, k, false)?;
            }
            if let Some(at) = prev.as_ref().and_then(TaskRecord::expires_at_ms) {
                txn.open_table(EXPIRY)
                    .map_err(backend)?
                    .remove((at, k.as_str()))
                    .map_err(backend)?;
            }
            Ok(Ok(0))
        }
    }
}

/// Writes `task` and keeps the two index tables, and its tenant's places, in step with it.
fn put(
    txn: &WriteTransaction,
    k: &str,
    task: &TaskRecord,
    bytes: &[u8],
    previous: Option<&TaskRecord>,
) -> Result<(), StoreError> {
    let mut tasks = txn.open_table(TASKS).map_err(backend)?;
    let mut active = txn.open_table(ACTIVE).map_err(backend)?;
    let mut expiry = txn.open_table(EXPIRY).map_err(backend)?;
    tasks.insert(k, bytes).map_err(backend)?;
    let (was, is) = if task.status.is_terminal() {
        (active.remove(k).map_err(backend)?.is_some(), false)
    } else {
        (active.insert(k, ()).map_err(backend)?.is_some(), true)
    };
    if was != is {
        places::moved(txn, k, is)?;
    }
    if let Some(at) = previous.and_then(TaskRecord::expires_at_ms) {
        expiry.remove((at, k)).map_err(backend)?;
    }
    if let Some(at) = task.expires_at_ms() {
        expiry.insert((at, k), ()).map_err(backend)?;
    }
    Ok(())
}
