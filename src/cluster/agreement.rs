//! Agreements among the workers of a cluster, before the job's dataflow starts.

use std::cell::RefCell;
use std::rc::Rc;

use dataflows::model::Time;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Input, Inspect, Probe};
use timely::worker::Worker;

/// Every worker proposes a time; every worker gets the greatest proposal.
pub fn agree_on_greatest(worker: &mut Worker, proposal: Time) -> Time {
    let agreed = Rc::new(RefCell::new(proposal));
    let seen = agreed.clone();
    let (mut input, probe) = worker.dataflow_named::<u64, _, _>("AgreeOnLiveTime", move |scope| {
        let (input, proposals) = scope.new_input::<Vec<Time>>();
        let (probe, _) = proposals
            .broadcast()
            .inspect(move |time| {
                let mut seen = seen.borrow_mut();
                *seen = (*seen).max(*time);
            })
            .probe();
        (input, probe)
    });
    input.send(proposal);
    input.advance_to(1);
    drop(input);
    while !probe.done() {
        worker.step();
    }
    let agreed = *agreed.borrow();
    agreed
}
