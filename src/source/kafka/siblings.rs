//! The live batches of one process's workers, so that they can share batch times.
//!
//! Each worker cuts its own batches, at moments of its own (its partitions, its pauses), so
//! wall-clock times alone give two workers' batches different times and a pair fed by both
//! changes at each. Workers of one process share memory: a worker that opens a batch
//! while a sibling's batch is open takes the sibling's time (it holds the frontier there
//! anyway), and a quiet worker passes a time a sibling has closed at once, instead of
//! waiting for the wall clock to reach it. They also count the records of a shared time
//! together, so a flood spread over the workers is told from a trickle as it is with one
//! worker, and a shared time ends for all of them at once: it grows until none of them has
//! read for a while, and once one closes it the others close it too, instead of each
//! cutting the flood at pauses of its own. Workers of other processes are not seen: theirs
//! stay on the wall-clock grid.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use dataflows::model::Time;

#[derive(Debug, Default)]
pub struct SiblingBatches {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Worker index -> the time of its open batch.
    open: BTreeMap<usize, Time>,
    /// The greatest time a worker of this process has closed.
    last_closed: Option<Time>,
    /// What every worker has read at each time some worker still has open.
    read: BTreeMap<Time, SharedTime>,
}

/// What the process's workers have read at one time, and whether one has closed it.
#[derive(Clone, Copy, Debug, Default)]
pub struct SharedTime {
    pub records: u64,
    /// When the last of them was read, by any worker.
    pub last_read: Option<Instant>,
    /// A worker has closed this time (or a later one).
    pub closed: bool,
}

/// What a worker sees of its siblings.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    /// The least time of a sibling's open batch.
    pub open: Option<Time>,
    /// The greatest time a worker of the process has closed.
    pub last_closed: Option<Time>,
}

impl SiblingBatches {
    /// The shared state; a worker that panicked holding it left it whole (no change can
    /// panic between its steps), so a poisoned lock is still read.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What `worker` sees of the others.
    pub fn seen_by(&self, worker: usize) -> Seen {
        let state = self.state();
        Seen {
            open: state
                .open
                .iter()
                .filter(|(index, _)| **index != worker)
                .map(|(_, time)| *time)
                .min(),
            last_closed: state.last_closed,
        }
    }

    pub fn opened(&self, worker: usize, time: Time) {
        let mut state = self.state();
        state.open.insert(worker, time);
    }

    /// `worker` stops (its source is dropped): its open batch holds nobody any more.
    pub fn left(&self, worker: usize) {
        let mut state = self.state();
        state.open.remove(&worker);
    }

    pub fn closed(&self, worker: usize, time: Time) {
        let mut state = self.state();
        state.open.remove(&worker);
        state.last_closed = state.last_closed.max(Some(time));
        // Counts of times no worker has open any more are never asked for again.
        let least_open = state.open.values().min().copied().unwrap_or(Time::MAX);
        state.read.retain(|&counted, _| counted >= least_open);
    }

    /// A worker read `records` more at `time`, which it has open, the last at `last_read`;
    /// returns what the process's workers have read at `time` in all.
    pub fn read(&self, time: Time, records: u64, last_read: Instant) -> SharedTime {
        let mut state = self.state();
        let closed = state.last_closed.is_some_and(|closed| closed >= time);
        let shared = state.read.entry(time).or_default();
        shared.records += records;
        shared.last_read = shared.last_read.max(Some(last_read));
        SharedTime { closed, ..*shared }
    }
}
