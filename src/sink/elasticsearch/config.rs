//! `[sinks.elasticsearch]`: where the pairs index lives and how to write to it.

use std::path::PathBuf;

use serde::Deserialize;

use crate::sink::bulk::{defaults, BulkConfig};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// A bulk request carries at most this many documents…
    #[serde(default = "default_max_actions")]
    pub max_actions: usize,
    /// …and at most this many bytes.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// A document waits at most this long (ms) for its bulk request to fill up.
    #[serde(default = "defaults::flush_interval_ms")]
    pub flush_interval_ms: u64,
    /// Bulk requests in flight at once, per worker.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// First retry delay (ms); doubling, with jitter.
    #[serde(default = "defaults::retry_initial_ms")]
    pub retry_initial_ms: u64,
    /// Longest retry delay (ms).
    #[serde(default = "defaults::retry_max_ms")]
    pub retry_max_ms: u64,
    /// Timeout of one request (ms).
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Basic authentication user; the password comes from `password_env`.
    pub username: Option<String>,
    /// Environment variable holding the password.
    pub password_env: Option<String>,
    /// Environment variable holding an API key (the base64 `id:key` form).
    pub api_key_env: Option<String>,
    /// PEM file of the CA that signed the nodes' certificates (HTTPS).
    pub ca_certificate: Option<PathBuf>,
    /// Accept any certificate (development only).
    #[serde(default)]
    pub insecure_skip_verify: bool,
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
fn default_max_actions() -> usize {
    1_000
}
fn default_max_bytes() -> usize {
    5 * 1024 * 1024
}
fn default_max_in_flight() -> usize {
    4
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

    pub fn bulk(&self) -> BulkConfig {
        BulkConfig::from_limits(
            self.max_actions,
            self.max_bytes,
            self.flush_interval_ms,
            self.max_in_flight,
            (self.retry_initial_ms, self.retry_max_ms),
        )
    }
}
