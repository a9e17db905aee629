//! `[sinks.*.bulk]`: how a bulk sink batches its writes. Shared by every bulk sink; each
//! sink states its own defaults (`BulkDefaults`), which unset fields take.

use std::time::Duration;

use serde::Deserialize;

use super::BulkConfig;
use crate::retry::RetryConfig;
use crate::sink::auth::AuthConfig;
use crate::sink::tls::TlsConfig;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkSettings {
    /// A request carries at most this many documents…
    pub max_actions: Option<usize>,
    /// …and at most this many bytes.
    pub max_bytes: Option<usize>,
    /// A document waits at most this long (ms) for its request to fill up.
    pub flush_interval_ms: Option<u64>,
    /// Requests in flight at once, per worker.
    pub max_in_flight: Option<usize>,
}

/// A sink's defaults for the settings left unset.
#[derive(Clone, Copy, Debug)]
pub struct BulkDefaults {
    pub max_actions: usize,
    pub max_bytes: usize,
    pub flush_interval_ms: u64,
    pub max_in_flight: usize,
}

impl BulkDefaults {
    /// Requests of at most `max_actions` documents and `max_mib` MiB, `max_in_flight` at
    /// once per worker; a document waits at most 200 ms for its request to fill.
    pub const fn new(max_actions: usize, max_mib: usize, max_in_flight: usize) -> Self {
        BulkDefaults {
            max_actions,
            max_bytes: max_mib * 1024 * 1024,
            flush_interval_ms: 200,
            max_in_flight,
        }
    }
}

impl BulkSettings {
    /// The sink's batching and retry policy, each limit at least one.
    pub fn resolve(&self, defaults: BulkDefaults, retry: &RetryConfig) -> BulkConfig {
        BulkConfig {
            max_actions: self.max_actions.unwrap_or(defaults.max_actions).max(1),
            max_bytes: self.max_bytes.unwrap_or(defaults.max_bytes).max(1),
            flush_interval: Duration::from_millis(self.flush_interval_ms.unwrap_or(defaults.flush_interval_ms)),
            max_in_flight: self.max_in_flight.unwrap_or(defaults.max_in_flight).max(1),
            backoff: retry.backoff(),
        }
    }
}

/// What every bulk sink's table holds besides its destination, flattened into it: the
/// `bulk`, `retry`, `tls` and `auth` sub-tables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct BulkClientConfig {
    /// Batching (defaults: the sink's `BULK_DEFAULTS`).
    #[serde(default)]
    pub bulk: BulkSettings,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub auth: AuthConfig,
}

/// The keys of a table that no field took: serde cannot deny unknown fields beside a
/// flattened one, so each sink keeps the rest here and [`reject_unknown`] refuses them.
pub type UnknownKeys = std::collections::BTreeMap<String, toml::Value>;

/// Refuses a table with keys no field took, naming them, as `deny_unknown_fields` would.
pub fn reject_unknown(section: &str, unknown: &UnknownKeys) -> Result<(), String> {
    match unknown.keys().next() {
        None => Ok(()),
        Some(key) => Err(format!("unknown field `{key}` in [{section}]")),
    }
}
