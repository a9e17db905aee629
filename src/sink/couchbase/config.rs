//! `[sinks.couchbase]`: the collection the pairs go to, through the Query service.

use serde::Deserialize;

use crate::sink::bulk::settings::{BulkClientConfig, BulkDefaults, UnknownKeys};
use crate::sink::bulk::BulkConfig;
use crate::sink::contract::SinkError;

/// The table's name, for errors.
pub const SECTION: &str = "sinks.couchbase";

/// Batching defaults: one UPSERT statement of at most 500 documents (4 MiB), two in flight.
pub const BULK_DEFAULTS: BulkDefaults = BulkDefaults::new(500, 4, 2);

#[derive(Clone, Debug, Deserialize)]
pub struct CouchbaseConfig {
    /// The Query service, e.g. `http://127.0.0.1:8093` (`https://…:18093` with TLS).
    #[serde(default = "default_url")]
    pub url: String,
    pub bucket: String,
    #[serde(default = "default_scope")]
    pub scope: String,
    #[serde(default = "default_collection")]
    pub collection: String,
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
    /// `bulk`, `retry`, `tls` and `auth`, as every bulk sink has them.
    #[serde(flatten)]
    pub client: BulkClientConfig,
    #[serde(flatten)]
    pub unknown: UnknownKeys,
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
    pub fn keyspace(&self) -> Result<String, SinkError> {
        for (what, name) in [
            ("bucket", &self.bucket),
            ("scope", &self.scope),
            ("collection", &self.collection),
        ] {
            if name.is_empty() || name.contains('`') {
                return Err(SinkError::Config(format!(
                    "{SECTION}.{what} {name:?} must be non-empty and contain no backquote"
                )));
            }
        }
        Ok(format!("`{}`.`{}`.`{}`", self.bucket, self.scope, self.collection))
    }

    pub fn bulk(&self) -> BulkConfig {
        self.client.bulk.resolve(BULK_DEFAULTS, &self.client.retry)
    }
}
