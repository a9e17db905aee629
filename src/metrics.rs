//! Process-wide counters of what the job has done, shared by its workers.
//!
//! Counters only grow and are read without coordination; they feed the progress line,
//! the final summary and the metrics endpoint.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct JobMetrics {
    /// Records read by this process's workers (rejected ones included).
    pub records_read: AtomicU64,
    /// Records rejected by this process's workers.
    pub records_rejected: AtomicU64,
    /// Pair upserts written by this process's sinks.
    pub pairs_upserted: AtomicU64,
    /// Pair deletes written by this process's sinks.
    pub pairs_deleted: AtomicU64,
    /// Pairs that exist, as far as this process's sinks have seen.
    pub pairs_live: AtomicI64,
    /// Dead letters written by this process's sinks.
    pub dead_letters_written: AtomicU64,
}

impl JobMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Accounts for changes written to the change output.
    pub fn record_changes(&self, changes: &[dataflows::PairChange]) {
        let mut upserts = 0;
        let mut live = 0i64;
        for change in changes {
            match (change.figures.is_some(), change.previous.is_some()) {
                (true, false) => live += 1,
                (false, true) => live -= 1,
                _ => {}
            }
            upserts += u64::from(change.figures.is_some());
        }
        Self::add(&self.pairs_upserted, upserts);
        Self::add(&self.pairs_deleted, changes.len() as u64 - upserts);
        self.pairs_live.fetch_add(live, Ordering::Relaxed);
    }
}
