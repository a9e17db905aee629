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
//! Saves are spaced by an interval; the last one happens when the inputs close.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use dataflows::model::Time;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::Operator;
use timely::dataflow::Stream;

use super::{Checkpoint, ProgressRecord, ProgressStore};
use crate::sink::operator::ErrorSlot;

/// Called with each record the operator saved (for metrics and logs).
pub type OnCommit = Box<dyn Fn(&ProgressRecord)>;

pub fn commit_progress<'scope>(
    checkpoints: Stream<'scope, Time, Vec<Checkpoint>>,
    acknowledged: Stream<'scope, Time, Vec<crate::dead_letter::DeadLetter>>,
    store: Option<Box<dyn ProgressStore>>,
    interval: Duration,
    errors: ErrorSlot,
    on_commit: OnCommit,
) {
    let scope = checkpoints.scope();
    checkpoints.binary_frontier::<_, CapacityContainerBuilder<Vec<()>>, _, _, _, _>(
        acknowledged,
        Exchange::new(|_: &Checkpoint| 0),
        Pipeline,
        "ProgressCommit",
        move |_capability, info| {
            let activator = scope.activator_for(info.address);
            let mut pending: BTreeMap<Time, Vec<Checkpoint>> = BTreeMap::new();
            let mut record = ProgressRecord::default();
            let mut unsaved = false;
            let mut last_save = Instant::now() - interval;
            let mut store = store;
            let failed = Rc::new(RefCell::new(false));
            move |(checkpoints, checkpoint_frontier), (acks, ack_frontier), _output| {
                checkpoints.for_each(|capability, data| {
                    if let Some(time) = capability.least() {
                        pending.entry(*time).or_default().append(data);
                    }
                });
                // Only the frontier matters here; the dead letters went to their sink.
                acks.for_each(|_capability, _data| {});
                let Some(store) = store.as_mut() else {
                    pending.clear();
                    return;
                };
                if *failed.borrow() {
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
                if unsaved {
                    let closing = upper.is_none();
                    if closing || last_save.elapsed() >= interval {
                        match store.save(&record) {
                            Ok(()) => {
                                unsaved = false;
                                last_save = Instant::now();
                                on_commit(&record);
                            }
                            Err(error) => {
                                *failed.borrow_mut() = true;
                                errors
                                    .borrow_mut()
                                    .get_or_insert(error.context("cannot save the progress record"));
                            }
                        }
                    } else {
                        activator.activate_after(interval.saturating_sub(last_save.elapsed()));
                    }
                }
            }
        },
    );
}
