//! The pure logic of the eligibility job: model types, decoding, the eligibility rule and
//! the differential dataflow that maintains `eligible_products` and `eligible_stock` for
//! every (seller, campaign) pair. Nothing here performs I/O.

pub mod campaign_edit;
pub mod decode;
pub mod eligibility;
pub mod hashing;
pub mod instant;
pub mod model;
pub mod number;
pub mod operators;
pub mod reference;
pub mod rule;
pub mod state;
#[cfg(test)]
mod strategies;

pub use eligibility::{render_eligibility, ProductPlacement, QuietRebuild};
pub use model::{Campaign, Category, CategoryId, IdSet, PairChange, PairFigures, PairKey, Product, Time, Topic};
pub use operators::campaign_windows::{ClockRule, JobClock};
