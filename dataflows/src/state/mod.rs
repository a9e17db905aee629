//! What one worker of the eligibility operator keeps: its products, every campaign.

pub mod campaigns;
pub mod products;

pub use campaigns::CampaignTable;
pub use products::ProductTable;
