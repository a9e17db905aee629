//! The dataflow's own operators, one per file, each an extension of a stream or collection.

pub mod latest_per_key;
pub mod pair_changes;
pub mod reconcile;

pub use latest_per_key::{LatestPerKey, Upsert};
pub use pair_changes::PairChanges;
pub use reconcile::ReconcileWithHeld;
