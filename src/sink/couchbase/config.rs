//! `[sinks.couchbase]`: the collection the pairs go to, through the Query service.

use std::path::PathBuf;

use anyhow::bail;
use serde::Deserialize;

use crate::sink::bulk::{defaults, BulkConfig};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CouchbaseConfig {
    /// The Query service, e.g. `http://127.0.0.1:8093` (`https://…:18093` with TLS).
    #[serde(default = "default_url")]
    pub url: String,
    pub bucket: String,
    #[serde(default = "default_scope")]
    pub scope: String,
    #[serde(default = "default_collection")]
    pub collection: String,
    /// Documents per statement at most: one UPSERT (and one DELETE) per batch.
    #[serde(default = "default_max_actions")]
    pub max_actions: usize,
    /// Bytes of documents per statement at most.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// A document waits at most this long (ms) for its batch to fill up.
    #[serde(default = "defaults::flush_interval_ms")]
    pub flush_interval_ms: u64,
    /// Batches in flight at once, per worker.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// The statement timeout the Query service enforces (ms); the HTTP timeout is a bit longer.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Scan consistency of the start-up read of what the collection holds:
    /// `request_plus` (sees every earlier write) or `not_bounded`.
    #[serde(default = "default_scan_consistency")]
    pub scan_consistency: String,
    /// Create the collection's primary index at start-up if missing (the start-up read
    /// needs an index on document ids).
    #[serde(default = "default_create_primary_index")]
    pub create_primary_index: bool,
    #[serde(default = "defaults::retry_initial_ms")]
    pub retry_initial_ms: u64,
    #[serde(default = "defaults::retry_max_ms")]
    pub retry_max_ms: u64,
    pub username: Option<String>,
    /// Environment variable holding the password.
    pub password_env: Option<String>,
    /// PEM file of the CA of the cluster's certificates (HTTPS).
    pub ca_certificate: Option<PathBuf>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

fn default_url() -> String {
    "http://127.0.0.1:8093".into()
}
fn default_scope() -> String {
    "_default".into()
}
fn default_collection() -> String {
    "_default".into()
}
fn default_max_actions() -> usize {
    500
}
fn default_max_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_max_in_flight() -> usize {
    2
}
fn default_timeout_ms() -> u64 {
    30_000
}
fn default_scan_consistency() -> String {
    "request_plus".into()
}
fn default_create_primary_index() -> bool {
    true
}

impl CouchbaseConfig {
    /// `bucket`.`scope`.`collection`, with names checked so they can be quoted safely.
    pub fn keyspace(&self) -> anyhow::Result<String> {
        for (what, name) in [
            ("bucket", &self.bucket),
            ("scope", &self.scope),
            ("collection", &self.collection),
        ] {
            if name.is_empty() || name.contains('`') {
                bail!("sinks.couchbase.{what} {name:?} must be non-empty and contain no backquote");
            }
        }
        Ok(format!("`{}`.`{}`.`{}`", self.bucket, self.scope, self.collection))
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
