//! What one worker of the eligibility operator keeps: its products, every campaign, the
//! category tree.

pub mod campaigns;
pub mod products;
pub mod tree;

pub use campaigns::CampaignTable;
pub use products::ProductTable;
pub use tree::CategoryTree;
