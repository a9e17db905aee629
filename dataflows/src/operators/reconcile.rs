//! Starts the output from what the sinks already hold, not from nothing.
//!
//! After a restart the job rebuilds its state from the changelogs, while its sinks still
//! hold the pairs they were written before. Writing the rebuilt state as if the sinks were
//! empty would rewrite every pair; writing nothing would miss what changed while the job
//! was down. So the collection handed to `pair_changes` is
//!
//! ```text
//!   held                    for times <  live_from   (what the sinks hold)
//!   totals                  for times >= live_from   (what the job computed)
//! ```
//!
//! built as `held (inserted at 0) - held (at live_from) + totals (delayed to live_from)`.
//! At `live_from`, equal figures cancel, and only the pairs whose figures differ from what
//! the sinks hold come out: upserts where they differ, deletes where a held pair no longer
//! exists. Times before `live_from` (the rebuild) must not be written; they only carry the
//! held state, so `live_from` is at least 1: the held pairs need a time of their own.

use differential_dataflow::VecCollection;

use crate::model::{PairKey, Time};
use crate::operators::pair_changes::PairTotals;

/// Extension trait: reconcile computed totals with the pairs the sinks hold.
pub trait ReconcileWithHeld<'scope> {
    /// `held` must contain each held pair once, inserted at time 0; `live_from` > 0.
    fn reconcile_with_held(self, held: Self, live_from: Time) -> Self;
}

impl<'scope> ReconcileWithHeld<'scope> for VecCollection<'scope, Time, (PairKey, PairTotals), isize> {
    fn reconcile_with_held(self, held: Self, live_from: Time) -> Self {
        assert!(live_from > 0, "held pairs need a time before live_from");
        let retired = held.clone().negate().delay(move |_time| live_from);
        self.delay(move |time| (*time).max(live_from))
            .concat(held)
            .concat(retired)
    }
}
