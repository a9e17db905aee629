//! Runs a [`Sink`] as a dataflow operator.
//!
//! ```text
//!   records at t --> [ buffer by time ] --(frontier passes t)--> sink.write(t, sorted slice)…
//!                    (large times: sorted,                         sink.flush(frontier)
//!                     encoded runs)
//!   output: the records the sink rejected for good, as dead letters at their times;
//!           its frontier is the acknowledged frontier (capability held there)
//! ```
//!
//! Invariant: the output frontier never passes a time before the sink has acknowledged
//! every record of it, and a rejection of a record at `t` leaves at `t`, before that.
//! A worker without a sink acknowledges immediately.

use std::collections::BTreeMap;
use std::time::Duration;

use dataflows::model::Time;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::ParallelizationContract;
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;
use timely::ExchangeData;

use super::contract::{Sink, SinkError};
use super::time_records::TimeRecords;
use crate::dead_letter::DeadLetter;
use crate::worker_error::{report, ErrorSlot, OperatorError};

/// How often an operator with unacknowledged writes looks at its sink again.
const RETRY_POLL: Duration = Duration::from_millis(5);

/// Extension trait: deliver a stream into a sink.
pub trait SinkOperator<'scope, R> {
    fn sink_into<P>(
        self,
        pact: P,
        name: &str,
        sink: Option<Box<dyn Sink<R>>>,
        errors: ErrorSlot,
    ) -> Stream<'scope, Time, Vec<DeadLetter>>
    where
        P: ParallelizationContract<Time, Vec<R>>;
}

impl<'scope, R> SinkOperator<'scope, R> for Stream<'scope, Time, Vec<R>>
where
    R: ExchangeData + Ord,
{
    fn sink_into<P>(
        self,
        pact: P,
        name: &str,
        sink: Option<Box<dyn Sink<R>>>,
        errors: ErrorSlot,
    ) -> Stream<'scope, Time, Vec<DeadLetter>>
    where
        P: ParallelizationContract<Time, Vec<R>>,
    {
        let scope = self.scope();
        let name = name.to_owned();
        self.unary_frontier::<CapacityContainerBuilder<Vec<DeadLetter>>, _, _, _>(
            pact,
            &name.clone(),
            move |capability, info| {
                let activator = scope.activator_for(info.address);
                let mut held: Option<Capability<Time>> = Some(capability);
                let mut pending: BTreeMap<Time, TimeRecords<R>> = BTreeMap::new();
                let mut sink = sink;
                let mut failed = false;
                move |(input, frontier), output| {
                    input.for_each(|capability, data| {
                        if let Some(time) = capability.least() {
                            pending.entry(*time).or_default().append(data);
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
                            records.drain_sorted(|slice| sink.write(time, slice))?;
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
