//! Commits source offsets once every sink has acknowledged the times they were read in.
//!
//! ```text
//!  checkpoints (per worker, at the time of each closed batch) --Exchange(0)--+
//!                                                                            [ ProgressCommit ] -> store.save
//!  sink acknowledgements (no data, frontier only) ---------------------------+
//! ```
//!
//! A checkpoint at time `t` is committed when both input frontiers have passed `t`: the
//! sinks have acknowledged everything up to `t`, and no checkpoint for `t` is still coming.
//! Saves are spaced by an interval; the last one happens when the inputs close. A save runs
//! on its own thread (`saver.rs`), retried until it succeeds: the worker never waits on it,
//! and the operator holds its capability until the last record is saved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataflows::model::Time;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::Operator;
use timely::dataflow::Stream;

use super::saver::Saver;
use super::{Checkpoint, ProgressError, ProgressRecord, ProgressStore};
use crate::metrics::Metrics;
use crate::worker_error::{report, ErrorSlot, OperatorError};

/// How often the operator looks again while a save is under way.
const SAVE_POLL: Duration = Duration::from_millis(10);

/// Called with each record the operator saved (for metrics and logs).
pub type OnCommit = Box<dyn Fn(&ProgressRecord)>;

pub fn commit_progress<'scope>(
    checkpoints: Stream<'scope, Time, Vec<Checkpoint>>,
    acknowledged: Stream<'scope, Time, Vec<()>>,
    store: Option<Box<dyn ProgressStore>>,
    interval: Duration,
    errors: ErrorSlot,
    on_commit: OnCommit,
    metrics: Arc<Metrics>,
) {
    let scope = checkpoints.scope();
    checkpoints.binary_frontier::<_, CapacityContainerBuilder<Vec<()>>, _, _, _, _>(
        acknowledged,
        Exchange::new(|_: &Checkpoint| 0),
        Pipeline,
        "ProgressCommit",
        move |capability, info| {
            let activator = scope.activator_for(info.address);
            let mut pending: BTreeMap<Time, Vec<Checkpoint>> = BTreeMap::new();
            let mut record = ProgressRecord::default();
            let mut unsaved = false;
            let mut last_save = Instant::now() - interval;
            // Held until the last record is saved, so that the worker waits for it.
            let mut held = Some(capability);
            let mut saver = match store.map(|store| Saver::start(store, metrics)).transpose() {
                Ok(saver) => saver,
                Err(error) => {
                    report(
                        &errors,
                        OperatorError::new("ProgressCommit", ProgressError::SaverStart(error)),
                    );
                    None
                }
            };
            move |(checkpoints, checkpoint_frontier), (acks, ack_frontier), _output| {
                checkpoints.for_each(|capability, data| {
                    if let Some(time) = capability.least() {
                        pending.entry(*time).or_default().append(data);
                    }
                });
                // Frontier only: nothing flows on this input.
                acks.for_each(|_capability, _data| {});
                let Some(active) = saver.as_ref() else {
                    pending.clear();
                    drop(held.take());
                    return;
                };
                for saved in active.take_saved() {
                    on_commit(&saved);
                }
                if active.died() {
                    report(
                        &errors,
                        OperatorError::new("ProgressCommit", ProgressError::SaverStopped),
                    );
                    saver = None;
                    return;
                }
                let frontier = |f: &timely::progress::frontier::MutableAntichain<Time>| f.frontier().first().copied();
                let upper = match (frontier(checkpoint_frontier), frontier(ack_frontier)) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                while let Some(entry) = pending.first_entry() {
                    if upper.is_some_and(|upper| *entry.key() >= upper) {
                        break;
                    }
                    let (time, checkpoints) = entry.remove_entry();
                    for checkpoint in checkpoints {
                        record
                            .offsets
                            .insert((checkpoint.topic, checkpoint.partition), checkpoint.next_offset);
                    }
                    record.time = record.time.max(time);
                    unsaved = true;
                }
                let closing = upper.is_none();
                if unsaved {
                    if closing || last_save.elapsed() >= interval {
                        active.save(record.clone());
                        unsaved = false;
                        last_save = Instant::now();
                    } else {
                        activator.activate_after(interval.saturating_sub(last_save.elapsed()));
                    }
                }
                if !active.idle() {
                    activator.activate_after(SAVE_POLL);
                } else if closing && !unsaved {
                    drop(held.take());
                }
            }
        },
    );
}
