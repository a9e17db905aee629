//! The topics a rebuild reads, and the job config that names them.

use std::path::Path;

use dataflows::model::Topic;
use serde::{Deserialize, Serialize};

/// The three topics a rebuild reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topics {
    pub products: String,
    pub campaigns: String,
    /// Optional to the job: a missing one means a flat marketplace.
    pub categories: String,
}

impl Topics {
    pub fn by_kind(&self) -> [(Topic, &str); 3] {
        [
            (Topic::Products, &self.products),
            (Topic::Campaigns, &self.campaigns),
            (Topic::Categories, &self.categories),
        ]
    }

    pub fn name(&self, kind: Topic) -> &str {
        match kind {
            Topic::Products => &self.products,
            Topic::Campaigns => &self.campaigns,
            Topic::Categories => &self.categories,
        }
    }

    /// The kind of the topic named `name`, if it is one of these.
    pub fn kind_of(&self, name: &str) -> Option<Topic> {
        self.by_kind()
            .into_iter()
            .find(|(_, topic)| *topic == name)
            .map(|(kind, _)| kind)
    }
}

/// A job config on `topics` whose JSONL sink writes `changes` (its progress record and
/// dead letters beside it); no metrics endpoint, so several jobs can run at once.
pub fn config_text(brokers: &str, topics: &Topics, changes: &Path) -> String {
    let beside = |suffix: &str| changes.with_extension(suffix).display().to_string();
    format!(
        "[kafka]\nbrokers = {brokers:?}\nproducts_topic = {:?}\ncampaigns_topic = {:?}\ncategories_topic = {:?}\n\n\
         [sinks.jsonl]\npath = {:?}\n\n[dead_letter]\npath = {:?}\n\n[metrics]\nlisten = \"\"\n",
        topics.products,
        topics.campaigns,
        topics.categories,
        changes.display().to_string(),
        beside("rejected.jsonl"),
    )
}
