//! Runs a [`Sink`] as a dataflow operator.
//!
//! ```text
//!   every worker:  records at t --> [ SortedRuns: sorted, encoded runs ] --runs at t-->
//!   the sink's:    [ keep t's runs ] --(frontier passes t)--> sink.write(t, merged slice)…
//!                                                            sink.flush(frontier)
//!   output: the records the sink rejected for good, as dead letters at their times;
//!           its frontier is the acknowledged frontier (capability held there)
//! ```
//!
//! The sort is done where the records are made, so a large time (a rebuild's end) is
//! sorted by every worker at once and the sink's worker only merges.
//!
//! Invariant: the output frontier never passes a time before the sink has acknowledged
//! every record of it, and a rejection of a record at `t` leaves at `t`, before that.
//! A worker without a sink acknowledges immediately.

use std::collections::BTreeMap;
use std::time::Duration;

use dataflows::model::Time;
use serde::de::DeserializeOwned;
use serde::Serialize;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{ParallelizationContract, Pipeline};
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use super::contract::{Sink, SinkError};
use super::sorted_runs::{RunBuilder, SortKey, SortedRun, TimeRuns};
use crate::dead_letter::DeadLetter;
use crate::worker_error::{report, ErrorSlot, OperatorError};

/// How often an operator with unacknowledged writes looks at its sink again.
const RETRY_POLL: Duration = Duration::from_millis(5);

/// Extension trait: deliver a stream into a sink.
pub trait SinkOperator<'scope, R> {
    /// Sorts each time's records into runs on this worker, brings the runs to the sink's
    /// worker through `pact`, and writes them there, merged, once the time is complete.
    fn sink_into<P>(
        self,
        pact: P,
        name: &str,
        sink: Option<Box<dyn Sink<R>>>,
        errors: ErrorSlot,
    ) -> Stream<'scope, Time, Vec<DeadLetter>>
    where
        P: ParallelizationContract<Time, Vec<SortedRun>>;
}

impl<'scope, R> SinkOperator<'scope, R> for Stream<'scope, Time, Vec<R>>
where
    R: Ord + SortKey + Serialize + DeserializeOwned + Send + 'static,
{
    fn sink_into<P>(
        self,
        pact: P,
        name: &str,
        sink: Option<Box<dyn Sink<R>>>,
        errors: ErrorSlot,
    ) -> Stream<'scope, Time, Vec<DeadLetter>>
    where
        P: ParallelizationContract<Time, Vec<SortedRun>>,
    {
        let scope = self.scope();
        let name = name.to_owned();
        sorted_runs(self, &format!("{name}Runs")).unary_frontier::<CapacityContainerBuilder<Vec<DeadLetter>>, _, _, _>(
            pact,
            &name.clone(),
            move |capability, info| {
                let activator = scope.activator_for(info.address);
                let mut held: Option<Capability<Time>> = Some(capability);
                let mut pending: BTreeMap<Time, TimeRuns> = BTreeMap::new();
                let mut sink = sink;
                let mut failed = false;
                move |(input, frontier), output| {
                    input.for_each(|capability, data| {
                        if let Some(time) = capability.least() {
                            let time = pending.entry(*time).or_default();
                            data.drain(..).for_each(|run| time.push(run));
                        }
                    });
                    if failed {
                        return;
                    }
                    let upper = frontier.frontier().first().copied();
                    let Some(sink) = sink.as_mut() else {
                        // Nothing to deliver on this worker: acknowledge as the input advances.
                        if !pending.is_empty() {
                            failed = true;
                            report(&errors, OperatorError::new(&name, SinkError::Misrouted(name.clone())));
                            return;
                        }
                        match (upper, held.as_mut()) {
                            (Some(upper), Some(capability)) => capability.downgrade(&upper),
                            (None, _) => held = None,
                            (Some(_), None) => {}
                        }
                        return;
                    };
                    let outcome = (|| -> Result<Option<Time>, SinkError> {
                        while let Some(entry) = pending.first_entry() {
                            if upper.is_some_and(|upper| *entry.key() >= upper) {
                                break;
                            }
                            let (time, records) = entry.remove_entry();
                            records.drain_sorted(|slice: &[R]| sink.write(time, slice))?;
                        }
                        sink.flush(upper)
                    })();
                    match outcome {
                        Ok(acknowledged) => {
                            if let Some(capability) = held.as_ref() {
                                for (time, letter) in sink.take_rejected() {
                                    output.session(&capability.delayed(&time)).give(letter);
                                }
                            }
                            match acknowledged {
                                Some(time) => {
                                    if let Some(capability) = held.as_mut() {
                                        if *capability.time() < time {
                                            capability.downgrade(&time);
                                        }
                                    }
                                }
                                None => held = None,
                            }
                            let behind = match (acknowledged, upper) {
                                (Some(acked), Some(upper)) => acked < upper,
                                (Some(_), None) => true,
                                (None, _) => false,
                            };
                            if behind {
                                activator.activate_after(RETRY_POLL);
                            }
                        }
                        Err(error) => {
                            failed = true;
                            report(&errors, OperatorError::new(&name, error));
                        }
                    }
                }
            },
        )
    }
}

/// Each time's records on this worker as sorted runs: a run leaves as soon as it is full,
/// the rest once the input has passed the time.
fn sorted_runs<'scope, R>(records: Stream<'scope, Time, Vec<R>>, name: &str) -> Stream<'scope, Time, Vec<SortedRun>>
where
    R: Ord + SortKey + Serialize + 'static,
{
    records.unary_frontier::<CapacityContainerBuilder<Vec<SortedRun>>, _, _, _>(Pipeline, name, |_capability, _info| {
        let mut open: BTreeMap<Time, (Capability<Time>, RunBuilder<R>)> = BTreeMap::new();
        move |(input, frontier), output| {
            input.for_each(|capability, data| {
                let Some(time) = capability.least().copied() else {
                    return;
                };
                let (capability, builder) = open.entry(time).or_insert_with(|| {
                    let retained = capability.retain_least(0).expect("a least time");
                    (retained, RunBuilder::default())
                });
                if let Some(run) = builder.append(data) {
                    output.session(&*capability).give(run);
                }
            });
            while let Some(entry) = open.first_entry() {
                if frontier.less_equal(entry.key()) {
                    break;
                }
                let (capability, builder) = entry.remove();
                if let Some(run) = builder.finish() {
                    output.session(&capability).give(run);
                }
            }
        }
    })
}
