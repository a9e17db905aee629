//! Brings each pair's changes to the worker that writes them.
//!
//! [`render_eligibility`] emits every moved pair once per time, on the worker that owns
//! the pair's totals; a sink may be on another worker (file outputs are on worker 0). This
//! is only the exchange: nothing is buffered or consolidated here, since there is nothing
//! to consolidate. The sink operator orders each completed time's changes by pair.
//!
//! Invariant (from `PairTotals`): per time, each pair appears at most once; an upsert's
//! figures differ from the pair's previous ones, and a delete names a pair that existed.
//!
//! [`render_eligibility`]: crate::render_eligibility

use timely::dataflow::operators::Exchange;
use timely::dataflow::Stream;

use crate::model::{PairChange, PairKey, Time};

/// Extension trait: route the pair changes to their writers.
pub trait PairChanges<'scope> {
    /// Moves each change to the worker `route` picks for its pair.
    fn pair_changes<F>(self, route: F) -> Stream<'scope, Time, Vec<PairChange>>
    where
        F: Fn(&PairKey) -> u64 + 'static;
}

impl<'scope> PairChanges<'scope> for Stream<'scope, Time, Vec<PairChange>> {
    fn pair_changes<F>(self, route: F) -> Stream<'scope, Time, Vec<PairChange>>
    where
        F: Fn(&PairKey) -> u64 + 'static,
    {
        self.exchange(move |change: &PairChange| route(&change.pair))
    }
}
