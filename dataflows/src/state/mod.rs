//! What one worker of the eligibility operator keeps: its products, every campaign, the
//! category tree; and the figures per pair the totals and the reconcile keep.

pub mod campaigns;
pub mod lent_shares;
pub mod pairs;
pub mod products;
pub mod tree;

pub use campaigns::CampaignTable;
pub use lent_shares::LentShares;
pub use products::ProductTable;
pub use tree::CategoryTree;
