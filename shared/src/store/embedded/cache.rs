//! The embedded store's read cache: decoded records kept in step with the writer thread.

use std::sync::{Arc, Mutex};

use super::{FULL, Op, Pending, StoreError};
use crate::task::TaskRecord;

/// Most bytes of (encoded) records the read cache holds; past it, the oldest entries are
/// dropped.
pub(super) const CACHE_BYTES: usize = 8 * 1024 * 1024;

/// Most records the read cache holds, whatever their size. A decoded record takes several
/// times its encoded size in memory (its JSON values as trees): with the byte bound alone, at
/// 32 MiB, a server that had created ~50,000 small tasks held ~300 MB for the cache. The
/// polls it speeds up are for tasks in flight, which a few thousand entries hold.
pub(super) const CACHE_RECORDS: usize = 4096;

/// Decoded records, kept so a `get` need not open a read transaction and parse JSON.
///
/// It is never stale, because this process is the only writer (redb locks the file) and every
/// write goes through the writer thread, which keeps the cache in step:
/// - before committing a batch, the writer removes the batch's keys and marks them pending;
/// - after the commit it puts the written records in (removes deleted ones), un-marks them and
///   bumps `seq`, and only then answers the writers' callers.
///
/// A `get` that finds its key answers from the cache. One that does not reads the database,
/// then puts what it read in — only if `seq` has not moved since it looked and the key is not
/// pending. So a record read before a commit can never be put in after that commit began: a
/// commit in progress is pending, and a finished one has moved `seq`. (Any other order puts
/// the record in before the writer's pre-commit removal, which then removes it.) Readers during
/// a commit go to the database, which answers in order. The oldest entries are dropped when
/// the cache holds more than [`CACHE_BYTES`] or [`CACHE_RECORDS`]; a dropped entry is simply
/// read again.
pub(super) struct ReadCache {
    state: Mutex<CacheState>,
}

#[derive(Default)]
pub(super) struct CacheState {
    /// By composite key. Hashed with foldhash (seeded per process) rather than SipHash: a
    /// `tasks/get` hashes its key here (~290 of its ~34 k instructions with SipHash), and the
    /// keys put are the server's own task ids, which no client can choose to collide.
    pub(super) records: std::collections::HashMap<String, Cached, foldhash::fast::RandomState>,
    /// Keys in the order they were put, oldest first, each with the stamp of that put: the
    /// eviction order. A key put again or removed since leaves a stale entry here, skipped
    /// when reached and swept out when they outnumber the live ones.
    pub(super) order: std::collections::VecDeque<(String, u64)>,
    /// The stamp of the last put.
    pub(super) stamp: u64,
    pub(super) bytes: usize,
    /// Most bytes held ([`CACHE_BYTES`]; tests make it tiny).
    pub(super) cap: usize,
    pub(super) pending: std::collections::HashSet<String>,
    pub(super) seq: u64,
}

/// One cached record: the record (shared: a `tasks/get` answers from it without a copy), its
/// encoded size, the stamp of its put.
pub(super) struct Cached {
    pub(super) record: Arc<TaskRecord>,
    pub(super) size: usize,
    stamp: u64,
}

impl CacheState {
    pub(super) fn put(&mut self, k: String, record: impl Into<Arc<TaskRecord>>, size: usize) {
        if size > self.cap / 16 {
            self.remove(&k);
            return;
        }
        self.stamp += 1;
        let stamp = self.stamp;
        self.bytes += size;
        if let Some(old) = self.records.insert(
            k.clone(),
            Cached {
                record: record.into(),
                size,
                stamp,
            },
        ) {
            self.bytes -= old.size;
        }
        self.order.push_back((k, stamp));
        // First in, first out: O(1) per eviction (picking "any" key of the map instead made
        // each pick scan the slots its predecessors had emptied).
        while self.bytes > self.cap || self.records.len() > CACHE_RECORDS {
            let Some((victim, put)) = self.order.pop_front() else {
                break;
            };
            if self.records.get(&victim).is_some_and(|c| c.stamp == put) {
                self.remove(&victim);
            }
        }
        if self.order.len() > 2 * self.records.len() + 64 {
            let records = &self.records;
            self.order
                .retain(|(k, put)| records.get(k).is_some_and(|c| c.stamp == *put));
        }
    }

    pub(super) fn remove(&mut self, k: &str) {
        if let Some(c) = self.records.remove(k) {
            self.bytes -= c.size;
        }
    }
}

impl ReadCache {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            state: Mutex::new(CacheState {
                cap,
                ..CacheState::default()
            }),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // Every change under the lock is a single map operation or a bookkeeping sum.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer, before a commit: the batch's keys leave the cache and are pending.
    pub(super) fn begin(&self, batch: &[Pending]) {
        let mut st = self.lock();
        for p in batch {
            let k = p.op.key();
            st.remove(&k);
            st.pending.insert(k);
        }
    }

    /// The writer, after the commit (or its failure: `outcomes` is `None`, nothing changed).
    pub(super) fn end(&self, batch: &[Pending], outcomes: Option<&[Result<u64, StoreError>]>) {
        let mut st = self.lock();
        for (i, p) in batch.iter().enumerate() {
            let k = p.op.key();
            st.pending.remove(&k);
            if outcomes.is_some_and(|o| o[i].is_ok()) {
                match &p.op {
                    // Refused (its tenant's places were taken): nothing was written.
                    Op::Create(..)
                        if outcomes.is_some_and(|o| o[i].as_ref().ok() == Some(&FULL)) => {}
                    Op::Create(t, bytes, ..) | Op::Update(t, bytes) => {
                        st.put(k, t.clone(), bytes.len());
                    }
                    Op::Delete(_) => st.remove(&k),
                }
            }
        }
        st.seq += 1;
    }
}
