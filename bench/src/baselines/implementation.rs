//! What every baseline implements.

use dataflows::decode::Record;
use dataflows::reference::PairState;

/// One way of keeping every pair's figures up to date.
pub trait Implementation {
    fn name(&self) -> &'static str;

    /// Applies one batch, as the approach would, and returns the pair writes it makes.
    fn apply(&mut self, batch: &[Record]) -> u64;

    /// Loads the initial batches the approach's best way; returns the pair writes.
    fn bootstrap(&mut self, batches: &[&[Record]]) -> u64 {
        batches.iter().map(|batch| self.apply(batch)).sum()
    }

    /// Applies one batch to the entities only. An approach too slow to run a whole phase
    /// is timed on a prefix of it and catches up through this, then `settle`.
    fn apply_untimed(&mut self, batch: &[Record]) {
        self.apply(batch);
    }

    /// Brings the pairs up to date after `apply_untimed`.
    fn settle(&mut self) {}

    /// Every existing pair with its figures.
    fn pairs(&self) -> PairState;
}
