//! The approaches the engine replaces, written here so they run on the same data as the
//! engine: per-pair recompute, per-campaign aggregation and a hand-written,
//! single-threaded incremental implementation.

pub mod implementation;
pub mod incremental;
pub mod recompute;

pub use self::implementation::Implementation;
use self::incremental::Incremental;
use self::recompute::{Recompute, Strategy};
use super::kind::Kind;

/// The baseline of `kind`; `None` for the engine.
pub fn of_kind(kind: &Kind) -> Option<Box<dyn Implementation>> {
    match kind {
        Kind::Engine { .. } => None,
        Kind::Incremental => Some(Box::new(Incremental::new())),
        Kind::PerCampaign => Some(Box::new(Recompute::new(Strategy::PerCampaign))),
        Kind::PerPair => Some(Box::new(Recompute::new(Strategy::PerPair))),
    }
}
