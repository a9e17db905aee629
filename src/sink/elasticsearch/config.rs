//! `[sinks.elasticsearch]`: where the pairs index lives and how to write to it.

use serde::Deserialize;

use crate::sink::bulk::settings::{BulkClientConfig, BulkDefaults, UnknownKeys};
use crate::sink::bulk::BulkConfig;

/// The table's name, for errors.
pub const SECTION: &str = "sinks.elasticsearch";

/// Batching defaults: `_bulk` requests of at most 1,000 documents (5 MiB), four in flight.
pub const BULK_DEFAULTS: BulkDefaults = BulkDefaults::new(1_000, 5, 4);

#[derive(Clone, Debug, Deserialize)]
pub struct ElasticsearchConfig {
    /// Node URLs; requests go round-robin over them.
    #[serde(default = "default_urls")]
    pub urls: Vec<String>,
    /// The pairs index: one document per (campaign, seller) pair.
    #[serde(default = "default_index")]
    pub index: String,
    /// Primary shards of the index when the job creates it.
    #[serde(default = "default_shards")]
    pub shards: u32,
    /// Replicas of the index when the job creates it.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// Index holding the job's progress record (one document per job id).
    #[serde(default = "default_progress_index")]
    pub progress_index: String,
    /// The progress document's id: one per job writing to the same cluster.
    #[serde(default = "default_job_id")]
    pub job_id: String,
    /// Timeout of one request (ms).
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// `bulk`, `retry`, `tls` and `auth`, as every bulk sink has them.
    #[serde(flatten)]
    pub client: BulkClientConfig,
    #[serde(flatten)]
    pub unknown: UnknownKeys,
}

fn default_urls() -> Vec<String> {
    vec!["http://127.0.0.1:9200".into()]
}
fn default_index() -> String {
    "eligibility-pairs".into()
}
fn default_shards() -> u32 {
    1
}
fn default_replicas() -> u32 {
    1
}
fn default_progress_index() -> String {
    "eligibility-progress".into()
}
fn default_job_id() -> String {
    "eligibility".into()
}
fn default_request_timeout_ms() -> u64 {
    30_000
}

impl ElasticsearchConfig {
    /// Every default, for the given URL (the `campaigns` command without a config).
    pub fn for_url(url: &str, index: &str) -> Self {
        let mut config: ElasticsearchConfig = toml::from_str("").expect("every field has a default");
        config.urls = vec![url.to_owned()];
        config.index = index.to_owned();
        config
    }

    /// Where the pairs the index cannot hold (`id_too_long`) are marked: `<index>-refused`.
    pub fn refused_index(&self) -> String {
        format!("{}-refused", self.index)
    }

    pub fn bulk(&self) -> BulkConfig {
        self.client.bulk.resolve(BULK_DEFAULTS, &self.client.retry)
    }
}
