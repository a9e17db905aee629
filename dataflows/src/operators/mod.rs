//! The dataflow's own operators, one per file, each an extension of a stream or collection.

pub mod ancestors;
pub mod campaign_windows;
pub mod eligible_pairs;
pub mod pair_changes;
pub mod pair_totals;
pub mod reconcile;
pub mod upsert;

pub use pair_changes::PairChanges;
pub use reconcile::reconcile_with_held;
pub use upsert::Upsert;
