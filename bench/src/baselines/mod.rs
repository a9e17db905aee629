//! The approaches the engine replaces, written here so they run on the same data as the
//! engine: per-pair recompute, per-campaign aggregation and a hand-written,
//! single-threaded incremental implementation.

pub mod incremental;
pub mod recompute;

use dataflows::decode::Record;
use dataflows::reference::PairState;

use self::incremental::Incremental;
use self::recompute::{Recompute, Strategy};
use super::report::Kind;

/// The baseline of `kind`; `None` for the engine.
pub fn of_kind(kind: &Kind) -> Option<Box<dyn Implementation>> {
    match kind {
        Kind::Engine { .. } => None,
        Kind::Incremental => Some(Box::new(Incremental::new())),
        Kind::PerCampaign => Some(Box::new(Recompute::new(Strategy::PerCampaign))),
        Kind::PerPair => Some(Box::new(Recompute::new(Strategy::PerPair))),
    }
}

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
