//! Which implementation a run measures: the engine (workers, feed) or one of the baselines.

use serde::{Deserialize, Serialize};

use super::engine::Feed;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Kind {
    Engine { workers: usize, feed: Feed },
    Incremental,
    PerCampaign,
    PerPair,
}

impl Kind {
    pub fn name(&self) -> String {
        match self {
            Kind::Engine {
                workers,
                feed: Feed::Decoded,
            } => format!("engine, {workers} worker(s)"),
            Kind::Engine {
                workers,
                feed: Feed::Json,
            } => format!("engine, {workers} worker(s), JSON decode"),
            Kind::Incremental => "hand-written incremental".into(),
            Kind::PerCampaign => "per-campaign aggregation".into(),
            Kind::PerPair => "per-pair recompute".into(),
        }
    }
}
